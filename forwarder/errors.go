package forwarder

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// Action is what the session loop does after a session ended with an error.
type Action int

const (
	// Stop: walpost is shutting down (its context ended); the session
	// drained and confirmed what was acknowledged. Not an error.
	Stop Action = iota
	// Fail: the error cannot be cured by reconnecting (see Classify); walpost
	// exits with it.
	Fail
	// WaitForDestination: the destination refuses the events (authorization,
	// unknown topic); nothing is quarantined, walpost retries with back-off
	// up to 30 s until an operator fixes it.
	WaitForDestination
	// StandBy: another process streams from the slot; walpost retries every
	// few seconds (at most 5 s) and takes over when the slot is free.
	StandBy
	// Retry: a transient failure (network, server restart, Kafka
	// unreachable); walpost reconnects with back-off up to 30 s.
	Retry
)

func (a Action) String() string {
	switch a {
	case Stop:
		return "stop"
	case Fail:
		return "fail"
	case WaitForDestination:
		return "wait-for-destination"
	case StandBy:
		return "stand-by"
	default:
		return "retry"
	}
}

// Classify decides what a session's error means, in this order: the
// context first (ctx ended: Stop), then terminal errors (a pgoutput message
// that cannot be decoded, a lost slot, a gap after walpost's recorded position or another
// cluster behind the URL, a schema or set-up error, a refused
// login or privilege, the poison breaker, a checkpoint regression, a poison
// table that cannot take an event: Fail),
// then destination errors (WaitForDestination), then an active slot
// (StandBy), else Retry (errDataLoss with its own cause). cause is the label of walpost_reconnects_total for
// the actions that reconnect, "" otherwise.
//
// A nil err is Stop when ctx ended (a clean shutdown) and Fail otherwise:
// only a shutdown ends a session without an error, so a session that
// returned nil while walpost was not stopping is a bug in walpost that a
// reconnect would hide (and the session loop has no error to log for it).
// The loop returns that nil, and Run reports "session loop ended without a
// shutdown".
func Classify(ctx context.Context, err error) (a Action, cause string) {
	switch {
	case ctx.Err() != nil:
		return Stop, ""
	case err == nil:
		return Fail, ""
	case replication.IsTerminal(err), position.IsTerminal(err), errors.Is(err, errBreaker), errors.Is(err, checkpoint.ErrRegression),
		errors.Is(err, poison.ErrUnwritable), errors.Is(err, kafka.ErrFenced), errors.Is(err, kafka.ErrCheckpointTopic):
		// Invariant INV-1: a regression means the watermark arithmetic is
		// broken; reconnecting could confirm past an unacknowledged event.
		return Fail, ""
	case errors.As(err, new(*destinationError)), destination(err):
		return WaitForDestination, "kafka_destination"
	case errors.Is(err, replication.ErrSlotActive):
		return StandBy, "slot_active"
	case errors.Is(err, errDataLoss):
		return Retry, "kafka_data_loss"
	case errors.Is(err, errFencedHoldingSlot):
		return Retry, "kafka_fenced_holding_slot"
	}
	return Retry, retryCause(err)
}

// destination says whether err is a sink failure that only fixing the
// destination ends (an ACL refused on the checkpoint topic or the
// transactional id in exactly-once mode: sink/kafka names the grant).
func destination(err error) bool {
	var se *sink.Error
	return errors.As(err, &se) && se.Kind == sink.Destination
}

// retryCause labels a retried failure by where it came from.
func retryCause(err error) string {
	if errors.As(err, new(*pgconn.PgError)) {
		return "postgres_error"
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "network"
	}
	if errors.As(err, new(*sink.Error)) {
		return "kafka"
	}
	return "other"
}
