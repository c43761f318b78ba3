package status

import (
	"encoding/json"
	"io"
)

// Report is what walpost status shows. Its JSON form (WriteJSON) is the
// output of walpost status --json; doc.go specifies every field.
type Report struct {
	Postgres    Postgres    `json:"postgres"`
	Slot        Slot        `json:"slot"`
	Publication Publication `json:"publication"`
	Outbox      Outbox      `json:"outbox"`
	Poison      Poison      `json:"poison"`
	Kafka       Kafka       `json:"kafka"`
	// Notes are problems worth acting on (inactive slot, quarantined
	// events, a publication that does not fit the outbox…); never nil.
	Notes []string `json:"notes"`
}

// Postgres is the server walpost connected to.
type Postgres struct {
	Database   string `json:"database"`
	Version    string `json:"version"`
	InRecovery bool   `json:"in_recovery"`
	// CurrentWALLSN is pg_current_wal_lsn() (on a standby, the last
	// replayed LSN); lag and retained WAL are measured from it.
	CurrentWALLSN *string `json:"current_wal_lsn"`
}

// Slot is the replication slot (postgres.slot).
type Slot struct {
	Name              string  `json:"name"`
	Exists            bool    `json:"exists"`
	SlotType          *string `json:"slot_type"`
	Plugin            *string `json:"plugin"`
	Database          *string `json:"database"`
	Active            *bool   `json:"active"`
	ActivePID         *int32  `json:"active_pid"`
	ConfirmedFlushLSN *string `json:"confirmed_flush_lsn"`
	RestartLSN        *string `json:"restart_lsn"`
	// LagBytes is current WAL − confirmed_flush_lsn: WAL not yet confirmed.
	LagBytes *int64 `json:"lag_bytes"`
	// RetainedWALBytes is current WAL − restart_lsn: WAL the slot keeps.
	RetainedWALBytes *int64  `json:"retained_wal_bytes"`
	WALStatus        *string `json:"wal_status"`
	// SafeWALSizeBytes is null when max_slot_wal_keep_size is -1
	// (unlimited; SafeWALUnlimited is then true) or the slot is lost.
	SafeWALSizeBytes *int64 `json:"safe_wal_size_bytes"`
	SafeWALUnlimited bool   `json:"safe_wal_unlimited"`
	// Failover and Synced are null before PostgreSQL 17.
	Failover *bool `json:"failover"`
	Synced   *bool `json:"synced"`
	// Standbys: the slot's copy on each standby postgres.url lists
	// (PostgreSQL 17+; empty with one host): state synced (a failover
	// loses nothing), temporary, missing, invalidated, unreachable or
	// unsupported.
	Standbys []StandbySlot `json:"standbys"`
	Error    *string       `json:"error"`
}

// StandbySlot is the slot's copy on one standby.
type StandbySlot struct {
	Standby   string  `json:"standby"`
	State     string  `json:"state"`
	Confirmed *string `json:"confirmed_flush_lsn"`
	Error     *string `json:"error"`
}

// Publication is the publication (postgres.publication).
type Publication struct {
	Name       string   `json:"name"`
	Exists     bool     `json:"exists"`
	AllTables  *bool    `json:"all_tables"`
	Tables     []string `json:"tables"`
	Operations []string `json:"operations"`
	Error      *string  `json:"error"`
}

// Outbox is the outbox table (postgres.table).
type Outbox struct {
	Table string `json:"table"`
	// RowEstimate is an estimate from the statistics, not a count.
	RowEstimate       *int64  `json:"row_estimate"`
	RowEstimateSource *string `json:"row_estimate_source"`
	Error             *string `json:"error"`
}

// Poison is the poison table (postgres.poison_table).
type Poison struct {
	Table    string  `json:"table"`
	Pending  *int64  `json:"pending"`
	Replayed *int64  `json:"replayed"`
	Error    *string `json:"error"`
}

// Kafka is the default topic (kafka.topic).
type Kafka struct {
	Brokers    []string    `json:"brokers"`
	Topic      string      `json:"topic"`
	Partitions *int        `json:"partitions"`
	EndOffsets []Partition `json:"end_offsets"`
	// EndOffsetSum is the sum of the partitions' end offsets: every record
	// ever written to the topic, by walpost or anyone else.
	EndOffsetSum *int64  `json:"end_offset_sum"`
	Error        *string `json:"error"`
}

// Partition is one partition's end offset.
type Partition struct {
	Partition int32   `json:"partition"`
	EndOffset *int64  `json:"end_offset"`
	Error     *string `json:"error"`
}

// WriteJSON writes r as indented JSON, one object followed by a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
