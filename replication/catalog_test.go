package replication

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestSlotRowInfo(t *testing.T) {
	str := func(s string) *string { return &s }
	pid, safe := int32(4242), int64(1<<30)
	for _, c := range []struct {
		name string
		row  SlotRow
		want SlotInfo
	}{
		{"logical, active", SlotRow{
			SlotType: "logical", Plugin: str("pgoutput"), Database: str("shop"), Active: true, ActivePID: &pid,
			ConfirmedFlushLSN: str("3/1A2B3F00"), RestartLSN: str("3/19000028"), WALStatus: str("reserved"), SafeWALSize: &safe,
		}, SlotInfo{
			Exists: true, SlotType: "logical", Plugin: "pgoutput", Database: "shop", Active: true, ActivePID: 4242,
			ConfirmedFlush: pglogrepl.LSN(0x3_1A2B3F00), RestartLSN: pglogrepl.LSN(0x3_19000028), WALStatus: "reserved", SafeWALSize: &safe,
		}},
		{"physical, NULL columns", SlotRow{SlotType: "physical"}, SlotInfo{Exists: true, SlotType: "physical"}},
		{"lost", SlotRow{SlotType: "logical", Plugin: str("pgoutput"), Database: str("shop"), ConfirmedFlushLSN: str("0/3000148"), WALStatus: str("lost")},
			SlotInfo{Exists: true, SlotType: "logical", Plugin: "pgoutput", Database: "shop", ConfirmedFlush: pglogrepl.LSN(0x3000148), WALStatus: "lost"}},
	} {
		if got := c.row.Info(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Info() = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestPublicationOperations(t *testing.T) {
	for _, c := range []struct {
		pub  Publication
		want []string
	}{
		{Publication{}, nil},
		{Publication{Insert: true}, []string{"insert"}},
		{Publication{Insert: true, Update: true, Delete: true, Truncate: true}, []string{"insert", "update", "delete", "truncate"}},
		{Publication{Truncate: true, Update: true}, []string{"update", "truncate"}},
	} {
		if got := c.pub.Operations(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v.Operations() = %q, want %q", c.pub, got, c.want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		num     int
		ok      bool
	}{
		{"13.23", 130023, false},
		{"12.1", 120001, false},
		{"14.0", 140000, true},
		{"14.20", 140020, true},
		{"15.18 (Debian 15.18-0+deb12u1)", 150018, true},
		{"18.1", 180001, true},
	} {
		err := CheckVersion(tc.version, tc.num)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckVersion(%q, %d) = %v, want nil", tc.version, tc.num, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("CheckVersion(%q, %d) = %v, want ErrConfig", tc.version, tc.num, err)
			continue
		}
		for _, want := range []string{"PostgreSQL " + tc.version, "14 or newer"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("CheckVersion(%q, %d) = %q, lacks %q", tc.version, tc.num, err, want)
			}
		}
	}
}
