//go:build linux

package replication

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func tcpPair(t *testing.T) (client *net.TCPConn, server net.Conn) {
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
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s
}

func rcvLowat(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// waitQueued waits until c's socket holds at least n unread bytes.
func waitQueued(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		var v int32
		var errno syscall.Errno
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v)))
		}); err != nil || errno != 0 {
			t.Fatal(err, errno)
		}
		return int(v)
	}
	for deadline := time.Now().Add(5 * time.Second); queued() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued after 5 s, want %d", queued(), n)
		}
	}
}

func TestLowatReaderBatchesAndFallsBack(t *testing.T) {
	c, s := tcpPair(t)
	l := newLowatReader(c, c)
	if l == nil {
		t.Fatal("no lowatReader for a TCP connection")
	}
	buf := make([]byte, 256<<10)

	// A small read leaves the socket alone.
	if _, err := s.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Read(buf); err != nil || n != 100 {
		t.Fatalf("read %d, %v", n, err)
	}
	if l.batching() || rcvLowat(t, c) != 1 {
		t.Fatalf("batching after a small read (SO_RCVLOWAT %d)", rcvLowat(t, c))
	}

	// A full read (a backlog) turns batching on.
	if _, err := s.Write(make([]byte, 3*lowatBytes)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let it all arrive
	got := 0
	for got < 3*lowatBytes {
		n, err := l.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if !l.batching() || rcvLowat(t, c) != lowatBytes {
		t.Fatalf("not batching after full reads (SO_RCVLOWAT %d)", rcvLowat(t, c))
	}

	// While batching, a trickle does not wake the reader: it waits until
	// its deadline; the next read takes the trickle at once and, as it is
	// small, ends batching. A read system call returns what is there, mark
	// or not, so when the reader is scheduled only after the trickle
	// arrived its first read returns it early: that attempt proves
	// nothing and is repeated (batching stays on, the socket is empty);
	// a reader woken by the trickle every time fails.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		wrote := make(chan time.Time, 1)
		go func() {
			time.Sleep(50 * time.Millisecond)
			_, _ = s.Write(make([]byte, 1000))
			wrote <- time.Now()
		}()
		_ = c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
		start := time.Now()
		n, err := l.Read(buf)
		waited := time.Since(start)
		// The next read must find the trickle there.
		if at := <-wrote; at.After(start.Add(waited)) {
			t.Logf("attempt %d: the trickle was written only after the read returned", attempt)
		}
		if err == nil && n == 1000 && attempt < attempts {
			t.Logf("attempt %d: the trickle was read after %s, before the deadline; inconclusive (the read may have started after it arrived), again", attempt, waited)
			if !l.batching() {
				t.Fatal("an early read of the trickle ended batching")
			}
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || n != 0 {
			t.Fatalf("attempt %d: read %d bytes, %v after %s: want the deadline (the trickle is below the low-water mark)", attempt, n, err, waited)
		}
		if waited < 100*time.Millisecond {
			t.Fatalf("woken after %s, before the deadline", waited)
		}
		break
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	start := time.Now()
	if n, err := l.Read(buf); err != nil || n != 1000 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("after the deadline: read %d, %v in %s", n, err, time.Since(start))
	}
	if l.batching() || rcvLowat(t, c) != 1 {
		t.Fatalf("still batching after a small read that followed a deadline (SO_RCVLOWAT %d)", rcvLowat(t, c))
	}

	// A deadline followed by a full read (the stream paused, then went on)
	// keeps batching.
	if _, err := s.Write(make([]byte, lowatBytes)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	for got = 0; got < lowatBytes; {
		n, err := l.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if !l.batching() {
		t.Fatal("not batching after a full read")
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := l.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	if _, err := s.Write(make([]byte, lowatBytes)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := l.Read(buf); err != nil || n != lowatBytes {
		t.Fatalf("read %d, %v", n, err)
	}
	if !l.batching() {
		t.Fatal("a full read after a deadline ended batching")
	}
	// A deadline followed by less than the mark ends it: the mark must
	// never hold the stream to one window per deadline.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := l.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	if _, err := s.Write(make([]byte, lowatBytes/2)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := l.Read(buf); err != nil || n != lowatBytes/2 {
		t.Fatalf("read %d, %v", n, err)
	}
	if l.batching() {
		t.Fatal("still batching after a deadline and a read below the mark")
	}

	// off() ends batching explicitly.
	if _, err := s.Write(make([]byte, 2*lowatBytes)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	for got = 0; got < 2*lowatBytes; {
		n, err := l.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if !l.batching() {
		t.Fatal("not batching")
	}
	l.off()
	if l.batching() || rcvLowat(t, c) != 1 {
		t.Fatal("off left batching on")
	}
}

// TestLowatReaderOffStaysOff: after off (a session ending), the WAL the
// server sends until it reads the CopyDone still comes in full reads;
// they must not turn batching on again, or the server's few closing
// messages (CopyDone, CommandComplete, ReadyForQuery) wait for the mark
// until the read deadline: every session's end took 5 s.
func TestLowatReaderOffStaysOff(t *testing.T) {
	c, s := tcpPair(t)
	l := newLowatReader(c, c)
	buf := make([]byte, 256<<10)
	full := func() {
		t.Helper()
		if _, err := s.Write(make([]byte, 2*lowatBytes)); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, c, 2*lowatBytes) // all of it, so a read takes it whole
		for got := 0; got < 2*lowatBytes; {
			n, err := l.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	full()
	if !l.batching() {
		t.Fatal("not batching after full reads")
	}
	l.off()
	full()
	if l.batching() || rcvLowat(t, c) != 1 {
		t.Fatalf("full reads after off turned batching on again (SO_RCVLOWAT %d)", rcvLowat(t, c))
	}
	// The closing messages are read as soon as they come.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = s.Write(make([]byte, 30))
	}()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	start := time.Now()
	if n, err := l.Read(buf); err != nil || n != 30 || time.Since(start) > time.Second {
		t.Fatalf("read %d, %v after %s: want the 30 bytes at once", n, err, time.Since(start))
	}
}

func TestLowatReaderNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if l := newLowatReader(a, a); l != nil {
		t.Fatal("lowatReader for a non-TCP connection")
	}
	var l *lowatReader
	if l.batching() {
		t.Fatal("nil reader batching")
	}
	l.off() // no panic
}
