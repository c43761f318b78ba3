package kafka_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/sink/kafka"
)

// describeAnswers makes the cluster answer DescribeTransactions for id
// with the states in order (then kfake answers), or with code when it
// is not 0; it counts the requests.
type describeAnswers struct {
	mu     sync.Mutex
	states []string
	code   int16
	n      int
}

func (d *describeAnswers) count() int { d.mu.Lock(); defer d.mu.Unlock(); return d.n }

func (d *describeAnswers) install(c *kfake.Cluster, id string) {
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		d.mu.Lock()
		defer d.mu.Unlock()
		d.n++
		if d.code == 0 && len(d.states) == 0 {
			return nil, nil, false
		}
		resp := req.(*kmsg.DescribeTransactionsRequest).ResponseKind().(*kmsg.DescribeTransactionsResponse)
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ErrorCode = id, d.code
		if d.code == 0 {
			st.State, d.states = d.states[0], d.states[1:]
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
		return resp, nil, true
	})
}

// describeEnv is an initialised transactional sink on a cluster that
// answers DescribeTransactions with d.
func describeEnv(t *testing.T, d *describeAnswers) (*kfake.Cluster, *kafka.Sink) {
	t.Helper()
	c := newTxnCluster(t)
	id := kafka.TransactionalID("s1", 7)
	k := newTxnKafka(t, c, id)
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	d.install(c, id)
	return c, k
}

// commitTxns commits n transactions of size records each (keys p<i>-<j>),
// failing the test on any error.
func commitTxns(t *testing.T, k *kafka.Sink, n, size int) {
	t.Helper()
	for i := range n {
		if err := produceTxn(t, k, fmt.Sprintf("p%d", i), size); err != nil {
			t.Fatal(err)
		}
		if err := k.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, LSN: 0x100 + 0x100*pglogrepl.LSN(i)}); err != nil {
			t.Fatalf("CommitTxn %d: %v", i, err)
		}
	}
}

// TestTxnCommitWaitsForMarkers: CommitTxn returns only once the
// coordinator no longer describes the transaction as PrepareCommit (its
// markers are written: read_committed consumers see its records, and the
// next transaction's records do not wait on the broker for them).
func TestTxnCommitWaitsForMarkers(t *testing.T) {
	d := &describeAnswers{states: []string{"PrepareCommit", "PrepareCommit", "PrepareCommit"}}
	_, k := describeEnv(t, d)
	commitTxns(t, k, 1, 3)
	if n := d.count(); n != 4 {
		t.Fatalf("CommitTxn described the transaction %d times; want 4 (three PrepareCommit, then kfake's own state)", n)
	}
}

// TestTxnCommitWithoutDescribe: a coordinator that refuses to describe
// the transactional id (no DESCRIBE ACL) fails no commit, and later
// commits no longer ask.
func TestTxnCommitWithoutDescribe(t *testing.T) {
	d := &describeAnswers{code: kerr.TransactionalIDAuthorizationFailed.Code}
	c, k := describeEnv(t, d)
	commitTxns(t, k, 2, 2)
	if n := d.count(); n != 1 {
		t.Fatalf("%d DescribeTransactions requests; want 1 (the refusal turns the wait off)", n)
	}
	endMarker(t, c)
	if got := committedKeys(t, c, testTopic); len(got) != 4 {
		t.Fatalf("read_committed saw %v, want the 4 committed records", got)
	}
}

// TestEnsureCheckpointTopicCreates: the checkpoint topic walpost creates
// has one partition, cleanup.policy=compact and segments of 16 MiB, so
// compaction keeps it small however often walpost commits.
func TestEnsureCheckpointTopicCreates(t *testing.T) {
	c := newCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	created, err := kafka.EnsureCheckpointTopic(ctx20(t), cl, "new_checkpoints", true)
	if err != nil || !created {
		t.Fatalf("EnsureCheckpointTopic: created %v, %v", created, err)
	}
	rc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx20(t), "new_checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rc {
		for _, c := range r.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
	}
	if got["cleanup.policy"] != "compact" || got["segment.bytes"] != "16777216" {
		t.Fatalf("created with cleanup.policy=%q segment.bytes=%q; want compact and 16777216", got["cleanup.policy"], got["segment.bytes"])
	}
}

// TestTxnCommitDescribeFailsThrice: a coordinator that fails to describe
// the transaction for another reason (here UNKNOWN_SERVER_ERROR) fails no
// commit; the wait is turned off after three commits in a row failed it.
func TestTxnCommitDescribeFailsThrice(t *testing.T) {
	d := &describeAnswers{code: kerr.UnknownServerError.Code}
	_, k := describeEnv(t, d)
	commitTxns(t, k, 5, 1)
	if n := d.count(); n != 3 {
		t.Fatalf("%d DescribeTransactions requests over 5 commits; want 3", n)
	}
}

// TestEnsureCheckpointTopicSegmentRefused: a cluster whose policy refuses
// segment.bytes on new topics still gets its checkpoint topic, with the
// broker's default segments.
func TestEnsureCheckpointTopicSegmentRefused(t *testing.T) {
	c := newCluster(t)
	refused := 0
	c.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		creq := req.(*kmsg.CreateTopicsRequest)
		for _, rt := range creq.Topics {
			for _, cfg := range rt.Configs {
				if cfg.Name == "segment.bytes" {
					refused++
					resp := creq.ResponseKind().(*kmsg.CreateTopicsResponse)
					st := kmsg.NewCreateTopicsResponseTopic()
					st.Topic, st.ErrorCode = rt.Topic, kerr.PolicyViolation.Code
					resp.Topics = append(resp.Topics, st)
					return resp, nil, true
				}
			}
		}
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	created, err := kafka.EnsureCheckpointTopic(ctx20(t), cl, "managed_checkpoints", true)
	if err != nil || !created || refused != 1 {
		t.Fatalf("EnsureCheckpointTopic: created %v, %v, %d refused creates; want created after one refusal", created, err, refused)
	}
}
