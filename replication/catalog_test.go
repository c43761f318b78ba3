package replication

import (
	"reflect"
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
