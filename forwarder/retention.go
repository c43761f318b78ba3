package forwarder

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/prune"
)

// errNoSession: no replication session of this process has checked
// walpost's position against the server's identity yet (before the first,
// or standing by for a slot another process holds), so a prune pass waits.
var errNoSession = errors.New("no replication session has checked the position yet")

// errOtherServer: a prune pass's connection reaches another system than
// the one the last session checked walpost's position against.
var errOtherServer = errors.New("outbox prune refused on another server")

// isPrivilege: the role may not execute the function (a managed service
// that revoked pg_control_system()); the session's identity stands alone.
func isPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// prunePass is one prune of the outbox (watchers.prunePass); the rows it
// deleted are in the report, also when it failed part way.
type prunePass func(ctx context.Context) (*prune.Report, error)

// pruneOutbox runs pass every interval until ctx ends (outbox.retention).
// A failed pass is counted and logged with the key and never ends
// anything: forwarding goes on, and the next pass tries again.
func (w *watchers) pruneOutbox(ctx context.Context, every time.Duration, pass prunePass) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := pass(ctx)
		if rep != nil && rep.Deleted > 0 {
			w.m.pruned.Add(float64(rep.Deleted))
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // stopping: a batch cut short is rolled back
		case errors.Is(err, errNoSession), errors.Is(err, prune.ErrNothingConfirmed):
			w.log.Debug("outbox prune waits", "key", "outbox.retention", "slot", w.cfg.Postgres.Slot, "reason", redact.String(err.Error()))
		default:
			w.m.pruneErrors.Inc()
			deleted := 0
			if rep != nil {
				deleted = rep.Deleted
			}
			w.log.Warn("outbox prune failed; forwarding goes on and the next pass tries again",
				"key", "outbox.retention", "slot", w.cfg.Postgres.Slot, "deleted", deleted,
				"retry_in", every.String(), "err", redact.String(err.Error()))
		}
	}
}

// prunePass prunes once over a connection of the side pool (never the
// replication connection), on the identity the last session verified.
func (w *watchers) prunePass(ctx context.Context) (*prune.Report, error) {
	id := w.ident.Load()
	if id == nil {
		return nil, errNoSession
	}
	c, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, redact.Error(err)
	}
	defer c.Release()
	// The pool may have reconnected to another server behind the URL
	// since the session's check: the pass runs only on the system the
	// check vouched for.
	var sys int64
	switch err := c.QueryRow(ctx, `SELECT system_identifier FROM pg_control_system()`).Scan(&sys); {
	case err == nil && sys != id.SystemID:
		return nil, fmt.Errorf("%w: postgres.url now reaches system identifier %d, not %d where the last session checked walpost's position: no prune until a session has checked this server", errOtherServer, sys, id.SystemID)
	case err != nil && !isPrivilege(err):
		return nil, redact.Error(err)
	}
	p := &prune.Pruner{Config: w.cfg, Logger: w.log}
	return p.Pass(ctx, c.Conn(), *id, prune.Options{OlderThan: w.cfg.Outbox.Retention, Batch: w.cfg.Outbox.PruneBatch})
}
