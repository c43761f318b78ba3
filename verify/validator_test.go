package verify

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// stream is a synthetic run: txns transactions of rows rows each, in commit
// order, keys spread over parts partitions (row i of a transaction goes to
// partition i%parts), and the clean observed stream a correct forwarder
// would produce, in consumer order (partitions interleaved record by
// record as they were appended).
type stream struct {
	expected []Expected
	observed []Observed
}

func cleanStream(txns, rows, parts int) stream {
	var s stream
	next := make([]int64, parts)
	for t := 0; t < txns; t++ {
		lsn := pglogrepl.LSN(0x1000 + 0x100*t) // commit order
		for i := 0; i < rows; i++ {
			key := fmt.Sprintf("t%d-r%d", t, i)
			s.expected = append(s.expected, Expected{Key: key, Txn: fmt.Sprintf("t%d", t), Index: i})
			p := int32(i % parts)
			s.observed = append(s.observed, Observed{Key: key, Partition: p, Offset: next[p], CommitLSN: lsn})
			next[p]++
		}
	}
	return s
}

// find returns the index in observed of key.
func (s stream) find(t *testing.T, key string) int {
	t.Helper()
	i := slices.IndexFunc(s.observed, func(o Observed) bool { return o.Key == key })
	if i < 0 {
		t.Fatalf("no %s in the stream", key)
	}
	return i
}

// swapKeys swaps the keys and commit LSNs of two records and leaves their
// partitions and offsets: what a consumer sees when the forwarder appended
// them in the wrong order.
func (s stream) swapKeys(t *testing.T, a, b string) {
	t.Helper()
	i, j := s.find(t, a), s.find(t, b)
	oi, oj := s.observed[i], s.observed[j]
	if oi.Partition != oj.Partition {
		t.Fatalf("%s and %s are in different partitions", a, b)
	}
	s.observed[i].Key, s.observed[i].CommitLSN = oj.Key, oj.CommitLSN
	s.observed[j].Key, s.observed[j].CommitLSN = oi.Key, oi.CommitLSN
}

func mustPass(t *testing.T, r *Report) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("validator failed a correct stream: %s", r)
	}
}

func mustFail(t *testing.T, r *Report, want string) {
	t.Helper()
	if r.OK() {
		t.Fatalf("validator passed a broken stream: %s", r)
	}
	if !strings.Contains(r.String(), want) {
		t.Fatalf("report does not mention %q:\n%s", want, r)
	}
}

func TestValidatorCleanStream(t *testing.T) {
	s := cleanStream(50, 7, 3)
	r := Validate(s.expected, s.observed)
	mustPass(t, r)
	if r.Expected != 350 || r.Delivered != 350 || len(r.Lost) != 0 || r.Duplicates() != 0 || r.Unexpected != 0 || len(r.OutOfOrder) != 0 {
		t.Fatalf("clean stream: %s", r)
	}
}

// A consumer may read partitions in any interleaving; order is per
// partition only.
func TestValidatorPartitionsInAnyInterleaving(t *testing.T) {
	s := cleanStream(30, 5, 3)
	obs := slices.Clone(s.observed)
	slices.SortStableFunc(obs, func(a, b Observed) int { return int(b.Partition - a.Partition) }) // partition 2 first, then 1, then 0
	mustPass(t, Validate(s.expected, obs))
}

func TestValidatorCatchesLost(t *testing.T) {
	s := cleanStream(20, 4, 2)
	i := s.find(t, "t7-r2")
	obs := slices.Delete(slices.Clone(s.observed), i, i+1)
	r := Validate(s.expected, obs)
	mustFail(t, r, "lost t7-r2")
	if len(r.Lost) != 1 || r.Delivered != 79 || len(r.OutOfOrder) != 0 {
		t.Fatalf("one dropped record: %s", r)
	}
}

func TestValidatorCatchesLostWholeTransaction(t *testing.T) {
	s := cleanStream(10, 3, 2)
	obs := slices.DeleteFunc(slices.Clone(s.observed), func(o Observed) bool { return strings.HasPrefix(o.Key, "t4-") })
	r := Validate(s.expected, obs)
	mustFail(t, r, "lost t4-r0")
	if !slices.Equal(r.Lost, []string{"t4-r0", "t4-r1", "t4-r2"}) {
		t.Fatalf("lost = %v", r.Lost)
	}
}

func TestValidatorNothingDelivered(t *testing.T) {
	s := cleanStream(5, 5, 3)
	r := Validate(s.expected, nil)
	mustFail(t, r, "lost 25")
	if len(r.Lost) != 25 || r.Delivered != 0 {
		t.Fatalf("nothing delivered: %s", r)
	}
}

