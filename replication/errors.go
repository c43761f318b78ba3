package replication

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors callers branch on.
var (
	// ErrSlotLost: the slot was invalidated (max_slot_wal_keep_size); its
	// WAL is gone and events may have been lost. Fatal.
	ErrSlotLost = errors.New("replication slot is lost")
	// ErrSlotActive: another process is streaming from the slot. Retryable
	// (hot standby).
	ErrSlotActive = errors.New("replication slot is active for another process")
	// ErrSchema: the outbox table lacks a required column. Fatal.
	ErrSchema = errors.New("outbox schema mismatch")
	// ErrConfig: the database is not set up for walpost (wal_level,
	// privileges, publication, slot plugin). Fatal.
	ErrConfig = errors.New("database not set up for walpost")
)

// DecodeError is a pgoutput message walpost could not decode.
type DecodeError struct {
	LSN pglogrepl.LSN
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode pgoutput message at %s: %v", e.LSN, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// IsTerminal reports whether err must stop walpost rather than be retried
// with a new connection.
func IsTerminal(err error) bool {
	var de *DecodeError
	if errors.As(err, &de) || errors.Is(err, ErrSlotLost) || errors.Is(err, ErrSchema) || errors.Is(err, ErrConfig) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000": // invalid password, invalid authorization
			return true
		case "42501": // insufficient privilege (no REPLICATION)
			return true
		case "3D000": // database does not exist
			return true
		case "42704": // undefined object: slot or publication missing
			return true
		case "55000": // wal_level, slot invalidated
			return true
		}
	}
	return false
}

// Explain turns a PostgreSQL error into a message that says what is wrong
// and how to fix it; other errors are returned as they are.
func Explain(err error, slot, publication string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "28P01":
		return fmt.Errorf("%w: password authentication failed: check the user and password in postgres.url (WALPOST_POSTGRES_URL)", err)
	case "28000":
		return fmt.Errorf("%w: the server refused the connection (pg_hba.conf): allow a replication connection for this role and host, e.g. 'host replication <role> <addr> scram-sha-256' and 'host <db> <role> <addr> scram-sha-256'", err)
	case "42501":
		return fmt.Errorf("%w: the role may not replicate: run ALTER ROLE <role> REPLICATION (and GRANT SELECT ON the outbox table)", err)
	case "55000":
		if pgErr.Message != "" && containsAny(pgErr.Message, "wal_level") {
			return fmt.Errorf("%w: set wal_level = logical in postgresql.conf and restart PostgreSQL", err)
		}
		if containsAny(pgErr.Message+" "+pgErr.Detail, "invalidated", "lost", "exceeded the maximum reserved size") {
			why := "lost its WAL (max_slot_wal_keep_size)"
			if containsAny(pgErr.Message+" "+pgErr.Detail, "idle_timeout") {
				why = "was invalidated after being inactive for longer than idle_replication_slot_timeout"
			}
			return fmt.Errorf("%w: %w: slot %q %s; events after its confirmed position may never reach Kafka: run walpost recover (README, Runbook, \"Slot lost\"), or drop it with SELECT pg_drop_replication_slot('%s'), re-create it, and reconcile the outbox rows written since then", ErrSlotLost, err, slot, why, slot)
		}
	case "55006":
		return fmt.Errorf("%w: %w", ErrSlotActive, err)
	case "42704":
		if containsAny(pgErr.Message, "publication") {
			return fmt.Errorf("%w: create it with CREATE PUBLICATION %s FOR TABLE outbox WITH (publish = 'insert') (walpost migrate does this)", err, publication)
		}
		return fmt.Errorf("%w: replication slot %q does not exist", err, slot)
	case "53400":
		return fmt.Errorf("%w: all replication slots or WAL senders are in use: raise max_replication_slots / max_wal_senders or drop unused slots", err)
	case "0A000":
		return fmt.Errorf("%w: logical replication needs a primary (or PostgreSQL 16+ standby with hot_standby_feedback); point postgres.url at the primary", err)
	case "3D000":
		return fmt.Errorf("%w: the database in postgres.url does not exist", err)
	}
	return err
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
