package poison

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// listRow is the JSON shape of `walpost poison list --json` (a user
// contract: fields are added, never changed).
type listRow struct {
	Key          string     `json:"idempotency_key"`
	Topic        string     `json:"topic"`
	EventType    *string    `json:"event_type"`
	PartitionKey *string    `json:"partition_key"`
	Attempts     int        `json:"attempts"`
	ErrorClass   string     `json:"error_class"`
	Error        string     `json:"error"`
	CommitLSN    string     `json:"commit_lsn"`
	CreatedAt    string     `json:"created_at"` // as the created_at header: may be infinity or an expanded year
	PoisonedAt   time.Time  `json:"poisoned_at"`
	ReplayedAt   *time.Time `json:"replayed_at"`
	ReplayCount  int        `json:"replay_count"`
	// OutboxID with CommitLSN is the row's identity: one key may have
	// several rows, one per quarantined event.
	OutboxID string `json:"outbox_id"`
}

// WriteList renders rows as `walpost poison list` prints them: a table,
// or with asJSON an indented JSON array of listRow.
func WriteList(w io.Writer, rows []Row, asJSON bool) error {
	if asJSON {
		out := make([]listRow, len(rows))
		for i, r := range rows {
			out[i] = listRow{Key: r.IdempotencyKey, Topic: r.Topic, EventType: r.EventType, PartitionKey: r.PartitionKey,
				Attempts: r.Attempts, ErrorClass: r.ErrorClass, Error: r.LastError, CommitLSN: r.CommitLSN,
				CreatedAt: r.CreatedAtHeader(), PoisonedAt: r.PoisonedAt.UTC(), ReplayedAt: utcPtr(r.ReplayedAt), ReplayCount: r.ReplayCount,
				OutboxID: r.OutboxID}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no quarantined events")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOPIC\tATTEMPTS\tCLASS\tPOISONED_AT\tREPLAYED_AT\tERROR")
	for _, r := range rows {
		replayed := "-"
		if r.ReplayedAt != nil {
			replayed = fmt.Sprintf("%s (x%d)", r.ReplayedAt.UTC().Format(time.RFC3339), r.ReplayCount)
		}
		msg := strings.ReplaceAll(r.LastError, "\n", " ")
		if r := []rune(msg); len(r) > 80 {
			msg = string(r[:77]) + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.IdempotencyKey, r.Topic, r.Attempts, r.ErrorClass,
			r.PoisonedAt.UTC().Format(time.RFC3339), replayed, msg)
	}
	return tw.Flush()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
