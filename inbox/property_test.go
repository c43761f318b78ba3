package inbox

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"
)

// The property: over any delivery history walpost can produce (restarts
// re-sending from the last confirmed transaction, partly sent
// transactions, a transaction's records in any order, quarantined records replayed any number of times, recover
// over a lost slot, a failover with synchronized_standby_slots to a
// timeline that reuses the old one's unpublished LSNs), read by a consumer
// that batches records of several partitions, loses transactions, rewinds
// to older offsets (a lost Kafka commit, a rebalance, a group reset), the
// effect of every event delivered is committed exactly once, and of no
// other event.
func TestPropertyEachEffectOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { checkHistory(rt, false) })
}

// With KeyEveryEvent, recover may also re-send rows delivered before the
// slot was lost (its margin).
func TestPropertyEachEffectOnceKeyEveryEvent(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { checkHistory(rt, true) })
}

type simRecord struct {
	key      string
	part     int32
	poisoned bool
}

type simTxn struct {
	lsn  LSN
	recs []simRecord
}

// simWalpost produces the topic's partitions as walpost would.
type simWalpost struct {
	rt          *rapid.T
	parts       int
	txns        []simTxn
	next        int // next transaction the stream reads
	confirmed   int // first transaction the slot has not confirmed
	handled     int // first transaction this run has not fully sent or quarantined
	quarantined int // first transaction whose poison rows are not all committed
	sentMax     int // highest transaction with a record in Kafka, -1
	logs        [][]*kgo.Record
	delivered   map[string]bool
	failovers   int
	created     int // the slot's creation point (recover makes a new slot)
}

func (w *simWalpost) append(r simRecord, lsn LSN, flag string) {
	p := r.part
	kr := rec(p, int64(len(w.logs[p])), r.key, lsn.String())
	if flag != "" {
		kr = rec(p, int64(len(w.logs[p])), r.key, lsn.String(), flag)
	}
	w.logs[p] = append(w.logs[p], kr)
	w.delivered[r.key] = true
}

// send streams transaction next, or a prefix of it when cut.
func (w *simWalpost) send(cut bool) {
	tx := w.txns[w.next]
	n := len(tx.recs)
	if cut {
		n = rapid.IntRange(0, n-1).Draw(w.rt, "cut")
	}
	// Records of one transaction may reach Kafka in any order (a refused
	// neighbour re-sent alone after the others): the watermark keeps keys,
	// not a position within the transaction.
	for _, r := range rapid.Permutation(tx.recs).Draw(w.rt, "order")[:n] {
		if !r.poisoned {
			w.append(r, tx.lsn, "")
			w.sentMax = max(w.sentMax, w.next)
		}
	}
	if cut {
		w.crash()
		return
	}
	w.next++
	w.handled = max(w.handled, w.next)
	w.quarantined = max(w.quarantined, w.next)
}

// confirm moves the slot forward, never past a transaction not handled
// (Invariant 1 of walpost).
func (w *simWalpost) confirm() {
	w.confirmed = rapid.IntRange(w.confirmed, w.handled).Draw(w.rt, "confirm")
}

// crash restarts walpost: the stream resumes at the slot's position.
func (w *simWalpost) crash() { w.next, w.handled = w.confirmed, w.confirmed }

// replay sends every quarantined record whose poison row is committed.
func (w *simWalpost) replay() {
	for _, tx := range w.txns[:w.quarantined] {
		for _, r := range tx.recs {
			if r.poisoned {
				w.append(r, tx.lsn, "replayed")
			}
		}
	}
}

// recover loses the slot and sends the rows of transactions from `from`
// up to those committed before the new slot's consistent point.
func (w *simWalpost) recover(from int) {
	h := rapid.IntRange(w.next, len(w.txns)).Draw(w.rt, "recoverTo")
	var cp LSN
	if h < len(w.txns) {
		cp = w.txns[h].lsn - 1
	} else {
		cp = w.txns[len(w.txns)-1].lsn + 1
	}
	for _, tx := range w.txns[from:h] {
		for _, r := range tx.recs {
			if !r.poisoned {
				w.append(r, cp, "recovered")
			}
		}
	}
	w.next, w.confirmed, w.handled, w.created = h, h, h, h
	w.quarantined = max(w.quarantined, h)
	if h > 0 {
		w.sentMax = max(w.sentMax, h-1)
	}
}

// failover promotes a standby holding every transaction walpost published
// (synchronized_standby_slots); the old primary's later transactions are
// lost with it, and the new timeline's transactions take LSNs from the
// switch point, which the lost ones had used. The standby's slot copy is
// behind: the stream resumes at an older confirmed position.
func (w *simWalpost) failover() {
	k := rapid.IntRange(max(w.sentMax+1, w.quarantined), len(w.txns)).Draw(w.rt, "switch")
	if k == len(w.txns) {
		return
	}
	w.failovers++
	s := LSN(0)
	if k > 0 {
		s = w.txns[k-1].lsn
	}
	s += LSN(rapid.IntRange(1, 60).Draw(w.rt, "switchPoint"))
	lost := len(w.txns) - k
	w.txns = w.txns[:k]
	for j := range lost {
		w.txns = append(w.txns, w.newTxn(fmt.Sprintf("f%d-%d", w.failovers, j), s+LSN(7*(j+1))))
	}
	// The copy is behind, never before the slot was created.
	w.confirmed = rapid.IntRange(w.created, w.confirmed).Draw(w.rt, "standbyConfirmed")
	w.crash()
}

