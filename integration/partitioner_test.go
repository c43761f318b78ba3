package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/sink/kafka"
)

var updateVectors = flag.Bool("update-partitioner-vectors", false,
	"TestPartitionerMatchesReferenceClients: write the placements read back from the reference clients to sink/kafka/testdata/partitioner_vectors.json")

// vectorPartitions is the partition count of the placement test: odd, so
// a hash that differs from the reference's in its sign handling lands
// elsewhere for most keys.
const vectorPartitions = 7

// partitionerKeys are the keys of the placement test: 1,000 distinct
// UTF-8 strings of 1 to 48 bytes or more (every murmur2 tail length),
// ASCII and multi-byte characters, without line ends (the reference
// producers read one key per line).
func partitionerKeys() []string {
	r := rand.New(rand.NewPCG(31, 4))
	alphabet := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/ {}\"'éß日本😀")
	seen := map[string]bool{}
	var out []string
	for len(out) < 1000 {
		n := 1 + r.IntN(48)
		var b strings.Builder
		for range n {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		k := b.String()
		if strings.TrimSpace(k) != k || seen[k] {
			continue // no leading or trailing blanks: one key per line, read back as written
		}
		seen[k] = true
		out = append(out, k)
	}
	return out
}

// referencePlacement is one client placing the keys with one partitioner.
type referencePlacement struct {
	Client, Partitioner string
	Partitions          []int32 // per key, in partitionerKeys order
}

// TestPartitionerMatchesReferenceClients: for each kafka.partitioner,
// walpost run puts 1,000 keys on the partitions the client that defines
// the partitioner chooses: librdkafka (confluent-kafka, -X partitioner=…)
// for consistent_random, fnv1a and murmur2, and the Java producer's
// default partitioner for murmur2, each read back from a topic of 7
// partitions. Mutations: consistent_random as SaramaHasher(crc32) with
// int32 arithmetic, fnv1a as KafkaHasher(fnv1a) (mask instead of negate):
// most keys move and the test fails.
func TestPartitionerMatchesReferenceClients(t *testing.T) {
	t.Parallel()
	needStack(t)
	keys := partitionerKeys()
	start := time.Now()
	names := []string{config.PartitionerMurmur2, config.PartitionerConsistentRandom, config.PartitionerFNV1a}
	// Four minutes: a JVM and three Python processes start at once, beside
	// the rest of the suite (60 s killed librdkafka's producers on a busy
	// machine).
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The reference clients first (a JVM takes seconds to start), each
	// on a topic of its own, all at once.
	refs := []referencePlacement{
		{Client: "java", Partitioner: config.PartitionerMurmur2},
		{Client: "librdkafka", Partitioner: config.PartitionerMurmur2},
		{Client: "librdkafka", Partitioner: config.PartitionerConsistentRandom},
		{Client: "librdkafka", Partitioner: config.PartitionerFNV1a},
	}
	var wg sync.WaitGroup
	errs := make([]error, len(refs))
	prefix := randName("ref")
	for i := range refs {
		topic := fmt.Sprintf("%s_%d", prefix, i)
		createTopic(t, topic, vectorPartitions)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = produceReference(ctx, refs[i], topic, keys)
			if errs[i] == nil {
				refs[i].Partitions, errs[i] = placements(ctx, topic, keys)
			}
			t.Logf("%s producer (partitioner %s) read back after %v", refs[i].Client, refs[i].Partitioner, time.Since(start).Round(time.Millisecond))
		}()
	}
	fixtures := make([]*fixture, len(names))
	for i := range names {
		fixtures[i] = newFixture(t, fixtureOpts{partitions: vectorPartitions})
	}
	// walpost, one run per partitioner, meanwhile.
	got := make([][]int32, len(names))
	procs := make([]*proc, len(names))
	for i, name := range names {
		procs[i] = fixtures[i].start("WALPOST_KAFKA_PARTITIONER=" + name)
	}
	for i, p := range procs {
		if !p.waitLog("msg=streaming", 30*time.Second) {
			t.Fatalf("walpost with kafka.partitioner = %s is not streaming", names[i])
		}
		if _, err := fixtures[i].writeTxn(ctx, "t", keys, `{}`); err != nil {
			t.Fatal(err)
		}
	}
	for i := range names {
		var err error
		if got[i], err = placements(ctx, fixtures[i].Topic, keys); err != nil {
			t.Fatalf("walpost with kafka.partitioner = %s: %v", names[i], err)
		}
	}
	t.Logf("walpost's placements read back after %v", time.Since(start).Round(time.Millisecond))
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s producer (partitioner %s): %v", refs[i].Client, refs[i].Partitioner, err)
		}
	}
	for _, ref := range refs {
		i := indexOf(names, ref.Partitioner)
		p, err := kafka.KeyPartitioner(ref.Partitioner)
		if err != nil {
			t.Fatal(err)
		}
		tp := p.ForTopic("t")
		var differ []string
		for j, k := range keys {
			fn := int32(tp.Partition(&kgo.Record{Key: []byte(k)}, vectorPartitions))
			if got[i][j] != ref.Partitions[j] || fn != ref.Partitions[j] {
				differ = append(differ, fmt.Sprintf("%q: %s %d, walpost run %d, KeyPartitioner %d", k, ref.Client, ref.Partitions[j], got[i][j], fn))
			}
		}
		if len(differ) > 0 {
			t.Errorf("kafka.partitioner = %s: %d of %d keys are not where %s puts them, e.g.\n%s",
				ref.Partitioner, len(differ), len(keys), ref.Client, strings.Join(differ[:min(5, len(differ))], "\n"))
		} else {
			t.Logf("kafka.partitioner = %s: all %d keys on %s's partitions", ref.Partitioner, len(keys), ref.Client)
		}
	}
	t.Logf("compared after %v", time.Since(start).Round(time.Millisecond))
	if *updateVectors && !t.Failed() {
		writeVectors(t, keys, refs)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// createTopic creates topic with n partitions, deleted at the end of t.
func createTopic(t testing.TB, topic string, n int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, n, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		cl.Close()
		t.Fatalf("create topic %s: %v", topic, err)
	}
	// The controller answers once the topic is created; the broker serves
	// it once its metadata has it. A produce before that fails with
	// UNKNOWN_TOPIC_OR_PARTITION, which walpost's sink takes as a missing
	// topic (a destination failure), not as a retriable one.
	waitFor(t, 30*time.Second, "topic "+topic+" served with a leader for each partition", func() bool {
		tds, err := adm.ListTopics(ctx, topic)
		td, ok := tds[topic]
		if err != nil || !ok || td.Err != nil || int32(len(td.Partitions)) != n {
			return false
		}
		for _, pd := range td.Partitions {
			if pd.Err != nil || pd.Leader < 0 {
				return false
			}
		}
		return true
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topic)
		cl.Close()
	})
}

