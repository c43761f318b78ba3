package replication

import (
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The walsender writes one CopyData per WAL message, and walpost decodes
// faster than PostgreSQL decodes, so while a backlog drains the socket
// holds only a few messages whenever walpost reads it: a read system call
// and a wake-up through the poller for every few events were the largest
// cost of a drain. lowatReader sits under the connection's read buffer and
// switches the socket's receive low-water mark (SO_RCVLOWAT) to lowatBytes
// while reads come back full: the poller then wakes the reader only once
// that much has arrived, and one read takes ~100 events. The mark gates
// only the wait: a read takes whatever is there. While batching, the
// stream keeps its read deadline within lowatWait, so a slower stream is
// never held back longer than that; when less than the mark arrived by
// such a deadline (the stream slowed down, or the receive window cannot
// hold the mark), it goes back to 1 byte until a read comes back full.
//
// It sits above pgconn's background reader (BuildFrontend's reader), so
// Read, batching and off all run on the goroutine that receives: the
// stream's.
type lowatReader struct {
	r        io.Reader
	rc       syscall.RawConn
	on       bool
	timedOut bool // the last read ended with an error (the deadline)
	broken   bool // the socket refused the option: stay off
	// stopped: off was called, the session is ending; the WAL the server
	// sends until it reads the CopyDone still comes in full reads, and
	// must not turn batching on again: the server's few closing messages
	// would then wait for the mark until the read deadline.
	stopped bool
}

const (
	lowatBytes = 32 << 10
	// lowatWait bounds how long a read waits for lowatBytes to arrive:
	// the most batching adds to an event's latency.
	lowatWait = 2 * time.Millisecond
)

// newLowatReader wraps r, which reads from conn; nil when conn is not a
// TCP socket (TLS, Unix socket): then reads are not batched.
func newLowatReader(r io.Reader, conn any) *lowatReader {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &lowatReader{r: r, rc: rc}
}

func (l *lowatReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	switch {
	case err != nil:
		l.timedOut = true
		return n, err
	case !l.on && n >= lowatBytes && !l.broken && !l.stopped:
		l.set(lowatBytes)
	case l.on && l.timedOut && n < lowatBytes:
		l.set(1)
	}
	l.timedOut = false
	return n, err
}

// batching reports whether reads wait for lowatBytes; the stream then
// keeps its read deadline within lowatWait.
func (l *lowatReader) batching() bool { return l != nil && l.on }

// off stops batching for good (before reading the few messages that end a
// session).
func (l *lowatReader) off() {
	if l == nil {
		return
	}
	l.stopped = true
	if l.on {
		l.set(1)
	}
}

func (l *lowatReader) set(v int) {
	var serr error
	err := l.rc.Control(func(fd uintptr) {
		serr = setRcvLowat(fd, v)
	})
	if err != nil || serr != nil {
		l.broken, l.on = true, false
		return
	}
	l.on = v > 1
}

// lowatKey is where ConnectReplication leaves the connection's
// lowatReader (pgconn's CustomData).
const lowatKey = "walpost.lowat"

func lowatOf(conn *pgconn.PgConn) *lowatReader {
	if conn == nil {
		return nil
	}
	l, _ := conn.CustomData()[lowatKey].(*lowatReader)
	return l
}
