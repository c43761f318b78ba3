package recovery

import (
	"testing"
	"time"

	"github.com/walpost/walpost/position"
)

// TestSnapshotUsableOnlyOnItsSystem: a recorded snapshot chooses rows only
// on the system it was taken on and when the server is not behind it;
// otherwise recover falls back to created_at (another system's rows have
// unrelated, smaller transaction ids: the snapshot would choose none).
func TestSnapshotUsableOnlyOnItsSystem(t *testing.T) {
	row := position.Row{Identity: position.Identity{SystemID: 7, Timeline: 1}, Snapshot: "100:105:100", LastCommit: time.Now()}
	for _, c := range []struct {
		name      string
		id        position.Identity
		notBehind bool
		want      bool
	}{
		{"same system", position.Identity{SystemID: 7, Timeline: 2}, true, true},
		{"another system", position.Identity{SystemID: 8, Timeline: 1}, true, false},
		{"server behind the snapshot", position.Identity{SystemID: 7, Timeline: 1}, false, false},
	} {
		if got := snapshotUsable(row, c.id, c.notBehind); got != c.want {
			t.Errorf("%s: snapshotUsable = %v, want %v", c.name, got, c.want)
		}
	}
	if got := snapshotUsable(position.Row{Identity: row.Identity}, row.Identity, true); got {
		t.Error("a row without a snapshot is usable")
	}
}
