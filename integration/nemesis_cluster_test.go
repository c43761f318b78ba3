package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink/kafka"
	"github.com/walpost/walpost/verify"
)

// The seeded nemesis on three brokers (make nemesis; a short slice in make
// test). One schedule is a list of faults drawn from a seed before it
// starts: each fault comes after a count of events written and lasts a
// count of events written (and, for the faults that must outlast a
// timeout, that timeout). Eight writers run throughout; after each fault is
// healed the slot must confirm everything written before the heal (the
// recovery time), and after the last one the checker reads the topic back:
// every committed row delivered (none poisoned), commit order per key and
// partition, no exactly-once duplicate for read_committed consumers
// (franz-go and librdkafka), at-least-once duplicates only of events a
// session re-read from its start position, walpost's RSS bounded and
// /readyz red while delivery stalls.
//
// WALPOST_NEMESIS_SEED (first seed, 1), WALPOST_NEMESIS_SCHEDULES (seeds
// per delivery mode, 1), WALPOST_NEMESIS_MODES (at-least-once,exactly-once),
// WALPOST_NEMESIS_FAULTS (faults per schedule, 3), WALPOST_NEMESIS_EVENTS
// (events written per schedule at least, 5000), WALPOST_NEMESIS_PAUSE
// (each writer's pause between transactions, 100ms: about 2,400 events/s
// in all), WALPOST_NEMESIS_OUT (a
// directory: results.jsonl gets one line per schedule, and each failed
// schedule its history file).

type clusterFault int

const (
	cfKill clusterFault = iota
	cfPauseWalSender
	cfPauseTxn
	cfTakeover
	cfPGRestart
	cfPGCrash
	cfPGFreeze
	cfBrokerKill
	cfBrokerPause
	cfBrokerRestart
	cfLeaderMove
	cfCoordinatorKill
	cfTwoDown
	cfNetPG
	cfNetBroker
	cfSlowBroker
	cfDDL
	cfLargeTxn
	cfMaxMessageBytes
	cfKinds
)

var clusterFaultNames = [...]string{
	"walpost-kill", "walpost-pause-wal-sender-timeout", "walpost-pause-txn-timeout", "standby-takeover",
	"pg-restart", "pg-crash", "pg-freeze",
	"broker-kill", "broker-pause", "broker-restart", "leader-move", "coordinator-kill", "two-brokers-down",
	"net-pg", "net-broker", "slow-broker",
	"outbox-ddl", "large-txn", "max-message-bytes",
}

func (k clusterFault) String() string { return clusterFaultNames[k] }

// The network variants of net-pg and net-broker.
var netVariants = [...]string{"cut", "blackhole", "one-way-to-server", "one-way-to-client", "latency", "half-open"}

// Timeouts the pauses outlast.
const (
	nemesisWalSenderTimeout = 5 * time.Second
	nemesisTxnTimeout       = 10 * time.Second
	nemesisStallTimeout     = 5 * time.Second
	// nemesisWriterPause paces each of the eight writers by default:
	// about 2,400 events/s in all, well inside what walpost drains on three brokers,
	// so a recovery time measures the fault, not a backlog.
	nemesisWriterPause = 100 * time.Millisecond
	// nemesisRSSBound is the most walpost may hold resident at any time.
	nemesisRSSBound = 256 << 10 // KiB
)

// clusterStep is one fault of a schedule.
type clusterStep struct {
	Kind    clusterFault
	Variant int // net-*: netVariants; pg-crash: seconds down; kill: 500 ms units before the restart
	Node    int // 1..3: the broker a broker fault hits
	Gap     int // events written before the fault
	Hold    int // events written while it lasts
	MinHold time.Duration
}

func (s clusterStep) String() string {
	d := ""
	switch s.Kind {
	case cfNetPG, cfNetBroker:
		d = " " + netVariants[s.Variant]
	case cfBrokerKill, cfBrokerPause, cfBrokerRestart, cfLeaderMove, cfTwoDown, cfSlowBroker:
	default:
		return fmt.Sprintf("%s after %d events, held %d events/%s", s.Kind, s.Gap, s.Hold, s.MinHold)
	}
	if s.Kind != cfNetPG {
		d += fmt.Sprintf(" node %d", s.Node)
	}
	return fmt.Sprintf("%s%s after %d events, held %d events/%s", s.Kind, d, s.Gap, s.Hold, s.MinHold)
}