func (w *simWalpost) newTxn(name string, lsn LSN) simTxn {
	tx := simTxn{lsn: lsn}
	for i := range rapid.IntRange(1, 4).Draw(w.rt, "records") {
		tx.recs = append(tx.recs, simRecord{
			key:      fmt.Sprintf("%s-%d", name, i),
			part:     int32(rapid.IntRange(0, w.parts-1).Draw(w.rt, "partition")),
			poisoned: rapid.IntRange(0, 9).Draw(w.rt, "poison") == 9,
		})
	}
	return tx
}

func checkHistory(rt *rapid.T, keyEvery bool) {
	w := &simWalpost{rt: rt, parts: rapid.IntRange(1, 3).Draw(rt, "partitions"), sentMax: -1, delivered: map[string]bool{}}
	w.logs = make([][]*kgo.Record, w.parts)
	for i := range rapid.IntRange(1, 25).Draw(rt, "transactions") {
		w.txns = append(w.txns, w.newTxn(fmt.Sprintf("t%d", i), LSN(100*(i+1))))
	}
	for range rapid.IntRange(0, 60).Draw(rt, "steps") {
		switch rapid.IntRange(0, 7).Draw(rt, "action") {
		case 0, 1, 2:
			if w.next < len(w.txns) {
				w.send(rapid.IntRange(0, 5).Draw(rt, "crashMid") == 5)
			}
		case 3:
			w.confirm()
		case 4:
			w.crash()
		case 5:
			w.replay()
		case 6:
			// Without KeyEveryEvent only a gap nothing of which was
			// delivered is exact (TestRecoveredMargin).
			if keyEvery {
				w.recover(rapid.IntRange(0, w.confirmed).Draw(rt, "margin"))
			} else if w.next == w.confirmed && w.sentMax < w.next {
				w.recover(w.confirmed)
			}
		case 7:
			w.failover()
		}
	}
	for w.next < len(w.txns) {
		w.send(false)
	}
	w.replay()

	c := &consumer{db: newFakeDB(), in: &Inbox{cfg: Config{Group: "billing", KeyEveryEvent: keyEvery}}}
	consume(rt, c, w.logs)

	for _, tx := range w.txns {
		for _, r := range tx.recs {
			if n := c.db.st.effects[r.key]; n != 1 {
				rt.Fatalf("effect of %s (lsn %s, partition %d, poisoned %v) committed %d times", r.key, tx.lsn, r.part, r.poisoned, n)
			}
		}
	}
	for k, n := range c.db.st.effects {
		if n != 1 || !w.delivered[k] {
			rt.Fatalf("effect of %s committed %d times, delivered %v", k, n, w.delivered[k])
		}
	}
}

// consume reads the logs as a consumer group member whose batches mix
// partitions, some of whose transactions fail, and which rewinds.
func consume(rt *rapid.T, c *consumer, logs [][]*kgo.Record) {
	pos := make([]int, len(logs))
	rewinds, losses := 0, 0
	for {
		var batch []*kgo.Record
		size := rapid.IntRange(1, 8).Draw(rt, "batch")
		for range size {
			var open []int
			for p := range logs {
				if pos[p] < len(logs[p]) {
					open = append(open, p)
				}
			}
			if len(open) == 0 {
				break
			}
			p := open[rapid.IntRange(0, len(open)-1).Draw(rt, "from")]
			batch = append(batch, logs[p][pos[p]])
			pos[p]++
		}
		if len(batch) == 0 {
			return
		}
		tx := c.db.begin()
		_, err := c.in.run(context.Background(), tx, batch, func(fresh []*kgo.Record) error {
			for _, r := range fresh {
				ev, _ := parse(r)
				tx.st.effects[ev.keyString()]++
			}
			return nil
		})
		if err != nil {
			rt.Fatal(err)
		}
		// Killed before the commit (at most 20 times, so the run ends).
		lost := losses < 20 && rapid.IntRange(0, 5).Draw(rt, "lost") == 5
		if lost {
			losses++
		}
		if !lost {
			tx.commit()
		}
		if (lost || rapid.IntRange(0, 7).Draw(rt, "rewind") == 7) && rewinds < 10 {
			rewinds++
			p := rapid.IntRange(0, len(logs)-1).Draw(rt, "rewindPartition")
			pos[p] = rapid.IntRange(0, pos[p]).Draw(rt, "rewindTo")
		}
		if lost {
			// Everything of the lost batch comes again: resume each
			// partition at its stored offset, or earlier.
			for p := range logs {
				m, ok := c.db.st.marks[fmt.Sprintf("billing/%s/%d", topic, p)]
				if !ok {
					pos[p] = 0
				} else if m.next < int64(pos[p]) {
					pos[p] = int(m.next)
				}
			}
		}
	}
}
