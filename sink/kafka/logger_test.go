package kafka_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink/kafka"
)

// syncBuffer is a bytes.Buffer safe for the client's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClientLoggerRoutineAtDebug: at INFO, a transactional sink's commits
// write none of franz-go's per-transaction lines (the log would hold five
// per commit); at DEBUG they are all there, and a line franz-go writes
// once keeps INFO.
func TestClientLoggerRoutineAtDebug(t *testing.T) {
	routine := []string{`msg=flushing`, `msg="beginning transaction"`, `msg="ending transaction"`,
		`msg="end transaction response successfully received"`}
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			var log syncBuffer
			c := newTxnCluster(t)
			k := newKafka(t, c, kafka.Config{TransactionalID: kafka.TransactionalID("s1", 7), TransactionTimeout: 10 * time.Second,
				CheckpointTopic: cpTopic, Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: level}))})
			if err := k.InitProducer(ctx20(t)); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := produceTxn(t, k, "a", 2); err != nil {
					t.Fatal(err)
				}
				cp := kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100 * (1 + 1<<i)}
				if err := k.StageCheckpoint(ctx20(t), cp); err != nil {
					t.Fatal(err)
				}
				if err := k.Flush(ctx20(t)); err != nil {
					t.Fatal(err)
				}
				if err := k.CommitTxn(ctx20(t), cp); err != nil {
					t.Fatal(err)
				}
			}
			out := log.String()
			for _, line := range routine {
				n := strings.Count(out, "level=INFO "+line)
				if d := strings.Count(out, "level=DEBUG "+line); level == slog.LevelDebug && d < 3 {
					t.Errorf("at DEBUG, %d lines %s for 3 commits, want at least 3", d, line)
				}
				if n != 0 {
					t.Errorf("%d lines %s at INFO for 3 commits, want none (at DEBUG)", n, line)
				}
			}
			if !strings.Contains(out, `level=INFO msg="initializing producer id"`) {
				t.Errorf("franz-go's once-only INFO line is missing; log:\n%s", out)
			}
		})
	}
}

// TestClientLoggerAbortAtInfo: franz-go's EndTxn lines of an abort
// (commit=false) keep INFO; a commit's go to DEBUG.
func TestClientLoggerAbortAtInfo(t *testing.T) {
	var log syncBuffer
	l := kafka.ClientLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		l.Log(kgo.LogLevelInfo, "ending transaction", "transactional_id", "t", "commit", commit, "producer_id", int64(1), "epoch", int16(2))
		l.Log(kgo.LogLevelInfo, "end transaction response successfully received", "transactional_id", "t", "commit", commit)
	}
	out := log.String()
	for _, want := range []string{`level=DEBUG msg="ending transaction" transactional_id=t commit=true`,
		`level=DEBUG msg="end transaction response successfully received" transactional_id=t commit=true`,
		`level=INFO msg="ending transaction" transactional_id=t commit=false`,
		`level=INFO msg="end transaction response successfully received" transactional_id=t commit=false`} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %s; log:\n%s", want, out)
		}
	}
}
