package integration

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tcpProxy forwards TCP connections from a loopback listener to a target,
// for network-fault tests: Cut resets every connection (RST) and resets
// new ones until Restore; OneWay silences one direction only; Stall forwards nothing (a silent partition: connections
// stay open, bytes wait, new connections hang) until Restore; SetLatency
// delays each chunk; SetBandwidth caps bytes/s per direction (shared by all
// connections, like one link).
type tcpProxy struct {
	ln     net.Listener
	target atomic.Pointer[string] // Retarget changes it for new connections

	mu      sync.Mutex
	cut     bool
	open    chan struct{} // closed unless stalled
	conns   map[net.Conn]struct{}
	links   map[*atomic.Bool]struct{} // per connection: frozen
	latency time.Duration
	up      *proxyLimiter // client → target
	down    *proxyLimiter // target → client
	// blocked per direction (OneWay): bytes wait, like Stall, one way.
	blockUp, blockDown atomic.Bool
	wg                 sync.WaitGroup
	closed             bool

	// peers get every fault of this proxy too (the other brokers of a
	// cluster, see kafkaProxy).
	peers []*tcpProxy

	// freezeAt, when set, freezes the first connection whose client
	// sends a chunk holding it, before that chunk passes (FreezeBefore).
	freezeAt atomic.Pointer[freezeAt]

	// Bytes counts what crossed the proxy, both directions.
	Bytes    atomic.Int64
	accepted atomic.Int64
}

