package inbox

// mark is one partition's watermark for one consumer group: the commit
// LSN of the last transaction applied from walpost's first sends, the
// idempotency keys applied at exactly that LSN, and the Kafka offset after
// the last record handled. It only moves forward (Invariant 1).
type mark struct {
	lsn  LSN
	keys []string // applied at exactly lsn, in the order applied
	// fresh are keys applied at lsn in the batch being decided, views of
	// the records' bytes until settle makes them keys: most records of a
	// batch move the watermark past them, and a key is made only for
	// what the watermark keeps.
	fresh      [][]byte
	set        map[string]struct{}
	nextOffset int64 // -1: none recorded
	changed    bool  // anything to write back
	moved      bool  // lsn or keys to write back
}

// verdict is what the watermark says of a record.
type verdict uint8

const (
	skip   verdict = iota // applied before
	apply                 // new
	lookup                // the watermark cannot tell: ask the key table
)

// setMin is how many keys the watermark holds before it indexes them.
const setMin = 16

func (m *mark) has(key []byte) bool {
	if len(m.keys)+len(m.fresh) < setMin {
		for _, k := range m.keys {
			if k == string(key) {
				return true
			}
		}
		for _, k := range m.fresh {
			if string(k) == string(key) {
				return true
			}
		}
		return false
	}
	if m.set == nil {
		m.set = make(map[string]struct{}, (len(m.keys)+len(m.fresh))*2)
		for _, k := range m.keys {
			m.set[k] = struct{}{}
		}
		for _, k := range m.fresh {
			m.set[string(k)] = struct{}{}
		}
	}
	_, ok := m.set[string(key)]
	return ok
}

// decide applies the watermark rules (doc.go, "The rules") to ev.
func (m *mark) decide(ev *event) verdict {
	if ev.kind == ordered {
		switch {
		case ev.lsn < m.lsn:
			// Rule 1: a transaction before the watermark's was applied
			// whole: walpost re-sends whole transactions, in commit
			// order, from the first one it had not confirmed.
			return skip
		case ev.lsn == m.lsn:
			// Rule 2: the watermark's own transaction, re-sent: its keys
			// applied so far are in the watermark.
			if m.has(ev.keyB) {
				return skip
			}
			return apply
		default:
			return apply // Rule 3: a later transaction
		}
	}
	// Rule 4: replayed, recovered or headerless records carry an LSN
	// that says nothing of their place; only an exact match is known.
	if ev.hasLSN && ev.lsn == m.lsn && m.has(ev.keyB) {
		return skip
	}
	return lookup
}

// advance records an applied first send (ordered).
func (m *mark) advance(ev *event) {
	if ev.lsn > m.lsn {
		m.lsn = ev.lsn
		m.keys, m.fresh = m.keys[:0], m.fresh[:0]
		m.set = nil
	}
	m.fresh = append(m.fresh, ev.keyB)
	if m.set != nil {
		m.set[string(ev.keyB)] = struct{}{}
	}
	m.changed, m.moved = true, true
}

// settle makes the batch's fresh keys keys, once the batch is decided.
func (m *mark) settle() {
	for _, k := range m.fresh {
		m.keys = append(m.keys, string(k))
	}
	m.fresh = nil
}

func (m *mark) keysMoved() bool { return m.moved }

// handled records that the record at offset was decided (applied or
// skipped): a consumer resumes after it.
func (m *mark) handled(offset int64) {
	if offset >= 0 && offset+1 > m.nextOffset {
		m.nextOffset = offset + 1
		m.changed = true
	}
}
