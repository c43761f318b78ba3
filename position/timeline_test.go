package position

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// history3 is 00000003.history as PostgreSQL writes it after two
// promotions: timeline 1 ended at 0/3000148, timeline 2 at 0/5000A28.
const history3 = "1\t0/3000148\tno recovery target specified\n\n# a comment\n2\t0/5000A28\tno recovery target specified\n"

func TestSwitchPoint(t *testing.T) {
	tests := []struct {
		name    string
		history string
		tli     int32
		want    pglogrepl.LSN
		ok      bool
		wantErr bool
	}{
		{name: "parent", history: history3, tli: 2, want: 0x5000A28, ok: true},
		{name: "grandparent", history: history3, tli: 1, want: 0x3000148, ok: true},
		{name: "the history's own timeline is no ancestor", history: history3, tli: 3},
		{name: "a later timeline is no ancestor", history: history3, tli: 4},
		{name: "empty history", history: "", tli: 1},
		{name: "CRLF and spaces", history: "1 0/3000148 reason\r\n", tli: 1, want: 0x3000148, ok: true},
		{name: "bad timeline", history: "x\t0/3000148\treason\n", tli: 1, wantErr: true},
		{name: "bad switch point", history: "1\tnot-an-lsn\treason\n", tli: 1, wantErr: true},
		{name: "missing switch point", history: "1\n", tli: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := SwitchPoint([]byte(tt.history), tt.tli)
			if (err != nil) != tt.wantErr {
				t.Fatalf("SwitchPoint error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want || ok != tt.ok {
				t.Errorf("SwitchPoint(%d) = %s, %v; want %s, %v", tt.tli, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestAcrossSwitch: on another timeline, transactions are skipped up to the
// earlier of the stored LSN and the switch point away from the stored
// timeline, only when the slot is behind it; never past the switch point.
func TestAcrossSwitch(t *testing.T) {
	tests := []struct {
		name    string
		row     Row
		slot    pglogrepl.LSN
		want    Plan
		wantErr bool
	}{
		{name: "position before the switch: skip to the position",
			row: Row{Identity: Identity{Timeline: 2}, LSN: 0x4000000}, slot: 0x3800000,
			want: Plan{TimelineChanged: true, SwitchPoint: 0x5000A28, SkipTo: 0x4000000}},
		{name: "position past the switch: skip to the switch point only",
			row: Row{Identity: Identity{Timeline: 2}, LSN: 0x6000000}, slot: 0x3800000,
			want: Plan{TimelineChanged: true, SwitchPoint: 0x5000A28, SkipTo: 0x5000A28}},
		{name: "two switches back: the grandparent's switch point",
			row: Row{Identity: Identity{Timeline: 1}, LSN: 0x6000000}, slot: 0x1000000,
			want: Plan{TimelineChanged: true, SwitchPoint: 0x3000148, SkipTo: 0x3000148}},
		{name: "slot at or past the switch point: nothing to skip",
			row: Row{Identity: Identity{Timeline: 2}, LSN: 0x6000000}, slot: 0x5000A28,
			want: Plan{TimelineChanged: true, SwitchPoint: 0x5000A28}},
		{name: "not an ancestor: nothing skipped",
			row: Row{Identity: Identity{Timeline: 7}, LSN: 0x6000000}, slot: 0x1000000,
			want: Plan{TimelineChanged: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AcrossSwitch(tt.row, Slot{Name: "s", Exists: true, Confirmed: tt.slot}, []byte(history3))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("AcrossSwitch = %+v, want %+v", got, tt.want)
			}
		})
	}
	got, err := AcrossSwitch(Row{Identity: Identity{Timeline: 1}, LSN: 0x6000000}, Slot{Confirmed: 0x100}, []byte("1\tbroken\n"))
	if err == nil || got.SkipTo != 0 {
		t.Errorf("AcrossSwitch on a broken history = %+v, %v; want an error and nothing skipped", got, err)
	}
}