// drawSchedule is the schedule of seed in mode: the same for the same
// arguments. The kinds follow one fixed shuffled cycle, seed after seed
// (seed s starts at position (s−1)·faults), so consecutive seeds hit every
// kind equally often; everything else (variant, node, counts, lengths)
// is drawn from the seed.
func drawSchedule(seed uint64, mode string, faults int) []clusterStep {
	salt := uint64(0x616c6f)
	if mode == "exactly-once" {
		salt = 0x656f73
	}
	rng := rand.New(rand.NewPCG(seed, salt))
	cycle := rand.New(rand.NewPCG(0x6b696e64, 0)).Perm(int(cfKinds))
	var steps []clusterStep
	for j := 0; j < faults; j++ {
		s := clusterStep{
			Kind:    clusterFault(cycle[(int(seed-1)*faults+j)%len(cycle)]),
			Variant: rng.IntN(len(netVariants)),
			Node:    1 + rng.IntN(3),
			Gap:     1000 + rng.IntN(5000),
			Hold:    500 + rng.IntN(4500),
			MinHold: time.Duration(1000+rng.IntN(5000)) * time.Millisecond,
		}
		switch s.Kind {
		case cfCoordinatorKill:
			if mode != "exactly-once" {
				s.Kind = cfBrokerKill // no transactions to coordinate
			}
		case cfPauseWalSender:
			s.MinHold = nemesisWalSenderTimeout + 2*time.Second
		case cfPauseTxn:
			s.MinHold = nemesisTxnTimeout + 3*time.Second
		case cfTwoDown:
			s.MinHold = max(s.MinHold, nemesisStallTimeout+7*time.Second)
		case cfPGFreeze:
			s.Hold = 0 // the writers wait for PostgreSQL too
		}
		steps = append(steps, s)
	}
	return steps
}

// clusterResult is one schedule's line in results.jsonl.
type clusterResult struct {
	Seed          uint64             `json:"seed"`
	Mode          string             `json:"mode"`
	Faults        []clusterStepDone  `json:"faults"`
	Written       int                `json:"written"`
	Delivered     int                `json:"delivered"`
	Lost          int                `json:"lost"`
	OutOfOrder    int                `json:"out_of_order"`
	Unexpected    int                `json:"unexpected"`
	Duplicates    int                `json:"duplicates"`
	DupRdkafka    int                `json:"duplicates_librdkafka"`
	LostRdkafka   int                `json:"lost_librdkafka"`
	OverBound     int                `json:"duplicates_over_bound"`
	Poisoned      int                `json:"poisoned"`
	Sessions      int                `json:"sessions"`
	Exits         int                `json:"exits"`
	StartFailures int                `json:"start_failures"`
	PeakRSSKB     int64              `json:"peak_rss_kb"`
	Readyz        []readyzCheck      `json:"readyz,omitempty"`
	Seconds       float64            `json:"seconds"`
	WallSeconds   float64            `json:"wall_seconds"`
	Failures      []string           `json:"failures,omitempty"`
	History       string             `json:"history,omitempty"`
	Extra         map[string]float64 `json:"extra,omitempty"`
}

type clusterStepDone struct {
	Kind       string  `json:"kind"`
	Detail     string  `json:"detail"`
	RecoveryMs float64 `json:"recovery_ms"` // heal → the slot confirmed everything written before it; -1: never
}

type readyzCheck struct {
	RedAfterMs   float64 `json:"red_after_ms"`   // fault → /readyz not 200; -1: never
	GreenAfterMs float64 `json:"green_after_ms"` // heal → 200 again; -1: never
}

func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive count", name, s)
	}
	return n
}

