package inbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// fakeDB is the inbox's two tables and an effect counter in memory,
// answering the inbox's statements (and only those) as PostgreSQL would,
// with transactions that commit or roll back whole. For the rules and the
// property test; pg_test.go runs the same statements on PostgreSQL.
type fakeDB struct{ st fakeState }

type fakeState struct {
	marks   map[string]fakeMark // group/topic/partition
	keys    map[string]bool     // group/topic/key
	effects map[string]int      // key → times the effect committed
}

type fakeMark struct {
	lsn  string
	keys string // JSON array
	next int64
}

func (s fakeState) clone() fakeState {
	return fakeState{marks: maps.Clone(s.marks), keys: maps.Clone(s.keys), effects: maps.Clone(s.effects)}
}

func newFakeDB() *fakeDB {
	return &fakeDB{st: fakeState{marks: map[string]fakeMark{}, keys: map[string]bool{}, effects: map[string]int{}}}
}

// begin returns a transaction on a copy of the state.
func (d *fakeDB) begin() *fakeTx { return &fakeTx{db: d, st: d.st.clone()} }

type fakeTx struct {
	db *fakeDB
	st fakeState
}

func (t *fakeTx) commit() { t.db.st = t.st }

func scanInto(vals []any, dest []any) error {
	for i, d := range dest {
		switch d := d.(type) {
		case *string:
			*d = vals[i].(string)
		case *int64:
			*d = vals[i].(int64)
		case *int32:
			*d = vals[i].(int32)
		default:
			return fmt.Errorf("fake: scan into %T", d)
		}
	}
	return nil
}

func mkey(group any, topic string, partition int32) string {
	return fmt.Sprint(group, "/", topic, "/", partition)
}

func kkey(group any, topic, key string) string { return fmt.Sprint(group, "/", topic, "/", key) }

func (t *fakeTx) queryEach(_ context.Context, s string, args []any, each func(func(...any) error) error) error {
	var rows [][]any
	switch s {
	case lockSQL:
		var want []wmJSON
		if err := json.Unmarshal([]byte(args[1].(string)), &want); err != nil {
			return err
		}
		slices.SortFunc(want, func(a, b wmJSON) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		for _, w := range want {
			if m, ok := t.st.marks[mkey(args[0], w.Topic, w.Partition)]; ok {
				rows = append(rows, []any{w.Topic, w.Partition, m.lsn, m.keys, m.next})
			}
		}
	case keysSQL:
		var ks []struct{ T, K string }
		if err := json.Unmarshal([]byte(args[1].(string)), &ks); err != nil {
			return err
		}
		for _, k := range ks {
			id := kkey(args[0], k.T, k.K)
			if !t.st.keys[id] {
				t.st.keys[id] = true
				rows = append(rows, []any{k.T, k.K})
			}
		}
	default:
		return fmt.Errorf("fake: unexpected query %s", s)
	}
	for _, r := range rows {
		if err := each(func(dest ...any) error { return scanInto(r, dest) }); err != nil {
			return err
		}
	}
	return nil
}

func (t *fakeTx) exec(_ context.Context, s string, args ...any) (int64, error) {
	var ws []wmJSON
	if err := json.Unmarshal([]byte(args[1].(string)), &ws); err != nil {
		return 0, err
	}
	var n int64
	for _, w := range ws {
		id := mkey(args[0], w.Topic, w.Partition)
		m, ok := t.st.marks[id]
		switch s {
		case createSQL:
			if !ok {
				t.st.marks[id] = fakeMark{lsn: "0/0", keys: "[]", next: -1}
				n++
			}
		case storeSQL:
			if !ok {
				continue
			}
			if w.LSN != "" {
				l, err := ParseLSN(w.LSN)
				if err != nil {
					return 0, err
				}
				b, _ := json.Marshal(w.Keys)
				m.lsn, m.keys = l.String(), string(b)
			}
			m.next = w.Next
			t.st.marks[id] = m
			n++
		default:
			return 0, fmt.Errorf("fake: unexpected statement %s", s)
		}
	}
	return n, nil
}
