package replication

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// scripted hands out data in reads of the sizes given (the last size
// repeats), each capped by the caller's buffer: a socket whose receive
// buffer held that much at each read.
type scripted struct {
	data  []byte
	sizes []int
}

func (s *scripted) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(s.data))
	if len(s.sizes) > 0 {
		n = min(n, s.sizes[0])
		if len(s.sizes) > 1 {
			s.sizes = s.sizes[1:]
		}
	}
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

// copyData is a CopyData message of size bytes in all.
func copyData(size int) []byte {
	m := make([]byte, size)
	m[0] = 'd'
	binary.BigEndian.PutUint32(m[1:], uint32(size-1))
	return m
}

func tcpConn(t *testing.T) *net.TCPConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// TestReadProbeCaughtUp: the stream is caught up only once every byte the
// socket handed over was read and the last read did not fill its buffer:
// not while messages wait in pgproto3's or the bufio.Reader's buffer, not
// after a read that filled the buffer (the socket may hold more), and
// never over TLS, where the TLS layer's own records cannot be seen.
func TestReadProbeCaughtUp(t *testing.T) {
	w := tcpConn(t)
	// Three messages in one short read.
	var three []byte
	for range 3 {
		three = append(three, copyData(100)...)
	}
	fe, _, probe := buildFrontend(&scripted{data: three}, w)
	for i := range 3 {
		if _, err := fe.Receive(); err != nil {
			t.Fatal(err)
		}
		if got, want := probe.caughtUp(), i == 2; got != want {
			t.Errorf("short read, after message %d of 3: caught up %v, want %v", i+1, got, want)
		}
	}
	// 256 messages of 1 KiB fill the 256 KiB buffer exactly; 10 more come
	// in the next, short, read.
	var many []byte
	for range replicationReadBuffer/1024 + 10 {
		many = append(many, copyData(1024)...)
	}
	fe, _, probe = buildFrontend(&scripted{data: many, sizes: []int{replicationReadBuffer, 10 * 1024}}, w)
	total := replicationReadBuffer/1024 + 10
	for i := range total {
		if _, err := fe.Receive(); err != nil {
			t.Fatal(err)
		}
		if got, want := probe.caughtUp(), i == total-1; got != want {
			t.Fatalf("after message %d of %d (the first %d came in a full read): caught up %v, want %v",
				i+1, total, replicationReadBuffer/1024, got, want)
		}
	}
	// TLS: no probe, never caught up.
	fe, _, probe = buildFrontend(&scripted{data: copyData(100)}, tls.Client(w, &tls.Config{}))
	if _, err := fe.Receive(); err != nil {
		t.Fatal(err)
	}
	if probe != nil || probe.caughtUp() {
		t.Errorf("over TLS: probe %v, caught up %v; want none, false", probe, probe.caughtUp())
	}
}
