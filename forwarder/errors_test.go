package forwarder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestClassify: one table from the error a session ended with to what the
// session loop does and the walpost_reconnects_total cause, in the
// documented order (context, terminal, destination, slot active, retry).
func TestClassify(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	dest := &destinationError{Key: "k", Topic: "t", Class: "TOPIC_AUTHORIZATION_FAILED", Err: &sink.Error{Kind: sink.Destination, Class: "TOPIC_AUTHORIZATION_FAILED", Err: errors.New("denied")}}
	transientSink := fmt.Errorf("kafka failed event %q: %w", "k", &sink.Error{Kind: sink.Transient, Class: "CLIENT", Err: errors.New("client closed")})
	tests := []struct {
		name   string
		ctx    context.Context
		err    error
		action Action
		cause  string
	}{
		{"shutdown wins over any error", ended, replication.ErrSlotLost, Stop, ""},
		{"shutdown without error", ended, nil, Stop, ""},
		{"decode error", live, &replication.DecodeError{LSN: 1, Err: errors.New("truncated")}, Fail, ""},
		{"slot lost", live, fmt.Errorf("session: %w", replication.ErrSlotLost), Fail, ""},
		{"slot gone after a recorded position", live, fmt.Errorf("session: %w", position.ErrGap), Fail, ""},
		{"another cluster behind the URL", live, fmt.Errorf("session: %w", position.ErrOtherSystem), Fail, ""},
		{"position table missing", live, fmt.Errorf("read: %w", position.ErrNoTable), Fail, ""},
		{"schema", live, replication.ErrSchema, Fail, ""},
		{"set-up", live, replication.ErrConfig, Fail, ""},
		{"wrong password", live, &pgconn.PgError{Code: "28P01"}, Fail, ""},
		{"breaker", live, fmt.Errorf("%w: 101 events", errBreaker), Fail, ""},
		{"checkpoint regression is an assertion, never retried", live, fmt.Errorf("seal: %w", checkpoint.ErrRegression), Fail, ""},
		{"poison table cannot take the event", live, fmt.Errorf("quarantine event %q: %w", "k", &poison.TableError{Table: "p", Column: "outbox_id", Problem: "does not cast"}), Fail, ""},
		{"poison table schema", live, &poison.TableError{Table: "p", Column: "commit_lsn", Problem: "has type text"}, Fail, ""},
		{"destination", live, dest, WaitForDestination, "kafka_destination"},
		{"destination wrapped", live, fmt.Errorf("session: %w", dest), WaitForDestination, "kafka_destination"},
		{"slot active", live, fmt.Errorf("%w: pid 42", replication.ErrSlotActive), StandBy, "slot_active"},
		{"postgres error", live, &pgconn.PgError{Code: "57P01"}, Retry, "postgres_error"},
		{"network", live, &net.OpError{Op: "read", Err: errors.New("connection reset")}, Retry, "network"},
		{"eof", live, fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), Retry, "network"},
		{"transient kafka failure", live, transientSink, Retry, "kafka"},
		{"fenced by another walpost: terminal", live, fmt.Errorf("event %q: %w", "k", kafka.ErrFenced), Fail, ""},
		{"fenced while holding the slot: the loser of a race stands by, this one goes on", live,
			fmt.Errorf("%w: %s", errFencedHoldingSlot, fmt.Errorf("event %q: %w", "k", kafka.ErrFenced).Error()), Retry, "kafka_fenced_holding_slot"},
		{"exactly-once checkpoint does not match the WAL", live, fmt.Errorf("%w: checkpoint 0/900", errCheckpointMismatch), Retry, "other"},
		{"exactly-once ACL refused (InitProducerID)", live, fmt.Errorf("session: %w", &sink.Error{Kind: sink.Destination, Class: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", Err: errors.New("grant WRITE on TransactionalId walpost-s-1")}), WaitForDestination, "kafka_destination"},
		{"anything else", live, errors.New("boom"), Retry, "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, cause := Classify(tt.ctx, tt.err)
			if a != tt.action || cause != tt.cause {
				t.Fatalf("Classify(%v) = %s, %q; want %s, %q", tt.err, a, cause, tt.action, tt.cause)
			}
		})
	}
}

// TestBackoffProgress: a session that made progress (delivered events)
// or ran longer than a minute starts the back-off again at 1 s and the
// streak at 0; failures in a row without progress grow it, and the streak
// counts them.
func TestBackoffProgress(t *testing.T) {
	type run struct {
		progressed bool
		ran        time.Duration
	}
	fail, ok := run{false, time.Second}, run{true, 3 * time.Second}
	for _, tc := range []struct {
		name       string
		runs       []run
		wantNext   time.Duration // the back-off the next failure waits (before jitter)
		wantStreak int
	}{
		{"first failure", []run{fail}, 2 * time.Second, 1},
		{"three failures without progress", []run{fail, fail, fail}, 8 * time.Second, 3},
		{"failures, then a session that delivered events", []run{fail, fail, fail, ok}, 2 * time.Second, 0},
		{"failures, then a quiet session of two minutes", []run{fail, fail, {false, 2 * time.Minute}}, 2 * time.Second, 0},
		{"progress, then failures without it", []run{ok, fail, fail}, 8 * time.Second, 2},
		{"many failures: the ceiling", []run{fail, fail, fail, fail, fail, fail, fail, fail}, 30 * time.Second, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackoff(30 * time.Second)
			for _, r := range tc.runs {
				b.after(r.progressed, r.ran)
				b.next(30 * time.Second)
			}
			if b.streak != tc.wantStreak || b.d != tc.wantNext {
				t.Errorf("after %v: streak %d and back-off %s, want %d and %s", tc.runs, b.streak, b.d, tc.wantStreak, tc.wantNext)
			}
		})
	}
}

// TestBackoff: waits double from 1 s up to the ceiling asked for, each
// jittered within [d/2, d], and reset starts again at 1 s.
func TestBackoff(t *testing.T) {
	b := newBackoff(30e9)
	want := []float64{1, 2, 4, 5, 5}
	for i, w := range want {
		got := b.next(5e9).Seconds()
		if got < w/2 || got > w {
			t.Fatalf("wait %d = %.2fs, want within [%.1f, %.1f]", i, got, w/2, w)
		}
	}
	b.reset()
	if got := b.next(5e9).Seconds(); got < 0.5 || got > 1 {
		t.Fatalf("after reset: %.2fs, want within [0.5, 1]", got)
	}
}