// TestNemesisCluster runs the seeded schedules (see above).
func TestNemesisCluster(t *testing.T) {
	needKafkaCluster(t)
	first := uint64(envInt(t, "WALPOST_NEMESIS_SEED", 1))
	schedules := envInt(t, "WALPOST_NEMESIS_SCHEDULES", 1)
	faults := envInt(t, "WALPOST_NEMESIS_FAULTS", 3)
	events := envInt(t, "WALPOST_NEMESIS_EVENTS", 5000)
	modes := []string{"at-least-once", "exactly-once"}
	if s := os.Getenv("WALPOST_NEMESIS_MODES"); s != "" {
		modes = strings.Split(s, ",")
		for _, m := range modes {
			if m != "at-least-once" && m != "exactly-once" {
				t.Fatalf("WALPOST_NEMESIS_MODES=%q: want at-least-once, exactly-once or both, comma-separated", s)
			}
		}
	}
	pause := nemesisWriterPause
	if s := os.Getenv("WALPOST_NEMESIS_PAUSE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			t.Fatalf("WALPOST_NEMESIS_PAUSE=%q: want a duration like 100ms", s)
		}
		pause = d
	}
	out := os.Getenv("WALPOST_NEMESIS_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// The brokers advertise their proxied listeners at fixed addresses:
	// one test at a time holds them.
	kafkaProxyMu.Lock()
	defer kafkaProxyMu.Unlock()
	for i := 0; i < schedules; i++ {
		seed := first + uint64(i)
		for _, mode := range modes {
			// A schedule that stops on a fatal error is recorded as failed.
			r := clusterResult{Seed: seed, Mode: mode, Failures: []string{"the schedule stopped early: see the test's log"}}
			began := time.Now()
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				r = runSchedule(t, seed, mode, faults, events, pause, out)
			})
			// With the set-up and the clean-up (the fixture's, the stack's
			// restoration) that runSchedule's own time leaves out.
			r.WallSeconds = time.Since(began).Seconds()
			b, _ := json.Marshal(r)
			fh, err := os.OpenFile(filepath.Join(out, "results.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = fh.Write(append(b, '\n'))
			_ = fh.Close()
		}
	}
}

// clusterNemesis is one schedule's state.
type clusterNemesis struct {
	t       *testing.T
	f       *fixture
	seed    uint64
	mode    string
	env     []string
	pg      *tcpProxy
	brokers []*tcpProxy
	p       *proc
	procs   []*proc
	rss     []func() int64
	http    string // the active walpost's HTTP address
	load    *writerLoad
	begin   time.Time
	res     clusterResult
	history []string
	ddl     int
}

func (n *clusterNemesis) logf(format string, args ...any) {
	line := fmt.Sprintf("+%6.1fs ", time.Since(n.begin).Seconds()) + fmt.Sprintf(format, args...)
	n.history = append(n.history, line)
	n.t.Logf("nemesis: %s", line)
}

func (n *clusterNemesis) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	n.res.Failures = append(n.res.Failures, msg)
	n.logf("FAILED: %s", msg)
	n.t.Error(msg)
}

// clusterProxies starts a proxy on each node's proxied advertised address
// and returns them with the seed brokers that make every connection of a
// client cross them (node N's ports are node 1's plus 4·(N−1)).
func clusterProxies(t testing.TB) ([]*tcpProxy, []string) {
	t.Helper()
	listener := os.Getenv("WALPOST_STACK_KAFKA_PROXIED_LISTENER")
	advertised := os.Getenv("WALPOST_STACK_KAFKA_PROXIED_ADVERTISED")
	lh, lp, err1 := net.SplitHostPort(listener)
	ah, ap, err2 := net.SplitHostPort(advertised)
	if err1 != nil || err2 != nil {
		t.Fatalf("WALPOST_STACK_KAFKA_PROXIED_LISTENER=%q / _ADVERTISED=%q: source the env of a current scripts/stack.sh up", listener, advertised)
	}
	lport, _ := strconv.Atoi(lp)
	aport, _ := strconv.Atoi(ap)
	var ps []*tcpProxy
	var seeds []string
	for node := 0; node < 3; node++ {
		a := net.JoinHostPort(ah, strconv.Itoa(aport+4*node))
		ps = append(ps, newTCPProxy(t, a, net.JoinHostPort(lh, strconv.Itoa(lport+4*node))))
		seeds = append(seeds, a)
	}
	return ps, seeds
}

