package integration

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/verify"
)

// failoverTimelineRE reads walpost's log line of a session on another
// timeline: the timeline, the switch point and the skip bound.
var failoverTimelineRE = regexp.MustCompile(`timeline changed since walpost recorded its position[^\n]* timeline=(\d+) switch_point=(\S+) skip_to=(\S+)`)

// TestFailoverPromotedStandby: on a stack with a standby (PG_VERSION=17
// PG_STANDBY=1 make stack-up) 8 writers run, the primary is killed
// (SIGKILL) and the standby promoted (scripts/stack.sh pg-failover), and
// the writers go on against the new primary. walpost, on the multi-host
// URL with target_session_attrs=read-write, reconnects to the new primary
// and streams from its synced copy of the failover slot: every row the
// new primary has is in Kafka (0 lost), Kafka has no record whose row the
// new primary lacks (0 extra: synchronized_standby_slots kept walpost
// from publishing what the standby had not received), order holds per
// partition. Rows the old primary committed that never reached the
// standby (asynchronous replication) are gone with it and are counted,
// not expected. The test leaves the stack failed over: it skips without
// a standby.
func TestFailoverPromotedStandby(t *testing.T) {
	standbyURL := os.Getenv("WALPOST_STACK_STANDBY_URL")
	if standbyURL == "" {
		t.Skip("needs a standby: PG_VERSION=17 PG_STANDBY=1 make stack-up (the test promotes it)")
	}
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start()
	waitStreaming(t, p)
	l := newWriterLoad(f, 8, 10, 5*time.Millisecond).start()
	l.waitWritten(t, 2000, 2*time.Minute)

	// The standby's copy of the slot must be usable before the primary
	// dies: synced, not temporary (sync creates it temporary until the
	// primary's slot has moved past what the standby has), not invalidated.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, err := pgx.Connect(ctx, standbyURL)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the standby's synced copy of the slot", func() bool {
		var ok bool
		err := sb.QueryRow(ctx, `SELECT synced AND NOT temporary AND invalidation_reason IS NULL
			FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&ok)
		return err == nil && ok
	})
	sb.Close(context.Background())
	l.waitWritten(t, 1000, 2*time.Minute)
	failedOver := time.Now()
	stackCtl(t, "pg-failover")
	t.Logf("pg-failover took %s", time.Since(failedOver).Round(time.Millisecond))
	waitStreamingAgain(t, p, 1, 2*time.Minute)
	t.Logf("walpost streaming from the new primary %s after the failover began", time.Since(failedOver).Round(time.Millisecond))
	// The position recorded on timeline 1 is compared across the switch:
	// nothing past the switch point is skipped (the new primary's WAL
	// there is other data).
	tl := failoverTimelineRE.FindStringSubmatch(positionLog(p))
	if tl == nil {
		t.Fatalf("walpost did not log the timeline change after the promotion\n%s", tail(p.log, 40))
	}
	switchPoint, err1 := pglogrepl.ParseLSN(tl[2])
	skipTo, err2 := pglogrepl.ParseLSN(tl[3])
	if err1 != nil || err2 != nil || tl[1] == "1" {
		t.Fatalf("timeline change logged as %q", tl[0])
	}
	if skipTo > switchPoint {
		t.Errorf("walpost skips up to %s, past the switch point %s onto timeline %s", skipTo, switchPoint, tl[1])
	}
	t.Logf("timeline %s, switch point %s, skipped up to %s", tl[1], switchPoint, skipTo)
	l.waitWritten(t, 2000, 2*time.Minute)
	committed := l.finish(t)

	// What the new primary has is what must arrive.
	keys := make([]string, len(committed))
	for i, e := range committed {
		keys[i] = e.Key
	}
	rows, err := existingKeys(ctx, f, keys)
	if err != nil {
		t.Fatal(err)
	}
	present := make(map[string]bool, len(rows))
	for _, k := range rows {
		present[k] = true
	}
	var expected []verify.Expected
	for _, e := range committed {
		if present[e.Key] {
			expected = append(expected, e)
		}
	}
	t.Logf("%d events committed, %d on the new primary (%d lost with the old primary's unreplicated WAL)",
		len(committed), len(expected), len(committed)-len(expected))
	if len(expected) < len(committed)/2 {
		t.Fatalf("the new primary has only %d of %d committed events", len(expected), len(committed))
	}
	// Lost, out of order or extra (a key the new primary lacks) fails.
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after the failover")
}
