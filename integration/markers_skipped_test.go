package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMarkersSkipped reads the broker's line of KAFKA-20734 (as Kafka
// 4.3.1 wrote it after a restart) for the transactional id it names only.
func TestMarkersSkipped(t *testing.T) {
	const line = "[2026-12-04 17:50:49,916] INFO [Transaction Marker Channel Manager 1]: Couldn't find leader endpoint for partitions " +
		"Set(topic_t_2953a560-2, topic_t_2953a560-0, topic_t_2953a560-1, cp_topic_t_2953a560-0) while trying to send transaction markers for " +
		"walpost-slot_t_2953a560-7715506614798749991, these partitions are likely deleted already and hence can be skipped " +
		"(kafka.coordinator.transaction.TransactionMarkerChannelManager)"
	path := filepath.Join(t.TempDir(), "kafka.log")
	log := "[2026-12-04 17:50:49,875] WARN [TransactionCoordinator id=1] Connection to node 1 (/127.0.0.1:19092) could not be established.\n" +
		line + "\n[2026-12-04 17:50:49,935] INFO [ReplicaFetcherManager on broker 1] Removed fetcher\n"
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		txnID, want string
	}{
		{"walpost-slot_t_2953a560-7715506614798749991", line},
		{"walpost-slot_t_2953a560-771550661479874999", ""}, // a prefix of the id is another id
		{"walpost-slot_t_2953a56", ""},
		{"walpost-slot_t_1d4212da-7715506614798749991", ""},
	} {
		if got := markersSkipped(path, c.txnID); got != c.want {
			t.Errorf("markersSkipped(%q) = %q, want %q", c.txnID, got, c.want)
		}
	}
	if got := markersSkipped(filepath.Join(t.TempDir(), "none.log"), "walpost-slot_t_2953a560-7715506614798749991"); got != "" {
		t.Errorf("no log: %q", got)
	}
}
