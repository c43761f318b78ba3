package recovery

import (
	"testing"
	"time"

	"github.com/walpost/walpost/position"
)

// TestWindow: the gap's rows start at the last confirmed commit (minus
// CommitSlack, or recover.margin by created_at), or at --since; with no
// transaction ever confirmed they start at the beginning of the table, not
// at the row's updated_at, which every forward position write (a
// keepalive-only one too) refreshes after rows it never confirmed.
func TestWindow(t *testing.T) {
	margin := 10 * time.Minute
	last := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	since := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	// The shape of finding 4: an outbox transaction committed at 09:00 and
	// was never confirmed; a session's last write at 11:00 moved the LSN on
	// a keepalive below it and refreshed updated_at.
	unconfirmed := position.Row{Slot: "walpost", LSN: 0x1000, UpdatedAt: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)}
	confirmed := position.Row{Slot: "walpost", LSN: 0x1000, LastCommit: last, UpdatedAt: last.Add(time.Hour)}
	var none time.Time
	tests := []struct {
		name                    string
		row                     position.Row
		since                   time.Time
		commitTS                bool
		by                      By
		commitFrom, createdFrom time.Time
	}{
		{"commit timestamps", confirmed, none, true, ByCommitTimestamp, last.Add(-CommitSlack), last.Add(-margin)},
		{"created_at", confirmed, none, false, ByCreatedAt, none, last.Add(-margin)},
		{"since", confirmed, since, true, BySince, since, since},
		{"since without a confirmed commit", unconfirmed, since, false, BySince, since, since},
		{"nothing confirmed, commit timestamps", unconfirmed, none, true, ByAll, none, none},
		{"nothing confirmed, created_at", unconfirmed, none, false, ByAll, none, none},
	}
	for _, tt := range tests {
		by, commitFrom, createdFrom := window(tt.row, tt.since, tt.commitTS, margin)
		if by != tt.by || !commitFrom.Equal(tt.commitFrom) || !createdFrom.Equal(tt.createdFrom) {
			t.Errorf("%s: window = %q, commit from %v, created from %v; want %q, %v, %v",
				tt.name, by, commitFrom, createdFrom, tt.by, tt.commitFrom, tt.createdFrom)
		}
	}
}
