package resend

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Cursor is a row's place in the resend order (Order): its time (commit
// timestamp, or created_at), its inserting transaction id, its command id
// within that transaction and its physical place. The time is kept as
// PostgreSQL's text (ISO, UTC, microseconds) so that it compares exactly
// when read back.
type Cursor struct {
	At   string `json:"at"`
	XID  int64  `json:"xid"`
	CMin int64  `json:"cmin"`
	CTID string `json:"ctid"`
}

// Selection is what a resend chose: the flags, with --since and --until
// resolved to times.
type Selection struct {
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	Keys  []string  `json:"keys,omitempty"`
	Where string    `json:"where,omitempty"`
	Topic string    `json:"topic,omitempty"`
}

// stateVersion is the progress file's format.
const stateVersion = 1

// State is the progress file: the selection of a resend and how far it
// got. Invariant 3: Cursor is the last row of a prefix of the resend
// order whose every row Kafka acknowledged (in exactly-once mode: whose
// transactions committed), so --resume, which continues after it, skips
// no row that is not in Kafka.
type State struct {
	Version    int       `json:"version"`
	Table      string    `json:"table"`
	By         By        `json:"by"`
	Selection  Selection `json:"selection"`
	StartedAt  time.Time `json:"started_at"`
	SnapshotAt time.Time `json:"snapshot_at"`
	// Matched is what the first run's snapshot held.
	Matched int64 `json:"matched"`
	// Produced and Bytes count the rows of the prefix, over every run.
	Produced int64   `json:"produced"`
	Bytes    int64   `json:"bytes"`
	Cursor   *Cursor `json:"cursor,omitempty"`
	Finished bool    `json:"finished"`
}

// ErrNoProgress: --resume found no progress file.
var ErrNoProgress = errors.New("no resend to resume")

// loadState reads the progress file at path.
func loadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: --progress-file %s does not exist: without --resume, walpost resend starts a resend and records its progress there", ErrNoProgress, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read --progress-file %s: %w", path, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("--progress-file %s is not a resend's progress (%v): give the file walpost resend wrote", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("--progress-file %s has version %d, this walpost reads %d: resume it with the walpost that wrote it, or remove it and start over", path, s.Version, stateVersion)
	}
	return &s, nil
}

// saveState writes s to path atomically: a temporary file in the same
// directory, synced, renamed over path, and the directory synced, so a
// crash leaves the old state or the new one.
func saveState(path string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write --progress-file %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write --progress-file %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// frontier is the contiguous prefix of produced rows that are done:
// rows are added in the resend order, done in any order (Kafka
// acknowledges partitions independently); the prefix ends before the
// first row not done. It only moves forward.
type frontier struct {
	mu    sync.Mutex
	base  int64 // sequence number of q[head]
	q     []slot
	head  int
	last  *Cursor // the prefix's last row
	n     int64   // rows in the prefix
	bytes int64
}

type slot struct {
	cur   Cursor
	bytes int64
	done  bool
}

// add appends a row and returns its sequence number.
func (f *frontier) add(c Cursor, bytes int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.q = append(f.q, slot{cur: c, bytes: bytes})
	return f.base + int64(len(f.q)-f.head) - 1
}

// done marks row seq done and advances the prefix over every done row at
// its head.
func (f *frontier) done(seq int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.head + int(seq-f.base)
	if i < f.head || i >= len(f.q) {
		return
	}
	f.q[i].done = true
	f.advance()
}

// doneThrough marks every row added so far done (a committed Kafka
// transaction covers them all).
func (f *frontier) doneThrough() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := f.head; i < len(f.q); i++ {
		f.q[i].done = true
	}
	f.advance()
}

func (f *frontier) advance() {
	for f.head < len(f.q) && f.q[f.head].done {
		c := f.q[f.head].cur
		f.last = &c
		f.n++
		f.bytes += f.q[f.head].bytes
		f.head++
		f.base++
	}
	// Drop the consumed head now and then, not on every row.
	if f.head > 1024 && f.head*2 > len(f.q) {
		f.q = append(f.q[:0], f.q[f.head:]...)
		f.head = 0
	}
}

// prefix returns the last row of the prefix (nil: none yet), its rows
// and their bytes.
func (f *frontier) prefix() (*Cursor, int64, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.n, f.bytes
}
