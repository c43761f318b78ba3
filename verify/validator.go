package verify

import (
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pglogrepl"
)

// Expected describes one event a writer committed.
type Expected struct {
	Key   string
	Txn   string // identifies the writer's transaction
	Index int    // position of the insert within its transaction
}

// Observed is one record read from the topic, in offset order per
// partition.
type Observed struct {
	Key       string
	Partition int32
	Offset    int64
	CommitLSN pglogrepl.LSN // from the commit_lsn header
}

// Report is the validator's verdict.
type Report struct {
	Expected   int
	Delivered  int // distinct expected keys seen at least once
	Lost       []string
	Duplicated map[string]int // key → extra copies
	// Copies: where each duplicated key was seen, in the order read (the
	// first copy included), for the report.
	Copies     map[string][]string
	OutOfOrder []string // one line per violation
	Unexpected int      // records whose key was not expected
}

// OK reports whether nothing was lost and order held.
func (r *Report) OK() bool { return len(r.Lost) == 0 && len(r.OutOfOrder) == 0 }

// Duplicates is the number of extra copies.
func (r *Report) Duplicates() int {
	n := 0
	for _, c := range r.Duplicated {
		n += c
	}
	return n
}

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "expected %d, delivered %d, lost %d, duplicated %d (%d keys), out of order %d, unexpected %d",
		r.Expected, r.Delivered, len(r.Lost), r.Duplicates(), len(r.Duplicated), len(r.OutOfOrder), r.Unexpected)
	for i, k := range r.Lost {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more lost", len(r.Lost)-10)
			break
		}
		fmt.Fprintf(&b, "\n  lost %s", k)
	}
	dups := make([]string, 0, len(r.Duplicated))
	for k := range r.Duplicated {
		dups = append(dups, k)
	}
	sort.Strings(dups)
	for i, k := range dups {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more duplicated", len(dups)-10)
			break
		}
		fmt.Fprintf(&b, "\n  duplicated %s: %s", k, strings.Join(r.Copies[k], ", "))
	}
	for i, o := range r.OutOfOrder {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more out of order", len(r.OutOfOrder)-10)
			break
		}
		fmt.Fprintf(&b, "\n  out of order: %s", o)
	}
	return b.String()
}

// Validate checks observed records against the expected events. observed
// must be in offset order within each partition (the order a consumer
// reads them).
func Validate(expected []Expected, observed []Observed) *Report {
	r := &Report{Expected: len(expected), Duplicated: map[string]int{}, Copies: map[string][]string{}}
	at := func(o Observed) string {
		return fmt.Sprintf("partition %d offset %d (commit %s)", o.Partition, o.Offset, o.CommitLSN)
	}
	want := make(map[string]Expected, len(expected))
	for _, e := range expected {
		want[e.Key] = e
	}
	first := make(map[string]Observed, len(expected)) // key → its first copy
	type last struct {
		lsn    pglogrepl.LSN
		txn    string
		index  int
		key    string
		offset int64
		set    bool
	}
	byPart := map[int32]*last{}
	for _, o := range observed {
		e, ok := want[o.Key]
		if !ok {
			r.Unexpected++
			continue
		}
		if f, dup := first[o.Key]; dup {
			if r.Duplicated[o.Key] == 0 {
				r.Copies[o.Key] = append(r.Copies[o.Key], at(f))
			}
			r.Duplicated[o.Key]++
			r.Copies[o.Key] = append(r.Copies[o.Key], at(o))
			continue // order is judged on first occurrences
		}
		first[o.Key] = o
		p := byPart[o.Partition]
		if p == nil {
			p = &last{}
			byPart[o.Partition] = p
		}
		if p.set {
			switch {
			case o.Offset <= p.offset:
				r.OutOfOrder = append(r.OutOfOrder, fmt.Sprintf("partition %d: offset %d after %d", o.Partition, o.Offset, p.offset))
			case o.CommitLSN < p.lsn:
				r.OutOfOrder = append(r.OutOfOrder, fmt.Sprintf("partition %d: %s (commit %s) after %s (commit %s)", o.Partition, o.Key, o.CommitLSN, p.key, p.lsn))
			case o.CommitLSN == p.lsn && e.Txn == p.txn && e.Index < p.index:
				r.OutOfOrder = append(r.OutOfOrder, fmt.Sprintf("partition %d: %s (insert %d) after %s (insert %d) in one transaction", o.Partition, o.Key, e.Index, p.key, p.index))
			}
		}
		*p = last{lsn: o.CommitLSN, txn: e.Txn, index: e.Index, key: o.Key, offset: o.Offset, set: true}
	}
	for _, e := range expected {
		if _, ok := first[e.Key]; !ok {
			r.Lost = append(r.Lost, e.Key)
		} else {
			r.Delivered++
		}
	}
	sort.Strings(r.Lost)
	return r
}
