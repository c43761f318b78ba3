package resend

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is what resend did (or, with DryRun, would do).
type Report struct {
	DryRun bool
	Table  string
	By     By
	// Selection is what was chosen (with --resume: the recorded one).
	Selection Selection
	// SnapshotAt is when the snapshot the rows were read in was taken
	// (with --resume: the first run's).
	SnapshotAt time.Time
	// Matched rows of this run's snapshot (after --resume: those after
	// the recorded row), with MatchedBytes of key, payload and headers,
	// their times between First and Last.
	Matched      int64
	MatchedBytes int64
	First, Last  time.Time
	// Produced rows of this run are in Kafka (exactly-once: in committed
	// transactions), with Bytes of key, payload and headers, in Elapsed.
	Produced int64
	Bytes    int64
	Elapsed  time.Duration
	// Resumed: --resume; Before rows (BeforeBytes) were produced by the
	// earlier runs.
	Resumed     bool
	Before      int64
	BeforeBytes int64
	// ProgressFile records the progress; Finished when every row is in.
	ProgressFile string
	Finished     bool
	// ExactlyOnce: the rows went inside Txns Kafka transactions of
	// TransactionalID.
	ExactlyOnce     bool
	Txns            int
	TransactionalID string
}

// Rate is the rows produced per second.
func (r *Report) Rate() float64 { return rate(r.Produced, r.Elapsed) }

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// byteSize renders n bytes in B, KB, MB or GB (powers of 1000).
func byteSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// Order describes the order rows are produced in, for By.
func Order(by By) string {
	if by == ByCommitTimestamp {
		return "commit order: by commit timestamp (track_commit_timestamp = on), then transaction and insert order; rows without a commit timestamp by created_at"
	}
	return "created_at order (track_commit_timestamp = off: the inserting transaction's start, which concurrent transactions may commit in another order), then transaction and insert order"
}

// Write renders the report as text.
func (r *Report) Write(w io.Writer) error {
	var b strings.Builder
	pr := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	if r.DryRun {
		pr("dry run: nothing is produced or recorded")
	}
	pr("table:         %s", r.Table)
	pr("chosen by:     %s", r.describe())
	pr("order:         %s", Order(r.By))
	pr("snapshot:      %s (rows committed later are not resent; walpost run streams them)", ts(r.SnapshotAt))
	topic := "each row's topic (kafka.topic when it has none)"
	if r.Selection.Topic != "" {
		topic = r.Selection.Topic + " (--topic)"
	}
	pr("topic:         %s", topic)
	if r.DryRun {
		pr("rows:          %d match, %s", r.Matched, byteSize(r.MatchedBytes))
		pr("time range:    %s .. %s", ts(r.First), ts(r.Last))
		return write(w, b.String())
	}
	pr("rows:          %d of %d produced with walpost_resent: true, %s", r.Produced, r.Matched, byteSize(r.Bytes))
	pr("time range:    %s .. %s", ts(r.First), ts(r.Last))
	pr("rate:          %.0f rows/s over %s", r.Rate(), r.Elapsed.Round(time.Millisecond))
	if r.Resumed {
		pr("resumed:       %d row(s), %s, were produced by the earlier run(s)", r.Before, byteSize(r.BeforeBytes))
	}
	if r.ExactlyOnce {
		pr("exactly-once:  %d Kafka transaction(s) of %s", r.Txns, r.TransactionalID)
	}
	state := "finished"
	if !r.Finished {
		state = "not finished: continue with walpost resend --resume"
	}
	pr("progress:      %s (%s)", r.ProgressFile, state)
	return write(w, b.String())
}

func write(w io.Writer, s string) error {
	_, err := io.WriteString(w, s)
	return err
}

// describe renders the selection.
func (r *Report) describe() string {
	s := r.Selection
	var parts []string
	switch {
	case !s.Since.IsZero() && !s.Until.IsZero():
		parts = append(parts, fmt.Sprintf("%s at or after %s and before %s", r.By, ts(s.Since), ts(s.Until)))
	case !s.Since.IsZero():
		parts = append(parts, fmt.Sprintf("%s at or after %s", r.By, ts(s.Since)))
	case !s.Until.IsZero():
		parts = append(parts, fmt.Sprintf("%s before %s", r.By, ts(s.Until)))
	}
	if len(s.Keys) > 0 {
		parts = append(parts, fmt.Sprintf("idempotency_key among %d key(s)", len(s.Keys)))
	}
	if s.Where != "" {
		parts = append(parts, "--where "+s.Where)
	}
	if len(parts) == 0 {
		return "every row of the table"
	}
	return strings.Join(parts, "; ")
}
