package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Millis is a duration that marshals to JSON as milliseconds.
type Millis time.Duration

func (m Millis) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", float64(m)/float64(time.Millisecond))), nil
}

func (m Millis) String() string { return roundDuration(time.Duration(m)).String() }

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// Latency summarises commit-to-consume latency over the first copy of each
// delivered event: from the writer's clock right after COMMIT returned to
// the consumer's clock when the record was fetched, both on this host.
// It is not the broker append time: walpost stamps each record with its
// transaction's commit time, so the record timestamp cannot show it.
type Latency struct {
	Samples int    `json:"samples"`
	P50     Millis `json:"p50_ms"`
	P99     Millis `json:"p99_ms"`
	Max     Millis `json:"max_ms"`
}

// PartitionResult is the verdict for one partition of the topic.
type PartitionResult struct {
	Partition   int32    `json:"partition"`
	StartOffset int64    `json:"start_offset"` // end offset before the run
	Records     int      `json:"records"`      // records of this run, copies included
	Delivered   int      `json:"delivered"`    // distinct events of this run
	Duplicates  int      `json:"duplicates"`   // extra copies
	OutOfOrder  int      `json:"out_of_order"` // order violations among first copies
	Violations  []string `json:"violations,omitempty"`
}

// Result is a LeakTest's report.
type Result struct {
	RunID        string `json:"run_id"`
	Table        string `json:"table"`
	Topic        string `json:"topic"`
	Events       int    `json:"events"` // requested
	Writers      int    `json:"writers"`
	MaxTxnSize   int    `json:"max_txn_size"`
	PayloadBytes int    `json:"payload_bytes"`

	Written      int    `json:"written"` // committed
	Transactions int    `json:"transactions"`
	WriteElapsed Millis `json:"write_elapsed_ms"`

	Delivered      int               `json:"delivered"`
	Lost           int               `json:"lost"`
	LostKeys       []string          `json:"lost_keys,omitempty"` // at most 100
	Duplicates     int               `json:"duplicates"`          // extra copies
	DuplicatedKeys int               `json:"duplicated_keys"`
	OutOfOrder     int               `json:"out_of_order"`
	Unexpected     int               `json:"unexpected"` // records with this run's prefix that no writer committed
	NoCommitLSN    int               `json:"records_without_commit_lsn"`
	Partitions     []PartitionResult `json:"partitions"`
	Latency        Latency           `json:"commit_to_consume"`
	Timeout        Millis            `json:"timeout_ms"`
	Elapsed        Millis            `json:"elapsed_ms"`

	TimedOut       bool   `json:"timed_out"`       // the timeout passed before every event arrived
	NothingArrived bool   `json:"nothing_arrived"` // not one record of this run arrived
	Interrupted    bool   `json:"interrupted"`     // the run was cancelled before it finished
	CleanupError   string `json:"cleanup_error,omitempty"`
	OK             bool   `json:"ok"`           // lost = 0, order held, the run finished (and no duplicate with exactly_once)
	Isolation      string `json:"isolation"`    // the consumer's: read_uncommitted or read_committed
	ExactlyOnce    bool   `json:"exactly_once"` // duplicates count as a failure

	Report *Report `json:"-"` // the validator's full verdict
}

// PerPartition runs the validator on each partition's records alone: keys
// map to one partition each, so its order verdict per partition is the
// whole verdict split up.
func PerPartition(expected []Expected, observed []Observed, starts map[int32]int64) []PartitionResult {
	byPart := map[int32][]Observed{}
	for p := range starts {
		byPart[p] = nil
	}
	for _, o := range observed {
		byPart[o.Partition] = append(byPart[o.Partition], o)
	}
	out := make([]PartitionResult, 0, len(byPart))
	for p, obs := range byPart {
		pr := PartitionResult{Partition: p, StartOffset: starts[p], Records: len(obs)}
		if len(obs) > 0 {
			rep := Validate(expected, obs)
			pr.Delivered = rep.Delivered
			pr.Duplicates = rep.Duplicates()
			pr.OutOfOrder = len(rep.OutOfOrder)
			pr.Violations = rep.OutOfOrder[:min(len(rep.OutOfOrder), 10)]
		}
		out = append(out, pr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// CommitToConsume computes the latency percentiles (nearest rank) from
// each delivered event's commit time to the time its first copy was
// fetched. A negative difference (the record fetched before COMMIT
// returned to the writer) counts as 0.
func CommitToConsume(expected []Expected, commits map[string]time.Time, firstSeen map[string]time.Time) Latency {
	lats := make([]time.Duration, 0, len(firstSeen))
	for _, e := range expected {
		seen, ok := firstSeen[e.Key]
		c, ok2 := commits[e.Txn]
		if !ok || !ok2 {
			continue
		}
		lats = append(lats, max(seen.Sub(c), 0))
	}
	return latencyOf(lats)
}

func latencyOf(lats []time.Duration) Latency {
	if len(lats) == 0 {
		return Latency{}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	rank := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(lats)))) - 1
		return lats[min(max(i, 0), len(lats)-1)]
	}
	return Latency{Samples: len(lats), P50: Millis(rank(0.50)), P99: Millis(rank(0.99)), Max: Millis(lats[len(lats)-1])}
}