// newTCPProxy listens on addr ("127.0.0.1:0" for a random port) and
// forwards to target. Cleanup closes it.
func newTCPProxy(t testing.TB, addr, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy listen %s: %v", addr, err)
	}
	p := &tcpProxy{ln: ln, conns: map[net.Conn]struct{}{},
		links: map[*atomic.Bool]struct{}{}, up: &proxyLimiter{}, down: &proxyLimiter{}, open: make(chan struct{})}
	close(p.open)
	p.target.Store(&target)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Retarget sends new connections to target; open ones keep theirs (Cut
// ends them).
func (p *tcpProxy) Retarget(target string) { p.target.Store(&target) }

// Addr is the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// Cut resets every current connection (RST, as a firewall's reject or a
// rebooted peer) and resets new ones at once until Restore.
func (p *tcpProxy) Cut() {
	for _, q := range p.peers {
		q.Cut()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		reset(c)
	}
}

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// OneWay silences one direction until Restore: toServer true drops what
// the client sends (requests wait, replies to earlier ones still come
// back), false what the server sends. Nothing is closed.
func (p *tcpProxy) OneWay(toServer bool) {
	for _, q := range p.peers {
		q.OneWay(toServer)
	}
	if toServer {
		p.blockUp.Store(true)
	} else {
		p.blockDown.Store(true)
	}
}

// Stall stops forwarding without closing anything until Restore: bytes
// wait in the proxy and the kernels' buffers, new connections are
// accepted but not connected on.
func (p *tcpProxy) Stall() {
	for _, q := range p.peers {
		q.Stall()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already stalled
	}
}

// Freeze silences every current connection for good (no bytes, no close
// passes), while new connections work: half-open connections, as after a
// dropped NAT entry or a server that vanished without a reset. Restore
// thaws them.
func (p *tcpProxy) Freeze() {
	for _, q := range p.peers {
		q.Freeze()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.Store(true)
	}
}

// freezeAt is an armed FreezeBefore.
type freezeAt struct {
	msg    []byte
	frozen chan struct{} // closed once a connection froze
}

// FreezeBefore freezes, as Freeze does, the first connection whose
// client then sends msg, before msg reaches the server: pgCommit cuts a
// PostgreSQL client off between its transaction's last statement and its
// COMMIT (on a connection without TLS: the proxy reads the bytes). The
// channel is closed once it did. Restore thaws it and disarms an armed
// one. Unlike Freeze it stays on this proxy (not its peers).
func (p *tcpProxy) FreezeBefore(msg []byte) <-chan struct{} {
	a := &freezeAt{msg: msg, frozen: make(chan struct{})}
	p.freezeAt.Store(a)
	return a.frozen
}

// pgCommit and pgRollback are the simple-protocol Query messages pgx
// sends for Tx.Commit and Tx.Rollback.
var (
	pgCommit   = []byte("Q\x00\x00\x00\x0bcommit\x00")
	pgRollback = []byte("Q\x00\x00\x00\x0drollback\x00")
)

// Restore ends a Cut, a Stall, a Freeze or a OneWay.
func (p *tcpProxy) Restore() {
	for _, q := range p.peers {
		q.Restore()
	}
	p.freezeAt.Store(nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.blockUp.Store(false)
	p.blockDown.Store(false)
	for l := range p.links {
		l.Store(false)
	}
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// gate returns a channel that is closed while the proxy forwards.
func (p *tcpProxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// SetLatency delays every chunk by d in each direction (0 disables).
func (p *tcpProxy) SetLatency(d time.Duration) {
	for _, q := range p.peers {
		q.SetLatency(d)
	}
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetBandwidth caps each direction at bytesPerSec (0 disables).
func (p *tcpProxy) SetBandwidth(bytesPerSec int) {
	for _, q := range p.peers {
		q.SetBandwidth(bytesPerSec)
	}
	p.up.setRate(bytesPerSec)
	p.down.setRate(bytesPerSec)
}

// Close stops the listener and every connection and waits for them.
func (p *tcpProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c, or reports false when the proxy is cut or closed.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if !p.track(client) {
			reset(client) // cut: accept and reset
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(client)
			frozen := new(atomic.Bool)
			p.mu.Lock()
			p.links[frozen] = struct{}{}
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				delete(p.links, frozen)
				p.mu.Unlock()
			}()
			if !p.wait(frozen) {
				return
			}
			server, err := net.DialTimeout("tcp", *p.target.Load(), 5*time.Second)
			if err != nil {
				return
			}
			if !p.track(server) {
				_ = server.Close()
				return
			}
			defer p.untrack(server)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(server, client, p.up, frozen, &p.blockUp) }()
			go func() { defer wg.Done(); p.pipe(client, server, p.down, frozen, &p.blockDown) }()
			wg.Wait()
		}()
	}
}

// pipe copies src to dst in chunks, each delayed by the latency (as
// propagation delay: chunks stay in order and are not serialised behind
// each other's delay) and paced by the limiter. Either side ending closes
// both.
func (p *tcpProxy) pipe(dst, src net.Conn, lim *proxyLimiter, frozen, blocked *atomic.Bool) {
	defer dst.Close()
	defer src.Close()
	// A frozen connection does not pass the end of the stream on either.
	defer p.wait(frozen)
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 16<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				lat := p.latency
				p.mu.Unlock()
				q <- chunk{b: buf[:n], due: time.Now().Add(lat)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if at := p.freezeAt.Load(); at != nil && lim == p.up && bytes.Contains(c.b, at.msg) && p.freezeAt.CompareAndSwap(at, nil) {
			frozen.Store(true)
			close(at.frozen)
		}
		if !p.wait(frozen) || !p.waitDirection(blocked) {
			_ = src.Close()
			for range q {
			}
			return
		}
		lim.wait(len(c.b))
		p.Bytes.Add(int64(len(c.b)))
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close()
			for range q { // let the reader finish
			}
			return
		}
	}
}

// wait blocks while the proxy is stalled or the connection frozen; false
// when the proxy was closed or cut meanwhile.
func (p *tcpProxy) wait(frozen *atomic.Bool) bool {
	for {
		g := p.gate()
		if frozen.Load() {
			g = nil
		}
		select {
		case <-g:
			p.mu.Lock()
			ok := !p.cut && !p.closed
			p.mu.Unlock()
			return ok
		case <-time.After(100 * time.Millisecond):
			p.mu.Lock()
			gone := p.cut || p.closed
			p.mu.Unlock()
			if gone {
				return false
			}
		}
	}
}

// waitDirection blocks while blocked (OneWay) holds; false when the proxy
// was closed or cut meanwhile.
func (p *tcpProxy) waitDirection(blocked *atomic.Bool) bool {
	for blocked.Load() {
		time.Sleep(20 * time.Millisecond)
		p.mu.Lock()
		gone := p.cut || p.closed
		p.mu.Unlock()
		if gone {
			return false
		}
	}
	return true
}

// proxyLimiter paces bytes to a rate: each transfer reserves its slot
// after the previous one.
type proxyLimiter struct {
	mu   sync.Mutex
	rate int // bytes/s; 0 = unlimited
	next time.Time
}

func (l *proxyLimiter) setRate(r int) {
	l.mu.Lock()
	l.rate = r
	l.mu.Unlock()
}

func (l *proxyLimiter) wait(n int) {
	l.mu.Lock()
	if l.rate <= 0 {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(n) / float64(l.rate) * float64(time.Second)))
	until := l.next
	l.mu.Unlock()
	time.Sleep(time.Until(until))
}