func runSchedule(t *testing.T, seed uint64, mode string, faults, events int, writerPause time.Duration, out string) clusterResult {
	steps := drawSchedule(seed, mode, faults)
	n := &clusterNemesis{t: t, seed: seed, mode: mode, res: clusterResult{Seed: seed, Mode: mode}, begin: time.Now()}
	start := time.Now()
	replay := fmt.Sprintf("make nemesis SEED=%d SCHEDULES=1 MODES=%s", seed, mode)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		path := filepath.Join(out, fmt.Sprintf("history-%s-%d.txt", mode, seed))
		body := fmt.Sprintf("seed %d, %s (replay: %s)\nschedule:\n  %s\nhistory:\n  %s\n", seed, mode, replay,
			strings.Join(stepStrings(steps), "\n  "), strings.Join(n.history, "\n  "))
		_ = os.WriteFile(path, []byte(body), 0o644)
		t.Logf("nemesis seed %d (%s) failed; history in %s; replay: %s", seed, mode, path, replay)
	})
	n.logf("seed %d, %s: %s", seed, mode, strings.Join(stepStrings(steps), "; "))

	// Whatever an interrupted schedule left stopped or paused runs again
	// (before this one, and after it).
	clusterRestore(t)
	t.Cleanup(func() { clusterRestore(t) })
	f := stackFixture(t, 3)
	n.f = f
	setWalSenderTimeout(t, f, nemesisWalSenderTimeout.String())
	pg, pgURL := pgProxy(t, f.PGURL)
	n.pg = pg
	var seeds []string
	n.brokers, seeds = clusterProxies(t)
	port := freePort(t)
	n.http = fmt.Sprintf("127.0.0.1:%d", port)
	n.env = []string{
		"WALPOST_POSTGRES_URL=" + pgURL, "WALPOST_KAFKA_BROKERS=" + strings.Join(seeds, ","),
		fmt.Sprintf("WALPOST_HTTP_LISTEN=127.0.0.1:%d", port),
		"WALPOST_HTTP_READY_STALL_TIMEOUT=" + nemesisStallTimeout.String(),
		"WALPOST_LOG_LEVEL=info",
	}
	if mode == "exactly-once" {
		n.env = append(f.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_TIMEOUT="+nemesisTxnTimeout.String()), n.env...)
	}
	n.p = n.start(n.env)
	waitStreaming(t, n.p)
	n.load = newWriterLoad(f, 8, 60, writerPause)
	n.load.seed = seed
	n.load.start()
	t.Cleanup(func() { n.load.stop.Store(true); n.load.wg.Wait() })

	for i, s := range steps {
		n.waitEvents(s.Gap)
		n.checkExit()
		n.logf("fault %d/%d: %s", i+1, len(steps), s)
		heal := n.apply(s)
		n.hold(s)
		healedAt := time.Now()
		var rz *readyzCheck
		if heal != nil {
			rz = heal()
		}
		n.checkExit()
		rec := n.recovered(healedAt)
		done := clusterStepDone{Kind: s.Kind.String(), Detail: s.String(), RecoveryMs: rec}
		n.res.Faults = append(n.res.Faults, done)
		if rz != nil {
			n.res.Readyz = append(n.res.Readyz, *rz)
		}
	}
	if w := int(n.load.written.Load()); w < events {
		n.waitEvents(events - w)
	}
	expected := n.load.finish(t)
	walEnd := f.currentWAL()
	n.logf("writers stopped; %d events committed; checking", len(expected))
	n.check(expected, walEnd)
	n.res.Seconds = time.Since(start).Seconds()
	n.logf("seed %d, %s: %s", seed, mode, n.summary())
	return n.res
}

// clusterRestore resumes paused servers and starts stopped ones.
func clusterRestore(t testing.TB) {
	for _, args := range [][]string{{"pg-resume"}, {"kafka-resume", "1"}, {"kafka-resume", "2"}, {"kafka-resume", "3"}, {"pg-start"}, {"kafka-start"}} {
		if err := stackCtlErr(args...); err != nil && !strings.HasSuffix(args[0], "-resume") {
			t.Errorf("restoring the stack (%s): %v", strings.Join(args, " "), err)
		}
	}
}

func stepStrings(steps []clusterStep) []string {
	var s []string
	for _, st := range steps {
		s = append(s, st.String())
	}
	return s
}

