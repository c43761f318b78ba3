package position

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	id := Identity{SystemID: 7714276467305341919, Timeline: 1}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	row := Row{Slot: "s", Identity: id, LSN: 0x5000, LastCommit: at, UpdatedAt: at}
	tests := []struct {
		name     string
		row      Row
		found    bool
		id       Identity
		slot     Slot
		want     Plan
		wantErr  error
		wantText []string // in the message
	}{
		{name: "first install: no row, no slot", id: id, slot: Slot{Name: "s"}},
		{name: "no row, slot exists (upgrade)", id: id, slot: Slot{Name: "s", Exists: true, Confirmed: 0x100}},
		{name: "row, slot missing", row: row, found: true, id: id, slot: Slot{Name: "s"},
			wantErr: ErrGap, wantText: []string{`slot "s" does not exist`, "0/5000", "2026-12-01T10:00:00Z", "walpost recover --dry-run", `creates slot "s" with an exported snapshot`}},
		{name: "row, slot invalidated", row: row, found: true, id: id, slot: Slot{Name: "s", Exists: true, Lost: true, Confirmed: 0x4000},
			wantErr: ErrGap, wantText: []string{"invalidated", "0/5000", "walpost recover"}},
		{name: "row of another cluster", row: row, found: true, id: Identity{SystemID: 42, Timeline: 1}, slot: Slot{Name: "s", Exists: true, Confirmed: 0x100},
			wantErr: ErrOtherSystem, wantText: []string{"system identifier 42", "7714276467305341919", "0/5000", "walpost recover"}},
		{name: "another cluster wins over a missing slot", row: row, found: true, id: Identity{SystemID: 42, Timeline: 1}, slot: Slot{Name: "s"},
			wantErr: ErrOtherSystem},
		{name: "unfinished recovery: refused although the slot exists", row: Row{Slot: "s", Identity: id, LSN: 0x5000, LastCommit: at, UpdatedAt: at, RecoveringSince: at},
			found: true, id: id, slot: Slot{Name: "s", Exists: true, Confirmed: 0x9000},
			wantErr: ErrGap, wantText: []string{"walpost recover of slot \"s\" started at 2026-12-01T10:00:00Z and did not finish", "run walpost recover again"}},
		{name: "slot behind the row: skip to the row", row: row, found: true, id: id, slot: Slot{Name: "s", Exists: true, Confirmed: 0x4000},
			want: Plan{SkipTo: 0x5000}},
		{name: "slot at the row", row: row, found: true, id: id, slot: Slot{Name: "s", Exists: true, Confirmed: 0x5000}},
		{name: "slot ahead of the row", row: row, found: true, id: id, slot: Slot{Name: "s", Exists: true, Confirmed: 0x6000}},
		{name: "another timeline: never skip", row: row, found: true, id: Identity{SystemID: id.SystemID, Timeline: 2}, slot: Slot{Name: "s", Exists: true, Confirmed: 0x4000},
			want: Plan{TimelineChanged: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Check(tt.row, tt.found, tt.id, tt.slot)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Check error = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !IsTerminal(err) {
				t.Errorf("IsTerminal(%v) = false", err)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message lacks %q:\n%s", s, err)
				}
			}
			if got != tt.want {
				t.Errorf("Check plan = %+v, want %+v", got, tt.want)
			}
		})
	}
}
