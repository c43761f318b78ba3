package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5"
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

type fakeRow struct {
	vals []any
	err  error
}

func (r fakeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	for i, d := range dest {
		switch d := d.(type) {
		case *string:
			*d = r.vals[i].(string)
		case *int64:
			*d = r.vals[i].(int64)
		default:
			return fmt.Errorf("fake: scan into %T", d)
		}
	}
	return nil
}

func mkey(args []any) string { return fmt.Sprint(args[0], "/", args[1], "/", args[2]) }

func (t *fakeTx) queryRow(_ context.Context, s string, args ...any) interface{ Scan(...any) error } {
	if s != lockSQL {
		return fakeRow{err: fmt.Errorf("fake: unexpected query %s", s)}
	}
	m, ok := t.st.marks[mkey(args)]
	if !ok {
		return fakeRow{err: pgx.ErrNoRows}
	}
	return fakeRow{vals: []any{m.lsn, m.keys, m.next}}
}

func (t *fakeTx) exec(_ context.Context, s string, args ...any) (int64, error) {
	switch s {
	case createSQL:
		if _, ok := t.st.marks[mkey(args)]; ok {
			return 0, nil
		}
		t.st.marks[mkey(args)] = fakeMark{lsn: "0/0", keys: "[]", next: -1}
		return 1, nil
	case storeSQL:
		l, err := ParseLSN(args[3].(string))
		if err != nil {
			return 0, err
		}
		var keys []string
		if err := json.Unmarshal([]byte(args[4].(string)), &keys); err != nil {
			return 0, err
		}
		b, _ := json.Marshal(keys)
		t.st.marks[mkey(args)] = fakeMark{lsn: l.String(), keys: string(b), next: args[5].(int64)}
		return 1, nil
	case storeOffsetSQL:
		m := t.st.marks[mkey(args)]
		m.next = args[3].(int64)
		t.st.marks[mkey(args)] = m
		return 1, nil
	case keySQL:
		if t.st.keys[mkey(args)] {
			return 0, nil
		}
		t.st.keys[mkey(args)] = true
		return 1, nil
	}
	return 0, fmt.Errorf("fake: unexpected statement %s", s)
}

func (t *fakeTx) queryStrings(_ context.Context, s string, args ...any) ([]string, error) {
	if s != keysSQL {
		return nil, fmt.Errorf("fake: unexpected query %s", s)
	}
	var keys []string
	if err := json.Unmarshal([]byte(args[2].(string)), &keys); err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		id := mkey([]any{args[0], args[1], k})
		if !t.st.keys[id] {
			t.st.keys[id] = true
			out = append(out, k)
		}
	}
	return out, nil
}