func (n *clusterNemesis) summary() string {
	r := n.res
	return fmt.Sprintf("%d written, %d delivered, lost %d, out of order %d, unexpected %d, duplicates %d (librdkafka %d, over the bound %d), poisoned %d, sessions %d, exits %d, peak RSS %d MiB, %.0f s",
		r.Written, r.Delivered, r.Lost, r.OutOfOrder, r.Unexpected, r.Duplicates, r.DupRdkafka, r.OverBound, r.Poisoned, r.Sessions, r.Exits, r.PeakRSSKB>>10, r.Seconds)
}

func (n *clusterNemesis) start(env []string) *proc {
	p := n.f.start(env...)
	peak, _ := watchRSS(n.t, p)
	n.procs = append(n.procs, p)
	n.rss = append(n.rss, peak)
	return p
}

// waitEvents waits until k more events are committed (writers stall only
// while PostgreSQL is down, which no fault outlasts).
func (n *clusterNemesis) waitEvents(k int) {
	target := n.load.written.Load() + int64(k)
	deadline := time.Now().Add(3 * time.Minute)
	for n.load.written.Load() < target {
		if time.Now().After(deadline) {
			n.fail("writers committed %d of %d events in 3 min", n.load.written.Load(), target)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hold keeps a fault for its events and at least its MinHold (at most
// 60 s).
func (n *clusterNemesis) hold(s clusterStep) {
	target := n.load.written.Load() + int64(s.Hold)
	until := time.Now().Add(s.MinHold)
	limit := time.Now().Add(max(s.MinHold, 60*time.Second))
	for (n.load.written.Load() < target || time.Now().Before(until)) && time.Now().Before(limit) {
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *clusterNemesis) stack(args ...string) {
	if err := stackCtlErr(args...); err != nil {
		n.fail("scripts/stack.sh %s: %v", strings.Join(args, " "), err)
	}
}

// apply injects s and returns its heal (nil for an instant fault).
func (n *clusterNemesis) apply(s clusterStep) (heal func() *readyzCheck) {
	node := strconv.Itoa(s.Node)
	other := strconv.Itoa(s.Node%3 + 1)
	switch s.Kind {
	case cfKill:
		_, _ = n.p.signal(syscall.SIGKILL, 10*time.Second)
		time.Sleep(time.Duration(s.Variant) * 500 * time.Millisecond)
		n.p = n.start(n.env)
		n.logf("walpost killed and started again (pid %d)", n.p.cmd.Process.Pid)
		return nil
	case cfPauseWalSender, cfPauseTxn:
		p := n.p
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		return func() *readyzCheck { _ = p.cmd.Process.Signal(syscall.SIGCONT); n.logf("SIGCONT walpost"); return nil }
	case cfTakeover:
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(n.t))
		env := append(slices.Clone(n.env), "WALPOST_HTTP_LISTEN="+addr)
		b := n.start(env)
		if !b.waitLog("standing by", 60*time.Second) {
			n.fail("the standby walpost (pid %d) did not stand by:\n%s", b.cmd.Process.Pid, tail(b.log, 20))
		}
		_, _ = n.p.signal(syscall.SIGKILL, 10*time.Second)
		n.logf("active walpost killed; the standby (pid %d) takes over", b.cmd.Process.Pid)
		n.p, n.env, n.http = b, env, addr
		return nil
	case cfPGRestart:
		if took, err := pgStopFast(20 * time.Second); err != nil {
			n.logf("fast shutdown not done after %s; immediate", took.Round(time.Second))
			n.stack("pg-stop", "immediate")
		}
		n.stack("pg-start")
		return nil
	case cfPGCrash:
		n.stack("pg-stop", "immediate")
		time.Sleep(time.Duration(s.Variant%4) * time.Second)
		n.stack("pg-start")
		return nil
	case cfPGFreeze:
		n.stack("pg-pause")
		return func() *readyzCheck { n.stack("pg-resume"); return nil }
	case cfBrokerKill:
		n.stack("kafka-kill", node)
		return func() *readyzCheck { n.stack("kafka-start", node); return nil }
	case cfBrokerPause:
		n.stack("kafka-pause", node)
		return func() *readyzCheck { n.stack("kafka-resume", node); return nil }
	case cfBrokerRestart:
		n.stack("kafka-stop", node)
		n.stack("kafka-start", node)
		return nil
	case cfLeaderMove:
		part := s.Variant % n.f.Partitions
		leader, _ := partitionLeader(n.t, n.f.Topic, part)
		to := s.Node
		if to == leader {
			to = to%3 + 1
		}
		n.stack("kafka-leader", n.f.Topic, strconv.Itoa(part), strconv.Itoa(to))
		n.logf("partition %d: leader %d → %d", part, leader, to)
		return nil
	case cfCoordinatorKill:
		txnID := kafka.TransactionalID(n.f.Slot, systemID(n.t, n.f))
		o, errOut, err := stackScriptSplit(nil, "kafka-coordinator", txnID)
		coord := 0
		if err == nil {
			coord, err = strconv.Atoi(strings.Fields(o + " x")[0])
		}
		if err != nil {
			n.fail("kafka-coordinator %s: %v %s", txnID, err, errOut)
			return nil
		}
		n.stack("kafka-kill", strconv.Itoa(coord))
		n.logf("coordinator of %s (node %d) killed", txnID, coord)
		return func() *readyzCheck { n.stack("kafka-start", strconv.Itoa(coord)); return nil }
	case cfTwoDown:
		verb := "kafka-kill"
		if s.Variant%2 == 1 {
			verb = "kafka-stop"
		}
		at := time.Now()
		n.stack(verb, node)
		n.stack(verb, other)
		red := n.waitReadyz(false, at, nemesisStallTimeout+30*time.Second)
		n.checkNoPoison("with two brokers down")
		return func() *readyzCheck {
			n.stack("kafka-start", node)
			n.stack("kafka-start", other)
			green := n.waitReadyz(true, time.Now(), 2*time.Minute)
			if red < 0 || red > float64((nemesisStallTimeout+10*time.Second).Milliseconds()) {
				n.fail("/readyz not red within %s of two brokers going down (after %.0f ms; -1: never)", nemesisStallTimeout+10*time.Second, red)
			}
			if green < 0 {
				n.fail("/readyz not green again within 2 min of the brokers' return")
			}
			return &readyzCheck{RedAfterMs: red, GreenAfterMs: green}
		}
	case cfNetPG:
		n.network(n.pg, s, false)
		return func() *readyzCheck { n.pg.Restore(); n.pg.SetLatency(0); return nil }
	case cfNetBroker:
		p := n.brokers[s.Node-1]
		n.network(p, s, true)
		return func() *readyzCheck { p.Restore(); p.SetLatency(0); p.SetBandwidth(0); return nil }
	case cfSlowBroker:
		p := n.brokers[s.Node-1]
		p.SetLatency(time.Duration(100+50*s.Variant) * time.Millisecond)
		p.SetBandwidth(256 << 10)
		return func() *readyzCheck { p.SetLatency(0); p.SetBandwidth(0); return nil }
	case cfDDL:
		n.ddl++
		col := fmt.Sprintf("nemesis_%d", n.ddl)
		n.exec(fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s text DEFAULT 'x'`, n.f.Table, col))
		return func() *readyzCheck {
			n.exec(fmt.Sprintf(`ALTER TABLE %s DROP COLUMN %s`, n.f.Table, col))
			return nil
		}
	case cfLargeTxn:
		name := fmt.Sprintf("big-%d", len(n.res.Faults))
		keys := make([]string, bigTxnRows)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", name, i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		exp, err := n.f.writeTxn(ctx, name, keys, `{"data": "big"}`)
		cancel()
		if err != nil {
			n.fail("the %d-row transaction: %v", bigTxnRows, err)
			return nil
		}
		n.load.add(exp)
		n.logf("%d-row transaction committed", bigTxnRows)
		return nil
	case cfMaxMessageBytes:
		n.topicLimit("4096")
		return func() *readyzCheck { n.topicLimit("1048588"); return nil }
	}
	return nil
}

func (n *clusterNemesis) network(p *tcpProxy, s clusterStep, broker bool) {
	switch s.Variant {
	case 0:
		p.Cut()
	case 1:
		p.Stall()
	case 2:
		p.OneWay(true)
	case 3:
		p.OneWay(false)
	case 4:
		p.SetLatency(time.Duration(50+50*(s.Gap%6)) * time.Millisecond)
		if broker {
			p.SetBandwidth(64 << 10)
		}
	default:
		p.Freeze()
	}
}

func (n *clusterNemesis) exec(sql string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.f.Pool.Exec(ctx, sql); err != nil {
		n.fail("%s: %v", sql, err)
	}
}

func (n *clusterNemesis) topicLimit(v string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := n.f.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, n.f.Topic)
	if err == nil {
		_, err = resp.On(n.f.Topic, nil)
	}
	if err != nil {
		n.fail("max.message.bytes=%s: %v", v, err)
	}
}

// waitReadyz waits until the active walpost's /readyz answers 200 (green)
// or anything else (red), and returns the milliseconds since from (-1:
// not within timeout).
func (n *clusterNemesis) waitReadyz(green bool, from time.Time, timeout time.Duration) float64 {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		code, _ := readyz(n.http)
		if (code == 200) == green && code != 0 {
			return float64(time.Since(from).Milliseconds())
		}
		if n.p.exited() {
			return -1
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

// recovered waits until the slot confirmed everything written before
// healedAt and returns how long that took from the heal (-1: not within
// 3 min, a liveness failure).
func (n *clusterNemesis) recovered(healedAt time.Time) float64 {
	var target pglogrepl.LSN
	waitFor(n.t, 2*time.Minute, "PostgreSQL to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var s string
		if err := n.f.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
			return false
		}
		target, _ = pglogrepl.ParseLSN(s)
		return true
	})
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if lsn, _, _ := n.f.slotState(); lsn >= target {
			ms := float64(time.Since(healedAt).Milliseconds())
			n.logf("recovered: the slot confirmed %s %.0f ms after the heal", target, ms)
			return ms
		}
		n.checkExit()
		time.Sleep(50 * time.Millisecond)
	}
	lsn, _, _ := n.f.slotState()
	n.fail("the slot confirmed %s 3 min after the heal; WAL then at %s", lsn, target)
	return -1
}

// checkExit counts a walpost that exited by itself and starts another,
// as a supervisor would. Only an exit at start while Kafka is unreachable
// is known (TestStartWhileKafkaUnreachable); any other is a failure.
func (n *clusterNemesis) checkExit() {
	if !n.p.exited() {
		return
	}
	log, _ := os.ReadFile(n.p.log)
	if !strings.Contains(string(log), "msg=streaming") && strings.Contains(string(log), "kafka") {
		n.res.StartFailures++
		n.logf("walpost (pid %d) exited at start with Kafka unreachable; starting it again", n.p.cmd.Process.Pid)
	} else {
		n.res.Exits++
		n.fail("walpost (pid %d) exited by itself (%v); last lines:\n%s", n.p.cmd.Process.Pid, n.p.err, tail(n.p.log, 25))
	}
	n.p = n.start(n.env)
}

func (n *clusterNemesis) checkNoPoison(when string) {
	var c int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, n.f.PoisonTable)).Scan(&c); err != nil {
		n.fail("counting poison rows: %v", err)
		return
	}
	if c != 0 {
		n.fail("%d rows quarantined %s: no committed row may be poisoned by a fault", c, when)
	}
	n.res.Poisoned = c
}

var streamingFrom = regexp.MustCompile(`msg=streaming .*\blsn=([0-9A-F]+/[0-9A-F]+)`)

// check is the checker after the last heal.
func (n *clusterNemesis) check(expected []verify.Expected, walEnd pglogrepl.LSN) {
	f := n.f
	n.res.Written = len(expected)
	// Liveness: the slot catches up with everything written.
	waitStart := time.Now()
	for {
		if lsn, _, _ := f.slotState(); lsn >= walEnd {
			break
		}
		if time.Since(waitStart) > 3*time.Minute {
			lsn, _, _ := f.slotState()
			n.fail("slot confirmed %s 3 min after the writes ended at %s", lsn, walEnd)
			break
		}
		n.checkExit()
		time.Sleep(100 * time.Millisecond)
	}
	recs := f.consumeAllWith(n.t, len(expected), 3*time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rep := verify.Validate(expected, observed(recs))
	n.logf("franz-go read_committed: %s", rep)
	n.res.Delivered, n.res.Lost, n.res.OutOfOrder, n.res.Unexpected = rep.Delivered, len(rep.Lost), len(rep.OutOfOrder), rep.Unexpected
	n.res.Duplicates = rep.Duplicates()
	if !rep.OK() || rep.Unexpected != 0 || rep.Delivered != len(expected) {
		n.fail("delivery: %s", rep)
	}
	n.checkNoPoison("at the end")

	// Sessions and where each started.
	var starts []pglogrepl.LSN
	for _, p := range n.procs {
		b, _ := os.ReadFile(p.log)
		for _, m := range streamingFrom.FindAllStringSubmatch(string(b), -1) {
			l, _ := pglogrepl.ParseLSN(m[1])
			starts = append(starts, l)
		}
	}
	n.res.Sessions = len(starts)
	if n.mode == "exactly-once" {
		if rep.Duplicates() != 0 {
			n.fail("exactly-once: %d duplicates for a franz-go read_committed consumer", rep.Duplicates())
		}
		rd := verify.Validate(expected, observed(consumeRdkafka(n.t, f.Topic, "read_committed", len(expected), 5*time.Second, 10*time.Second, 3*time.Minute)))
		n.logf("librdkafka read_committed: %s", rd)
		n.res.DupRdkafka, n.res.LostRdkafka = rd.Duplicates(), len(rd.Lost)
		if !rd.OK() || rd.Duplicates() != 0 || rd.Unexpected != 0 || rd.Delivered != len(expected) {
			n.fail("exactly-once through librdkafka: %s", rd)
		}
	} else {
		// At least once: a record is sent again only by a session that
		// started at or before its commit (from the slot's confirmed
		// position): copies ≤ the sessions that started at or before it.
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		copies := map[string]int{}
		lsnOf := map[string]pglogrepl.LSN{}
		for _, r := range recs {
			copies[r.Key]++
			lsnOf[r.Key] = r.CommitLSN
		}
		var over []string
		for k, c := range copies {
			allowed := sort.Search(len(starts), func(i int) bool { return starts[i] > lsnOf[k] })
			if c > max(allowed, 1) {
				n.res.OverBound++
				if len(over) < 5 {
					over = append(over, fmt.Sprintf("%s (commit %s): %d copies, %d sessions started at or before it", k, lsnOf[k], c, allowed))
				}
			}
		}
		if n.res.OverBound > 0 {
			n.fail("at-least-once: %d keys duplicated beyond their bound, e.g. %s", n.res.OverBound, strings.Join(over, "; "))
		}
	}
	for _, peak := range n.rss {
		n.res.PeakRSSKB = max(n.res.PeakRSSKB, peak())
	}
	if n.res.PeakRSSKB > nemesisRSSBound {
		n.fail("walpost's RSS reached %d MiB, above the bound of %d MiB", n.res.PeakRSSKB>>10, nemesisRSSBound>>10)
	}
	for _, p := range n.procs {
		if p.exited() {
			continue
		}
		_, _ = p.signal(syscall.SIGTERM, 30*time.Second)
	}
}

// TestNemesisSchedules: a schedule is a function of its seed and mode,
// and the 50 seeds of make nemesis (4 faults each, in both modes) hit
// every fault kind at least 10 times.
func TestNemesisSchedules(t *testing.T) {
	t.Parallel()
	if a, b := drawSchedule(7, "exactly-once", 4), drawSchedule(7, "exactly-once", 4); !slices.Equal(a, b) {
		t.Fatalf("seed 7 drew two schedules:\n%v\n%v", a, b)
	}
	if a, b := drawSchedule(7, "exactly-once", 4), drawSchedule(8, "exactly-once", 4); slices.Equal(a, b) {
		t.Fatalf("seeds 7 and 8 drew the same schedule %v", a)
	}
	hits := map[clusterFault]int{}
	first := map[clusterFault][]string{}
	for seed := uint64(1); seed <= 50; seed++ {
		for _, mode := range []string{"at-least-once", "exactly-once"} {
			for _, s := range drawSchedule(seed, mode, 4) {
				hits[s.Kind]++
				if len(first[s.Kind]) < 3 {
					first[s.Kind] = append(first[s.Kind], fmt.Sprintf("%d/%s", seed, mode))
				}
			}
		}
	}
	for k := clusterFault(0); k < cfKinds; k++ {
		t.Logf("%-34s %3d hits, e.g. seeds %v", k, hits[k], first[k])
		if hits[k] < 10 {
			t.Errorf("%s: %d hits in 50 seeds per mode, want at least 10", k, hits[k])
		}
	}
}