// produceReference produces one record per key to topic with ref's
// client and partitioner.
func produceReference(ctx context.Context, ref referencePlacement, topic string, keys []string) error {
	var cmd *exec.Cmd
	switch ref.Client {
	case "java":
		cmd = exec.CommandContext(ctx, "java", "-Dlog4j2.configurationFile="+filepath.Join(repoRoot, "stack", "kafka", "log4j2-tools.properties"),
			"-cp", filepath.Join(repoRoot, ".stack", "kafka", "libs", "*"),
			filepath.Join(repoRoot, "stack", "kafka", "ProduceKeys.java"), strings.Join(brokers, ","), topic)
	default:
		cmd = exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "rdkafka.sh"), "produce",
			"--brokers", strings.Join(brokers, ","), "--topic", topic, "--partitioner", ref.Partitioner)
	}
	cmd.Dir = repoRoot
	cmd.Stdin = strings.NewReader(strings.Join(keys, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, out.String())
	}
	return nil
}

// placements reads topic from the start until every key arrived and
// returns each key's partition, in keys order.
func placements(ctx context.Context, topic string, keys []string) ([]int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	at := make(map[string]int32, len(keys))
	for len(at) < len(keys) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("topic %s: %d of %d keys read: %w", topic, len(at), len(keys), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if p, ok := at[string(r.Key)]; ok && p != r.Partition {
				at[string(r.Key)] = -2 // on two partitions: never a match
				return
			}
			at[string(r.Key)] = r.Partition
		})
	}
	out := make([]int32, len(keys))
	for i, k := range keys {
		p, ok := at[k]
		if !ok {
			return nil, fmt.Errorf("topic %s: key %q was not read back (another key arrived instead)", topic, k)
		}
		out[i] = p
	}
	return out, nil
}

// writeVectors writes the reference placements for the unit test of
// kafka.KeyPartitioner.
func writeVectors(t *testing.T, keys []string, refs []referencePlacement) {
	v := struct {
		Comment    string               `json:"comment"`
		Partitions int                  `json:"partitions"`
		Keys       []string             `json:"keys"`
		Placements []referencePlacement `json:"placements"`
	}{
		Comment:    "Written by go test ./integration -run TestPartitionerMatchesReferenceClients -update-partitioner-vectors: each key's partition as the Java producer (default partitioner) and librdkafka (confluent-kafka, partitioner=…) chose it, read back from a topic of this many partitions.",
		Partitions: vectorPartitions, Keys: keys, Placements: refs,
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(repoRoot, "sink", "kafka", "testdata", "partitioner_vectors.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
