package replication

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionSettings are set (as startup parameters) on every connection
// walpost opens, so that settings a managed database or a DBA puts on the
// role or the database (ALTER ROLE/DATABASE … SET) cannot end or cancel
// walpost's own sessions: an idle_session_timeout ends the replication
// session's side connection between two position writes, an
// idle_in_transaction_session_timeout one of recover's snapshot
// transactions, a statement_timeout or lock_timeout the poison row's
// insert behind a lock or prune's delete (and transaction_timeout on
// PostgreSQL 17+, set after connecting: transactionTimeoutOff). 0
// disables each: walpost bounds its own waits (kafka.flush_timeout, the
// receive timeout, contexts, and SET LOCAL in a transaction that needs a
// bound: position.Store's). All are settable by any role (PGC_USERSET),
// so none is refused.
var SessionSettings = map[string]string{
	"idle_session_timeout":                "0",
	"idle_in_transaction_session_timeout": "0",
	"statement_timeout":                   "0",
	"lock_timeout":                        "0",
}

// ownSession adds SessionSettings to a connection's startup parameters.
func ownSession(params map[string]string) { maps.Copy(params, SessionSettings) }

// transactionTimeoutOff sets transaction_timeout (PostgreSQL 17+) to 0 on
// a new connection, for the reason SessionSettings exist: a value on the
// role or the database would end any transaction of walpost's that runs
// longer (recover's and resend's snapshot transactions; on a replication
// connection, the walsender's while it decodes and sends a transaction
// walpost reads slowly, with Kafka slow or away). It is SET after
// connecting, not a startup parameter: servers before 17 refuse an
// unknown one, and a pool cannot retry without it. A server that reports
// 17+ but does not know the setting (a fork) is left as it is.
func transactionTimeoutOff(ctx context.Context, c *pgconn.PgConn) error {
	if serverMajor(c) < 17 {
		return nil
	}
	_, err := c.Exec(ctx, `SET transaction_timeout = 0`).ReadAll()
	var pe *pgconn.PgError
	if err != nil && !(errors.As(err, &pe) && pe.Code == "42704") {
		return fmt.Errorf("set transaction_timeout = 0: %w", err)
	}
	return nil
}

// serverMajor is the server's major version from its server_version
// parameter; 0 when unreadable.
func serverMajor(c *pgconn.PgConn) int { return majorOf(c.ParameterStatus("server_version")) }

// majorOf is the major version at the start of a server_version ("17.2",
// "18beta1", "15.18 (Debian …)"); 0 without one.
func majorOf(v string) int {
	n := 0
	for _, r := range v {
		if r < '0' || r > '9' {
			break
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// ConnectSQL opens a plain (SQL) connection to connString with
// SessionSettings and bytea_output = hex.
func ConnectSQL(ctx context.Context, connString string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	ownSession(cfg.RuntimeParams)
	byteaHex(cfg.RuntimeParams)
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			if err := transactionTimeoutOff(ctx, conn.PgConn()); err != nil {
				_ = conn.Close(ctx)
				return nil, err
			}
			return conn, nil
		}
		if !dropUnknownSetting(err, cfg.RuntimeParams) {
			return conn, err
		}
	}
}

// dropUnknownSetting removes from params the one of SessionSettings a
// server refused as unknown (PostgreSQL 13 has no idle_session_timeout),
// so the connection is tried again without it and the server's version
// is refused with its own message; false for any other error.
func dropUnknownSetting(err error, params map[string]string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42704" {
		return false
	}
	for name := range SessionSettings {
		if _, set := params[name]; set && strings.Contains(pe.Message, `"`+name+`"`) {
			delete(params, name)
			return true
		}
	}
	return false
}

// PoolConfig parses connString for a pool whose connections have
// SessionSettings and bytea_output = hex.
func PoolConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	ownSession(cfg.ConnConfig.RuntimeParams)
	byteaHex(cfg.ConnConfig.RuntimeParams)
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, conn); err != nil {
				return err
			}
		}
		return transactionTimeoutOff(ctx, conn.PgConn())
	}
	return cfg, nil
}

// NewPool opens a pool to connString whose connections have
// SessionSettings.
func NewPool(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	cfg, err := PoolConfig(connString)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// SessionSettingNames are the settings walpost sets to 0 on its
// connections, in a fixed order: SessionSettings', then
// transaction_timeout (PostgreSQL 17+, transactionTimeoutOff).
func SessionSettingNames() []string {
	return []string{"idle_session_timeout", "idle_in_transaction_session_timeout", "statement_timeout", "lock_timeout", "transaction_timeout"}
}

// ReadSessionSettings reads SessionSettingNames' values in effect on conn
// (current_setting, as PostgreSQL renders them: "0", "2s"); a setting the
// server does not have (transaction_timeout before 17) is left out.
func ReadSessionSettings(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT n, current_setting(n, true) FROM unnest($1::text[]) AS n`, SessionSettingNames())
	if err != nil {
		return nil, fmt.Errorf("read the session settings: %w", err)
	}
	out := map[string]string{}
	for rows.Next() {
		var n string
		var v *string
		if err := rows.Scan(&n, &v); err != nil {
			return nil, fmt.Errorf("read the session settings: %w", err)
		}
		if v != nil {
			out[n] = *v
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the session settings: %w", err)
	}
	return out, nil
}
