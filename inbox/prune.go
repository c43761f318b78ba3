package inbox

import (
	"context"
	"fmt"
)

const pruneSQL = `DELETE FROM inbox_key WHERE consumer_group = $1 AND applied_at < now() - make_interval(secs => $2)`

// Prune deletes the group's key rows older than Config.KeepFor, by the
// database's clock, and returns how many; with KeepFor 0 it deletes
// nothing. Watermark rows are never pruned: there is one per partition.
func (in *Inbox) Prune(ctx context.Context, db Execer) (int64, error) {
	if in.cfg.KeepFor == 0 {
		return 0, nil
	}
	t, err := db.Exec(ctx, pruneSQL, in.cfg.Group, in.cfg.KeepFor.Seconds())
	if err != nil {
		return 0, fmt.Errorf("inbox: prune the key rows of group %s: %w", in.cfg.Group, err)
	}
	return t.RowsAffected(), nil
}
