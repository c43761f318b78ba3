package kafka_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink/kafka"
)

// TestKeyPartitionerVectors: each kafka.partitioner puts the 1,000 keys of
// testdata/partitioner_vectors.json where the reference client put them
// (the Java producer's default partitioner and librdkafka's murmur2,
// consistent_random and fnv1a, read back from a real topic by
// TestPartitionerMatchesReferenceClients in integration, which writes the
// file with -update-partitioner-vectors). Mutations: CRC32 through
// SaramaHasher's int arithmetic in int32, FNV-1a with Kafka's high-bit
// mask instead of Sarama's negation, murmur2 through SaramaCompatHasher:
// each moves most keys.
func TestKeyPartitionerVectors(t *testing.T) {
	b, err := os.ReadFile("testdata/partitioner_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Partitions int
		Keys       []string
		Placements []struct {
			Client, Partitioner string
			Partitions          []int32
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Keys) != 1000 || len(v.Placements) != 4 {
		t.Fatalf("vectors: %d keys, %d placements; want 1000 and 4", len(v.Keys), len(v.Placements))
	}
	for _, p := range v.Placements {
		t.Run(p.Client+"/"+p.Partitioner, func(t *testing.T) {
			part, err := kafka.KeyPartitioner(p.Partitioner)
			if err != nil {
				t.Fatal(err)
			}
			tp := part.ForTopic("t")
			bad := 0
			for i, k := range v.Keys {
				if got := int32(tp.Partition(&kgo.Record{Key: []byte(k)}, v.Partitions)); got != p.Partitions[i] {
					if bad++; bad <= 3 {
						t.Errorf("key %q: partition %d, %s puts it on %d", k, got, p.Client, p.Partitions[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d keys on another partition than %s's", bad, len(v.Keys), p.Client)
			}
		})
	}
}

// TestKeyPartitionerDefault: "" is murmur2, what walpost always used (the
// configuration's default: kafkaconf's TestConstants); an unknown name is
// an error.
func TestKeyPartitionerDefault(t *testing.T) {
	def, _ := kafka.KeyPartitioner("")
	m, _ := kafka.KeyPartitioner(kafka.PartitionerMurmur2)
	ref := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, k := range []string{"a", "order-1", "日本", "0123456789abcdef"} {
		r := &kgo.Record{Key: []byte(k)}
		want := ref.Partition(r, 13)
		if a, b := def.ForTopic("t").Partition(r, 13), m.ForTopic("t").Partition(r, 13); a != want || b != want {
			t.Errorf("key %q: \"\" → %d, murmur2 → %d, franz-go's default → %d", k, a, b, want)
		}
	}
	if _, err := kafka.KeyPartitioner("crc32"); err == nil {
		t.Error("KeyPartitioner(\"crc32\"): no error")
	}
}
