package integration

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/sink/kafka"
)

// needKafkaCluster skips the test unless the stack runs Kafka as three
// nodes (KAFKA_NODES=3 scripts/stack.sh up); make test runs these on its
// second stack.
func needKafkaCluster(t *testing.T) {
	t.Helper()
	needStack(t)
	if os.Getenv("WALPOST_STACK_KAFKA_NODES") != "3" {
		t.Skip("needs the three-node Kafka of KAFKA_NODES=3 scripts/stack.sh up")
	}
}

// partitionLeader asks scripts/stack.sh kafka-leader for the node leading
// partition p of topic, and its ISR.
func partitionLeader(t testing.TB, topic string, p int) (leader int, isr string) {
	t.Helper()
	out, errOut, err := stackScriptSplit(nil, "kafka-leader", topic, strconv.Itoa(p))
	if err != nil {
		t.Fatalf("kafka-leader %s %d: %v\n%s", topic, p, err, errOut)
	}
	f := strings.Fields(out)
	if len(f) < 3 {
		t.Fatalf("kafka-leader %s %d printed %q", topic, p, out)
	}
	leader, err = strconv.Atoi(f[0])
	if err != nil {
		t.Fatalf("kafka-leader %s %d printed %q", topic, p, out)
	}
	return leader, strings.TrimPrefix(f[2], "isr=")
}

// partitionState is partition p of topic's leader and ISR size as a
// Metadata request of the fixture's client answers them now (kadm's
// Metadata may answer from the client's cache): for the polls while a
// node is down or catching up, which would otherwise start a JVM
// (scripts/stack.sh kafka-leader) every time. A failed read is leader -1
// and is logged when its error differs from the last one.
func partitionState(t testing.TB, f *fixture, topic string, p int32, lastErr *string) (leader int32, isr int) {
	t.Helper()
	fail := func(err string) (int32, int) {
		if err != *lastErr {
			t.Logf("metadata of %s/%d: %s", topic, p, err)
			*lastErr = err
		}
		return -1, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, f.Kafka)
	if err != nil {
		return fail(err.Error())
	}
	for _, mt := range resp.Topics {
		if mt.Topic == nil || *mt.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			return fail(err.Error())
		}
		for _, mp := range mt.Partitions {
			if mp.Partition == p {
				if err := kerr.ErrorForCode(mp.ErrorCode); err != nil && !errors.Is(err, kerr.LeaderNotAvailable) {
					return fail(err.Error())
				}
				return mp.Leader, len(mp.ISR)
			}
		}
	}
	return fail("no such partition in the answer")
}

// TestKafkaClusterLeaderKilled: on three brokers (replication factor 3,
// min.insync.replicas 2), the leader of a partition walpost produces to is
// killed (SIGKILL) under load and started again, then leadership is moved
// back to it: nothing is lost, per-partition order holds, and the slot
// catches up. The topic is replicated three times (the broker's default).
func TestKafkaClusterLeaderKilled(t *testing.T) {
	needKafkaCluster(t)
	f := stackFixture(t, 3)
	p := f.start()
	waitStreaming(t, p)
	leader, isr := partitionLeader(t, f.Topic, 0)
	if isr != "1,2,3" && len(strings.Split(isr, ",")) != 3 {
		t.Fatalf("partition 0 of %s: ISR %s, want all three nodes", f.Topic, isr)
	}
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 2000, time.Minute)
	start := time.Now()
	stackCtl(t, "kafka-kill", strconv.Itoa(leader))
	t.Logf("node %d (leader of partition 0) killed", leader)
	var newLeader int32
	var lastErr string
	waitFor(t, time.Minute, "a new leader of partition 0", func() bool {
		newLeader, _ = partitionState(t, f, f.Topic, 0, &lastErr)
		return newLeader != int32(leader) && newLeader > 0
	})
	t.Logf("%s after the kill: node %d leads partition 0", time.Since(start).Round(100*time.Millisecond), newLeader)
	l.waitWritten(t, 4000, time.Minute)
	stackCtl(t, "kafka-start", strconv.Itoa(leader))
	t.Logf("%s: node %d started again", time.Since(start).Round(100*time.Millisecond), leader)
	waitFor(t, 2*time.Minute, "node back in the ISR of partition 0", func() bool {
		_, isr := partitionState(t, f, f.Topic, 0, &lastErr)
		return isr == 3
	})
	t.Logf("%s: node %d back in the ISR", time.Since(start).Round(100*time.Millisecond), leader)
	stackCtl(t, "kafka-leader", f.Topic, "0", strconv.Itoa(leader))
	t.Logf("%s: node %d made the leader again", time.Since(start).Round(100*time.Millisecond), leader)
	if now, _ := partitionLeader(t, f.Topic, 0); now != leader {
		t.Errorf("kafka-leader %s 0 %d: leader is %d", f.Topic, leader, now)
	}
	l.waitWritten(t, 6000, time.Minute)
	expected := l.finish(t)
	t.Logf("%s: writers stopped after %d events", time.Since(start).Round(100*time.Millisecond), len(expected))
	walEnd := f.currentWAL()
	verifyDelivery(t, f, expected, 3*time.Minute)
	waitFor(t, time.Minute, "the slot to confirm the end of the writes", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= walEnd
	})
	alive(t, p, "after the leader was killed and moved back")
}

// TestKafkaClusterExactlyOnceCoordinatorKilled: in exactly-once mode the
// node coordinating walpost's transactional id is killed under load and
// started again; read_committed consumers see every event exactly once.
func TestKafkaClusterExactlyOnceCoordinatorKilled(t *testing.T) {
	needKafkaCluster(t)
	f := stackFixture(t, 3)
	p := f.start(f.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=500", "WALPOST_KAFKA_FLUSH_TIMEOUT=5s")...)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 2000, time.Minute)
	txnID := kafka.TransactionalID(f.Slot, systemID(t, f))
	out, errOut, err := stackScriptSplit(nil, "kafka-coordinator", txnID)
	if err != nil {
		t.Fatalf("kafka-coordinator %s: %v\n%s", txnID, err, errOut)
	}
	coord, err := strconv.Atoi(strings.Fields(out)[0])
	if err != nil {
		t.Fatalf("kafka-coordinator printed %q", out)
	}
	start := time.Now()
	stackCtl(t, "kafka-kill", strconv.Itoa(coord))
	t.Logf("node %d (coordinator of %s) killed", coord, txnID)
	l.waitWritten(t, 4000, 2*time.Minute)
	stackCtl(t, "kafka-start", strconv.Itoa(coord))
	t.Logf("%s after the kill: node %d started again", time.Since(start).Round(100*time.Millisecond), coord)
	l.waitWritten(t, 6000, time.Minute)
	expected := l.finish(t)
	t.Logf("%s: writers stopped after %d events", time.Since(start).Round(100*time.Millisecond), len(expected))
	verifyReadCommitted(t, f, expected, 3*time.Minute)
	alive(t, p, "after the coordinator was killed")
}