// WriteJSON writes the report as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the human-readable report.
func (r *Result) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "walpost verify: run %s, table %s, topic %s (%d partitions)\n", r.RunID, r.Table, r.Topic, len(r.Partitions))
	fmt.Fprintf(tw, "  written\t%d events in %d transactions (1..%d rows, %d writers, ~%d-byte payloads) in %s\n",
		r.Written, r.Transactions, r.MaxTxnSize, r.Writers, r.PayloadBytes, r.WriteElapsed)
	if r.Written != r.Events {
		fmt.Fprintf(tw, "  \t(%d requested)\n", r.Events)
	}
	fmt.Fprintf(tw, "  delivered\t%d\n", r.Delivered)
	fmt.Fprintf(tw, "  lost\t%d\n", r.Lost)
	fmt.Fprintf(tw, "  duplicated\t%d (%d keys)\n", r.Duplicates, r.DuplicatedKeys)
	fmt.Fprintf(tw, "  out of order\t%d\n", r.OutOfOrder)
	if r.Unexpected > 0 {
		fmt.Fprintf(tw, "  unexpected\t%d (records of this run no writer committed)\n", r.Unexpected)
	}
	if r.Latency.Samples > 0 {
		fmt.Fprintf(tw, "  commit to consume\tp50 %s  p99 %s  max %s  (%d events)\n", r.Latency.P50, r.Latency.P99, r.Latency.Max, r.Latency.Samples)
	} else {
		fmt.Fprintf(tw, "  commit to consume\t-\n")
	}
	fmt.Fprintf(tw, "  elapsed\t%s\n", r.Elapsed)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  partition\tfrom offset\trecords\tdelivered\tduplicates\tout of order\t")
	for _, p := range r.Partitions {
		fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%d\t%d\t\n", p.Partition, p.StartOffset, p.Records, p.Delivered, p.Duplicates, p.OutOfOrder)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Partitions {
		for _, v := range p.Violations {
			fmt.Fprintf(w, "  out of order: %s\n", v)
		}
		if p.OutOfOrder > len(p.Violations) {
			fmt.Fprintf(w, "  … %d more out of order in partition %d\n", p.OutOfOrder-len(p.Violations), p.Partition)
		}
	}
	for i, k := range r.LostKeys {
		if i == 10 {
			fmt.Fprintf(w, "  … %d more lost\n", r.Lost-10)
			break
		}
		fmt.Fprintf(w, "  lost %s\n", k)
	}
	fmt.Fprintln(w)
	if r.NothingArrived && r.Written > 0 {
		fmt.Fprintf(w, "Nothing of this run arrived on topic %s within %s after the last commit: is `walpost run` forwarding %s with this configuration?\n",
			r.Topic, time.Duration(r.Timeout), r.Table)
	} else if r.TimedOut {
		fmt.Fprintf(w, "Timed out waiting for delivery (%d of %d arrived); a slow forwarder with a backlog needs a longer --timeout.\n", r.Delivered, r.Written)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "Interrupted before the run finished: the figures are partial.")
	}
	if r.NoCommitLSN > 0 {
		fmt.Fprintf(w, "Note: %d records had no commit_lsn header; order across transactions was not checked for them.\n", r.NoCommitLSN)
	}
	if r.CleanupError != "" {
		fmt.Fprintf(w, "Warning: %s\n", r.CleanupError)
	}
	verdict := "PASS: nothing lost, order held per partition"
	if r.ExactlyOnce && r.OK {
		verdict = "PASS: nothing lost, nothing duplicated, order held per partition (exactly-once, " + r.Isolation + ")"
	}
	if r.Duplicates > 0 && r.OK {
		verdict += fmt.Sprintf(" (%d duplicate copies: allowed, at-least-once)", r.Duplicates)
	}
	if !r.OK {
		var why []string
		if r.Lost > 0 {
			why = append(why, fmt.Sprintf("%d lost", r.Lost))
		}
		if r.OutOfOrder > 0 {
			why = append(why, fmt.Sprintf("%d out of order", r.OutOfOrder))
		}
		if r.Interrupted {
			why = append(why, "interrupted")
		}
		if r.ExactlyOnce && r.Duplicates > 0 {
			why = append(why, fmt.Sprintf("%d duplicated (delivery.mode exactly-once promises none to read_committed consumers)", r.Duplicates))
		}
		if r.Written != r.Events {
			why = append(why, fmt.Sprintf("%d of %d written", r.Written, r.Events))
		}
		verdict = "FAIL: " + strings.Join(why, ", ")
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}