// TestProxy checks the proxy itself against an echo server: bytes pass
// both ways, Cut drops live connections and refuses new ones, Restore
// heals, latency delays a round trip, bandwidth paces a transfer.
func TestProxy(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p := newTCPProxy(t, "127.0.0.1:0", echo.Addr().String())
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	roundTrip := func(c net.Conn, msg []byte) error {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // beyond the upper bounds below
		if _, err := c.Write(msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if !bytes.Equal(got, msg) {
			return errors.New("echo mismatch")
		}
		return nil
	}

	c := dial()
	defer c.Close()
	big := bytes.Repeat([]byte("walpost-"), 64<<10) // 512 KiB
	if err := roundTrip(c, big); err != nil {
		t.Fatalf("round trip through the proxy: %v", err)
	}

	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a live connection after Cut: read %v, want a reset (RST)", err)
	}
	// A new connection is accepted and reset at once: the dial itself may
	// see the reset.
	if c2, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second); err == nil {
		if err := roundTrip(c2, []byte("x")); err == nil {
			t.Fatal("a new connection worked while cut")
		}
		c2.Close()
	}

	p.Restore()
	c3 := dial()
	defer c3.Close()
	if err := roundTrip(c3, []byte("hello")); err != nil {
		t.Fatalf("after Restore: %v", err)
	}

	p.Stall()
	_ = c3.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c3.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Read(make([]byte, 4)); err == nil {
		t.Fatal("bytes crossed a stalled proxy")
	}
	p.Restore()
	got := make([]byte, 4)
	_ = c3.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c3, got); err != nil || string(got) != "held" {
		t.Fatalf("after a stall: %q, %v", got, err)
	}

	p.Freeze()
	c4 := dial() // new connections work
	defer c4.Close()
	if err := roundTrip(c4, []byte("new")); err != nil {
		t.Fatalf("new connection while old ones are frozen: %v", err)
	}
	_ = c3.SetDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = c3.Write([]byte("lost"))
	if _, err := c3.Read(make([]byte, 4)); err == nil {
		t.Fatal("bytes crossed a frozen connection")
	}
	p.Restore()
	_ = c3.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c3, got); err != nil || string(got) != "lost" {
		t.Fatalf("after a thaw: %q, %v", got, err)
	}

	for _, toServer := range []bool{true, false} {
		p.OneWay(toServer)
		_ = c3.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c3.Write([]byte("half")); err != nil {
			t.Fatal(err)
		}
		if _, err := c3.Read(make([]byte, 4)); err == nil {
			t.Fatalf("an echo crossed a one-way (to server %v) proxy", toServer)
		}
		p.Restore()
		_ = c3.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c3, got); err != nil || string(got) != "half" {
			t.Fatalf("after a one-way (to server %v) fault: %q, %v", toServer, got, err)
		}
	}

	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(c3, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 200*time.Millisecond || rtt > 10*time.Second {
		t.Fatalf("round trip with 100 ms latency each way took %s", rtt)
	}
	p.SetLatency(0)

	p.SetBandwidth(256 << 10) // 256 KiB/s each way
	start = time.Now()
	if err := roundTrip(c3, bytes.Repeat([]byte("b"), 256<<10)); err != nil {
		t.Fatal(err)
	}
	// 256 KiB up then down, pipelined: at least ~1 s at 256 KiB/s.
	if took := time.Since(start); took < 900*time.Millisecond || took > 20*time.Second {
		t.Fatalf("256 KiB at 256 KiB/s took %s", took)
	}
}