// A repeated record is reported as a duplicate; at-least-once allows it,
// so the verdict stays OK.
func TestValidatorCatchesDuplicated(t *testing.T) {
	s := cleanStream(20, 4, 2)
	i := s.find(t, "t3-r1")
	dup := s.observed[i]
	// The copy is appended later on the same partition, at a new offset.
	var last int64
	for _, o := range s.observed {
		if o.Partition == dup.Partition {
			last = max(last, o.Offset)
		}
	}
	dup.Offset = last + 1
	obs := append(slices.Clone(s.observed), dup)
	r := Validate(s.expected, obs)
	if r.Duplicates() != 1 || r.Duplicated["t3-r1"] != 1 || len(r.Duplicated) != 1 {
		t.Fatalf("duplicate not reported: %s (%v)", r, r.Duplicated)
	}
	if !strings.Contains(r.String(), "duplicated 1 (1 keys)") {
		t.Fatalf("report: %s", r)
	}
	// The report says where both copies are.
	first := fmt.Sprintf("partition %d offset %d (commit %s)", dup.Partition, s.observed[i].Offset, dup.CommitLSN)
	second := fmt.Sprintf("partition %d offset %d (commit %s)", dup.Partition, dup.Offset, dup.CommitLSN)
	if !strings.Contains(r.String(), "duplicated t3-r1: "+first+", "+second) {
		t.Fatalf("report does not place the copies: %s", r)
	}
	mustPass(t, r)
}

// After a crash, the forwarder re-sends everything after the confirmed
// position: the copies come after the first occurrences, in their own
// order, interleaved with new events. Nothing is lost, order holds.
func TestValidatorPassesDuplicatesAfterFirstOccurrence(t *testing.T) {
	s := cleanStream(40, 5, 2)
	// Partition by partition: first copies of t0..t29, then t20..t29 again
	// (the replay), then t30..t39.
	var obs []Observed
	for p := int32(0); p < 2; p++ {
		var off int64
		emit := func(from, to int) {
			for _, o := range s.observed {
				var tn int
				fmt.Sscanf(o.Key, "t%d-", &tn)
				if o.Partition == p && tn >= from && tn < to {
					o.Offset = off
					off++
					obs = append(obs, o)
				}
			}
		}
		emit(0, 30)
		emit(20, 30)
		emit(30, 40)
	}
	r := Validate(s.expected, obs)
	mustPass(t, r)
	if r.Delivered != 200 || r.Duplicates() != 50 || len(r.Duplicated) != 50 {
		t.Fatalf("replay after crash: %s", r)
	}
}

// Two records of different transactions on one partition appended in the
// wrong order (later commit first).
func TestValidatorCatchesSwapAcrossTransactions(t *testing.T) {
	s := cleanStream(20, 2, 2)
	s.swapKeys(t, "t5-r0", "t6-r0") // both on partition 0, adjacent there
	r := Validate(s.expected, s.observed)
	mustFail(t, r, "partition 0: t5-r0 (commit 0/1500) after t6-r0 (commit 0/1600)")
	if len(r.Lost) != 0 || r.Duplicates() != 0 {
		t.Fatalf("swap across transactions: %s", r)
	}
}

// The swap need not be adjacent: t2's row after t9's row on the partition.
func TestValidatorCatchesFarSwapAcrossTransactions(t *testing.T) {
	s := cleanStream(20, 4, 2)
	s.swapKeys(t, "t2-r1", "t9-r3")
	mustFail(t, Validate(s.expected, s.observed), "partition 1:")
}

// Two inserts of one transaction on one partition in the wrong order.
func TestValidatorCatchesSwapWithinTransaction(t *testing.T) {
	s := cleanStream(20, 6, 2)
	s.swapKeys(t, "t8-r1", "t8-r3") // rows 1, 3, 5 of t8 are on partition 1
	r := Validate(s.expected, s.observed)
	mustFail(t, r, "partition 1: t8-r1 (insert 1) after t8-r3 (insert 3) in one transaction")
	if len(r.OutOfOrder) != 1 {
		t.Fatalf("want exactly one violation: %s", r)
	}
}

// Offsets must rise within a partition as the consumer reads them.
func TestValidatorCatchesOffsetsGoingBackwards(t *testing.T) {
	s := cleanStream(10, 2, 1)
	obs := slices.Clone(s.observed)
	// Keys and commits stay in order; offsets 5 and 6 come back as 6, 5.
	obs[5].Offset, obs[6].Offset = obs[6].Offset, obs[5].Offset
	mustFail(t, Validate(s.expected, obs), "partition 0: offset 5 after 6")
	// A repeated offset is a violation too.
	obs = slices.Clone(s.observed)
	obs[7].Offset = obs[6].Offset
	mustFail(t, Validate(s.expected, obs), "partition 0: offset 6 after 6")
}

// Records of other producers (keys not expected) are counted, not judged.
func TestValidatorCountsUnexpected(t *testing.T) {
	s := cleanStream(5, 2, 1)
	obs := slices.Clone(s.observed)
	obs = append(obs, Observed{Key: "someone-else", Partition: 0, Offset: 0, CommitLSN: 1})
	r := Validate(s.expected, obs)
	mustPass(t, r)
	if r.Unexpected != 1 {
		t.Fatalf("unexpected = %d, want 1", r.Unexpected)
	}
}
