package replicationtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// Config describes the fake server; every field may be left zero.
type Config struct {
	// SystemID and Timeline are what IDENTIFY_SYSTEM reports; default 7
	// and 1.
	SystemID int64
	Timeline int32
	// Database is current_database() and the slot's database; default
	// "walpost".
	Database string
	// VersionNum is server_version_num; default 160004 (PostgreSQL 16, no
	// failover slots, so nothing alters the slot).
	VersionNum int
	// Slot and Publication name the one slot and publication; default
	// "walpost" and "walpost_outbox".
	Slot, Publication string
	// Schema and Table name the outbox table; default public.outbox.
	Schema, Table string
	// Columns are the outbox table's columns as Relation messages describe
	// them; default OutboxColumns.
	Columns []Column
	// SenderTimeout is wal_sender_timeout; default 60 s.
	SenderTimeout time.Duration
	// Start is the WAL position the server starts at, where the slot is
	// confirmed; default 0/1000000.
	Start pglogrepl.LSN
	// NoSlot: the slot does not exist until a client creates it.
	NoSlot bool
	// SendLag, when set, makes each message's send time its transaction's
	// commit time plus SendLag: a stream that far behind its writers
	// (walpost's exactly-once transactor tells a backlog from a live
	// stream by it). Zero sends 0, which a client reads as 2000-01-01,
	// before every commit time of the fake (2027): a live stream.
	SendLag time.Duration
	// Query answers a query before the server's own catalog does: a nil
	// result and a nil error leave it to the server. An error that is a
	// *pgconn.PgError reaches the client with its code.
	Query func(sql string) (*Result, error)
}

// OutboxColumns are the columns of walpost's outbox table (migrations/)
// that a Row fills, in order.
var OutboxColumns = []Column{
	{Name: "id", OID: pgtype.UUIDOID, Key: true},
	{Name: "idempotency_key", OID: pgtype.TextOID},
	{Name: "payload", OID: pgtype.JSONBOID},
	{Name: "created_at", OID: pgtype.TimestamptzOID},
	{Name: "topic", OID: pgtype.TextOID},
}

// Row is one outbox row of OutboxColumns: id, idempotency_key and payload
// as given, created_at fixed, topic NULL (the default topic).
func Row(id, key, payload string) []Value {
	return []Value{Text(id), Text(key), Text(payload), Text("2026-01-01 00:00:00+00"), Null}
}

// Txn is a committed transaction of the fake WAL.
type Txn struct {
	Xid    uint32
	Begin  pglogrepl.LSN // the XLogData start of its Begin
	Commit pglogrepl.LSN // its commit record (Begin's final LSN)
	End    pglogrepl.LSN // the end of its commit record: what confirms it
	Time   time.Time
	Rows   [][]Value
}

// Slot is the state of the fake slot.
type Slot struct {
	Exists    bool
	Confirmed pglogrepl.LSN // confirmed_flush_lsn
	ActivePID uint32        // 0: no walsender streams from it
	Lost      bool          // wal_status = lost
}

// Server is the fake. Create it with NewServer; it closes with the test.
type Server struct {
	t   testing.TB
	cfg Config
	ln  net.Listener
	wg  sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change
	wal      []Txn
	walEnd   pglogrepl.LSN
	xid      uint32
	slot     Slot
	statuses []Status
	starts   int // START_REPLICATIONs accepted
	pid      uint32
	conns    map[*conn]struct{}
	closed   bool
}

// relationID is the outbox table's relation id in Relation messages.
const relationID = 16394

// NewServer starts a fake server on 127.0.0.1; t's cleanup closes it and
// waits for its goroutines.
func NewServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	cfg.defaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("replicationtest: listen: %v", err)
	}
	s := &Server{t: t, cfg: cfg, ln: ln, changed: make(chan struct{}), walEnd: cfg.Start, xid: 700, pid: 4000,
		slot: Slot{Exists: !cfg.NoSlot, Confirmed: cfg.Start}, conns: map[*conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

func (c *Config) defaults() {
	if c.SystemID == 0 {
		c.SystemID = 7
	}
	if c.Timeline == 0 {
		c.Timeline = 1
	}
	if c.Database == "" {
		c.Database = "walpost"
	}
	if c.VersionNum == 0 {
		c.VersionNum = 160004
	}
	if c.Slot == "" {
		c.Slot = "walpost"
	}
	if c.Publication == "" {
		c.Publication = "walpost_outbox"
	}
	if c.Schema == "" {
		c.Schema = "public"
	}
	if c.Table == "" {
		c.Table = "outbox"
	}
	if c.Columns == nil {
		c.Columns = OutboxColumns
	}
	if c.SenderTimeout == 0 {
		c.SenderTimeout = time.Minute
	}
	if c.Start == 0 {
		c.Start = 0x1000000
	}
}

// URL is a connection string to the server for both of walpost's
// connections: the simple query protocol (the fake speaks no other),
// no TLS.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://walpost@%s/%s?sslmode=disable&default_query_exec_mode=simple_protocol", s.ln.Addr(), s.cfg.Database)
}

// Close stops the server: the listener and every connection close, and
// Close waits for their goroutines. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.wg.Wait()
}

// Append commits a transaction with rows (values in Config.Columns order)
// at the end of the WAL; streaming connections send it at once. Its
// Begin is at the WAL's end, each row 0x28 after the previous record, its
// commit record 0x28 after the last row and 0x30 long.
func (s *Server) Append(rows ...[]Value) Txn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.xid++
	b := s.walEnd
	c := b + pglogrepl.LSN(0x28*(len(rows)+1))
	tx := Txn{Xid: s.xid, Begin: b, Commit: c, End: c + 0x30, Time: time.Unix(1_800_000_000+int64(s.xid), 0).UTC(), Rows: rows}
	s.wal = append(s.wal, tx)
	s.walEnd = tx.End
	s.changeLocked()
	return tx
}

// WALEnd is the end of the fake WAL (the server's current WAL position).
func (s *Server) WALEnd() pglogrepl.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.walEnd
}

// Keepalive sends a primary keepalive with the WAL's end on every
// streaming connection, asking for a reply when reply is set.
func (s *Server) Keepalive(reply bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.streaming {
			c.keepalives = append(c.keepalives, reply)
		}
	}
	s.changeLocked()
}

// Disconnect cuts every streaming connection without a word (a walsender
// killed, a network failure); the slot becomes free.
func (s *Server) Disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.streaming {
			_ = c.nc.Close()
		}
	}
}

// Slot returns the slot's state.
func (s *Server) Slot() Slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slot
}

// SetSlot changes the slot's state (before a session reads it).
func (s *Server) SetSlot(edit func(*Slot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	edit(&s.slot)
	s.changeLocked()
}

// Statuses returns every standby status update received so far, in order.
func (s *Server) Statuses() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Status(nil), s.statuses...)
}

// Starts is how many START_REPLICATIONs the server accepted.
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Wait waits until cond holds (it is called again at every change of the
// server's state: a status update, a start, a connection, the WAL), or
// ctx ends (an error saying what was waited for).
func (s *Server) Wait(ctx context.Context, what string, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("replicationtest: waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// WaitFlush waits until a status update confirms at least lsn and returns it.
func (s *Server) WaitFlush(ctx context.Context, lsn pglogrepl.LSN) (Status, error) {
	var got Status
	err := s.Wait(ctx, "a flush at "+lsn.String(), func() bool {
		for _, st := range s.Statuses() {
			if st.Flush >= lsn {
				got = st
				return true
			}
		}
		return false
	})
	return got, err
}

// MaxFlush is the highest flush position any status update confirmed.
func (s *Server) MaxFlush() pglogrepl.LSN {
	var m pglogrepl.LSN
	for _, st := range s.Statuses() {
		m = max(m, st.Flush)
	}
	return m
}

func (s *Server) changeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// conn is one client connection.
type conn struct {
	nc   net.Conn
	be   *pgproto3.Backend
	pid  uint32
	repl bool // replication=database
	tx   byte // transaction status of ReadyForQuery

	// Guarded by Server.mu.
	streaming  bool
	keepalives []bool
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.pid++
		c := &conn{nc: nc, be: pgproto3.NewBackend(nc, nc), pid: s.pid, tx: 'I'}
		s.conns[c] = struct{}{}
		s.changeLocked()
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				_ = nc.Close()
				s.mu.Lock()
				delete(s.conns, c)
				s.changeLocked()
				s.mu.Unlock()
			}()
			s.serve(c)
		}()
	}
}

// serve runs one connection: startup, then queries until it ends.
func (s *Server) serve(c *conn) {
	if !s.startup(c) {
		return
	}
	extendedErr := false
	for {
		msg, err := c.be.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			if !s.query(c, m.String) {
				return
			}
		case *pgproto3.Terminate:
			return
		case *pgproto3.Sync:
			if extendedErr {
				extendedErr = false
				c.be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "0A000", Message: "replicationtest: the extended query protocol is not supported; use default_query_exec_mode=simple_protocol"})
			}
			c.be.Send(&pgproto3.ReadyForQuery{TxStatus: c.tx})
			if c.be.Flush() != nil {
				return
			}
		default:
			extendedErr = true
		}
	}
}

func (s *Server) startup(c *conn) bool {
	for {
		msg, err := c.be.ReceiveStartupMessage()
		if err != nil {
			return false
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := c.nc.Write([]byte{'N'}); err != nil {
				return false
			}
			continue
		case *pgproto3.StartupMessage:
			c.repl = m.Parameters["replication"] == "database"
		default:
			return false
		}
		break
	}
	c.be.Send(&pgproto3.AuthenticationOk{})
	for k, v := range map[string]string{
		"server_version": s.version(), "server_encoding": "UTF8", "client_encoding": "UTF8",
		"standard_conforming_strings": "on", "DateStyle": "ISO, MDY", "TimeZone": "UTC", "integer_datetimes": "on",
	} {
		c.be.Send(&pgproto3.ParameterStatus{Name: k, Value: v})
	}
	c.be.Send(&pgproto3.BackendKeyData{ProcessID: c.pid, SecretKey: []byte{0, 0, 0, 1}})
	c.be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return c.be.Flush() == nil
}

func (s *Server) version() string {
	return fmt.Sprintf("%d.%d", s.cfg.VersionNum/10000, s.cfg.VersionNum%100)
}

// query answers one simple query; false ends the connection.
func (s *Server) query(c *conn, sql string) bool {
	q := strings.TrimSpace(sql)
	if c.repl && strings.HasPrefix(q, "START_REPLICATION") {
		return s.startReplication(c, q)
	}
	res, err := s.answer(c, q)
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			pgErr = &pgconn.PgError{Code: "XX000", Message: err.Error()}
		}
		c.be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: pgErr.Code, Message: pgErr.Message})
	} else {
		res.send(c.be)
	}
	c.be.Send(&pgproto3.ReadyForQuery{TxStatus: c.tx})
	return c.be.Flush() == nil
}

// answer is the result of query q: Config.Query's, the replication
// commands', or the catalog's.
func (s *Server) answer(c *conn, q string) (*Result, error) {
	if q == "" || q == ";" || strings.HasPrefix(q, "--") {
		return &Result{empty: true}, nil
	}
	if !c.repl && s.cfg.Query != nil {
		if res, err := s.cfg.Query(q); res != nil || err != nil {
			return res, err
		}
	}
	low := strings.ToLower(q)
	switch {
	case low == "begin" || strings.HasPrefix(low, "begin "):
		c.tx = 'T'
		return Tag("BEGIN"), nil
	case low == "commit" || low == "rollback":
		c.tx = 'I'
		return Tag(strings.ToUpper(low)), nil
	case strings.HasPrefix(low, "set "):
		return Tag("SET"), nil
	case strings.HasPrefix(low, "select set_config("):
		return setConfig(q), nil
	}
	if c.repl {
		return s.replicationCommand(q)
	}
	if res := s.catalog(q); res != nil {
		return res, nil
	}
	s.t.Errorf("replicationtest: no answer for query %q", q)
	return nil, &pgconn.PgError{Code: "XX000", Message: "replicationtest: no answer for query: " + q}
}

// setConfigCall matches one set_config('name', 'value', …) of a query
// pgx sent with its arguments in line (the simple protocol).
var setConfigCall = regexp.MustCompile(`set_config\('([^']*)',\s*'([^']*)'`)

// setConfig answers SELECT set_config(…)[, set_config(…)…] as PostgreSQL
// does: one row, a text column per call holding the value set.
func setConfig(q string) *Result {
	calls := setConfigCall.FindAllStringSubmatch(q, -1)
	cols := make([]Col, len(calls))
	vals := make([]any, len(calls))
	for i, m := range calls {
		cols[i], vals[i] = Col{"set_config", pgtype.TextOID}, m[2]
	}
	return Rows(cols, vals)
}

// replicationCommand answers the commands of a replication connection
// before START_REPLICATION.
func (s *Server) replicationCommand(q string) (*Result, error) {
	switch {
	case q == "IDENTIFY_SYSTEM":
		return Rows([]Col{{"systemid", pgtype.TextOID}, {"timeline", pgtype.Int4OID}, {"xlogpos", pgtype.TextOID}, {"dbname", pgtype.TextOID}},
			[]any{strconv.FormatInt(s.cfg.SystemID, 10), s.cfg.Timeline, s.WALEnd(), s.cfg.Database}), nil
	case strings.Contains(q, "wal_sender_timeout"):
		return Rows([]Col{{"setting", pgtype.TextOID}}, []any{strconv.FormatInt(s.cfg.SenderTimeout.Milliseconds(), 10)}), nil
	case strings.HasPrefix(q, "ALTER_REPLICATION_SLOT"):
		return Tag("ALTER_REPLICATION_SLOT"), nil
	}
	s.t.Errorf("replicationtest: no answer for replication command %q", q)
	return nil, &pgconn.PgError{Code: "42601", Message: "replicationtest: unknown replication command: " + q}
}

var reSlotName = regexp.MustCompile(`(?i)slot_name\s*=\s*'([^']*)'`)

// catalog answers the catalog queries of package replication (and the
// fenced session's slot holder query) from the fake's state; nil: not
// one of them.
func (s *Server) catalog(q string) *Result {
	cfg := s.cfg
	switch {
	case strings.HasPrefix(q, "SELECT current_setting('server_version'), current_setting('server_version_num')::int"):
		return Rows([]Col{{"v", pgtype.TextOID}, {"n", pgtype.Int4OID}}, []any{s.version(), cfg.VersionNum})
	case q == "SHOW wal_level":
		return Rows([]Col{{"wal_level", pgtype.TextOID}}, []any{"logical"})
	case q == "SELECT current_database()":
		return Rows([]Col{{"current_database", pgtype.TextOID}}, []any{cfg.Database})
	case q == "SELECT pg_is_in_recovery()":
		return Rows([]Col{{"pg_is_in_recovery", pgtype.BoolOID}}, []any{false})
	case strings.Contains(q, "SELECT n.nspname, c.relname FROM pg_class c"):
		return Rows([]Col{{"nspname", pgtype.TextOID}, {"relname", pgtype.TextOID}}, []any{cfg.Schema, cfg.Table})
	case strings.HasPrefix(q, "SELECT a.attname FROM pg_attribute a"):
		r := Rows([]Col{{"attname", pgtype.TextOID}})
		for _, c := range cfg.Columns {
			r.Add(c.Name)
		}
		return r
	case strings.HasPrefix(q, "SELECT a.attname, t.typname, a.attnotnull FROM pg_attribute a"):
		r := Rows([]Col{{"attname", pgtype.TextOID}, {"typname", pgtype.TextOID}, {"attnotnull", pgtype.BoolOID}})
		for _, c := range cfg.Columns {
			r.Add(c.Name, typeName(c.OID), c.Key)
		}
		return r
	case strings.Contains(q, "FROM pg_publication WHERE pubname"):
		return Rows([]Col{{"puballtables", pgtype.BoolOID}, {"pubinsert", pgtype.BoolOID}, {"pubupdate", pgtype.BoolOID}, {"pubdelete", pgtype.BoolOID}, {"pubtruncate", pgtype.BoolOID}},
			[]any{false, true, false, false, false})
	case strings.Contains(q, "FROM pg_publication_tables WHERE pubname"):
		return Rows([]Col{{"schemaname", pgtype.TextOID}, {"tablename", pgtype.TextOID}}, []any{cfg.Schema, cfg.Table})
	case strings.Contains(q, "FROM pg_replication_slots s, cur WHERE s.slot_name"):
		return s.slotRow()
	case strings.HasPrefix(q, "SELECT active_pid FROM pg_replication_slots"):
		r := Rows([]Col{{"active_pid", pgtype.Int4OID}})
		if m := reSlotName.FindStringSubmatch(q); m != nil && m[1] == cfg.Slot && s.Slot().Exists {
			var pid any
			if p := s.Slot().ActivePID; p != 0 {
				pid = int64(p)
			}
			r.Add(pid)
		}
		return r
	case strings.Contains(q, "pg_create_logical_replication_slot("):
		s.mu.Lock()
		s.slot = Slot{Exists: true, Confirmed: s.walEnd}
		s.changeLocked()
		s.mu.Unlock()
		return Rows([]Col{{"slot", pgtype.TextOID}}, []any{cfg.Slot})
	}
	return nil
}

// typeName is pg_type.typname of the type oid of a Column.
func typeName(oid uint32) string {
	switch oid {
	case pgtype.TextOID:
		return "text"
	case pgtype.UUIDOID:
		return "uuid"
	case pgtype.JSONBOID:
		return "jsonb"
	case pgtype.JSONOID:
		return "json"
	case pgtype.TimestamptzOID:
		return "timestamptz"
	case pgtype.ByteaOID:
		return "bytea"
	case pgtype.Int8OID:
		return "int8"
	}
	return fmt.Sprintf("oid%d", oid)
}

// slotRow is replication.QuerySlot's row of the slot.
func (s *Server) slotRow() *Result {
	r := Rows([]Col{{"slot_type", pgtype.TextOID}, {"plugin", pgtype.TextOID}, {"database", pgtype.TextOID}, {"active", pgtype.BoolOID},
		{"active_pid", pgtype.Int4OID}, {"confirmed_flush_lsn", pgtype.TextOID}, {"restart_lsn", pgtype.TextOID},
		{"lag", pgtype.Int8OID}, {"retained", pgtype.Int8OID}, {"wal_status", pgtype.TextOID}, {"safe_wal_size", pgtype.Int8OID},
		{"unlimited", pgtype.BoolOID}, {"failover", pgtype.BoolOID}, {"synced", pgtype.BoolOID},
		{"invalidation_reason", pgtype.TextOID}})
	s.mu.Lock()
	sl, end := s.slot, s.walEnd
	s.mu.Unlock()
	if !sl.Exists {
		return r
	}
	var pid any
	if sl.ActivePID != 0 {
		pid = int32(sl.ActivePID)
	}
	status := "reserved"
	if sl.Lost {
		status = "lost"
	}
	r.Add("logical", "pgoutput", s.cfg.Database, sl.ActivePID != 0, pid, sl.Confirmed, sl.Confirmed,
		int64(end-sl.Confirmed), int64(end-sl.Confirmed), status, nil, true, nil, nil, nil)
	return r
}

var reStartSlot = regexp.MustCompile(`^START_REPLICATION SLOT "?([^" ]+)"? LOGICAL`)

// startReplication answers START_REPLICATION: CopyBoth, then the WAL after
// the slot's confirmed position, keepalives when asked, status updates
// recorded, until the client's CopyDone (the connection goes back to
// queries) or the connection ends (false).
func (s *Server) startReplication(c *conn, q string) bool {
	m := reStartSlot.FindStringSubmatch(q)
	s.mu.Lock()
	var refuse *pgproto3.ErrorResponse
	switch {
	case m == nil || m[1] != s.cfg.Slot || !s.slot.Exists:
		refuse = &pgproto3.ErrorResponse{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("replication slot %q does not exist", s.cfg.Slot)}
	case s.slot.ActivePID != 0:
		refuse = &pgproto3.ErrorResponse{Severity: "ERROR", Code: "55006", Message: fmt.Sprintf("replication slot %q is active for PID %d", s.cfg.Slot, s.slot.ActivePID)}
	default:
		s.slot.ActivePID = c.pid
		c.streaming = true
		s.starts++
		s.changeLocked()
	}
	from := s.slot.Confirmed
	s.mu.Unlock()
	if refuse != nil {
		c.be.Send(refuse)
		c.be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		return c.be.Flush() == nil
	}
	defer func() {
		s.mu.Lock()
		c.streaming = false
		if s.slot.ActivePID == c.pid {
			s.slot.ActivePID = 0
		}
		s.changeLocked()
		s.mu.Unlock()
	}()
	c.be.Send(&pgproto3.CopyBothResponse{})
	if c.be.Flush() != nil {
		return false
	}
	done := make(chan bool, 1) // true: the client's CopyDone
	go s.readStatuses(c, done)
	sent := from
	relation := false
	for {
		s.mu.Lock()
		var pending []Txn
		for _, tx := range s.wal {
			if tx.End > sent {
				pending = append(pending, tx)
			}
		}
		kas := c.keepalives
		c.keepalives = nil
		end, ch := s.walEnd, s.changed
		s.mu.Unlock()
		for _, tx := range pending {
			// A CopyDone that came while the last batch went out ends
			// the stream before the next one, as a walsender stops
			// sending once it reads it. (Sends are buffered: the batch
			// goes out at the Flush below.)
			select {
			case copyDone := <-done:
				return s.endCopy(c, copyDone)
			default:
			}
			s.sendTxn(c, tx, end, &relation)
			sent = tx.End
		}
		for _, reply := range kas {
			c.be.Send(&pgproto3.CopyData{Data: Keepalive(end, time.Now(), reply)})
		}
		if c.be.Flush() != nil {
			<-done
			return false
		}
		select {
		case <-ch:
		case copyDone := <-done:
			return s.endCopy(c, copyDone)
		}
	}
}

// endCopy ends a stream after the client's CopyDone (copyDone) or the
// connection's end (false).
func (s *Server) endCopy(c *conn, copyDone bool) bool {
	if !copyDone {
		return false
	}
	c.be.Send(&pgproto3.CopyDone{})
	c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte("COPY 0")})
	c.be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return c.be.Flush() == nil
}

// sendTxn sends one transaction as pgoutput does: Begin, the Relation
// before the session's first row, the Inserts, Commit.
func (s *Server) sendTxn(c *conn, tx Txn, end pglogrepl.LSN, relation *bool) {
	var sent time.Time
	if s.cfg.SendLag != 0 {
		sent = tx.Time.Add(s.cfg.SendLag)
	}
	c.be.Send(&pgproto3.CopyData{Data: XLogDataSent(tx.Begin, end, sent, Begin(tx.Commit, tx.Time, tx.Xid))})
	for i, row := range tx.Rows {
		at := tx.Begin + pglogrepl.LSN(0x28*(i+1))
		if !*relation {
			*relation = true
			c.be.Send(&pgproto3.CopyData{Data: XLogDataSent(at, end, sent, Relation(relationID, s.cfg.Schema, s.cfg.Table, s.cfg.Columns))})
		}
		c.be.Send(&pgproto3.CopyData{Data: XLogDataSent(at, end, sent, Insert(relationID, row))})
	}
	c.be.Send(&pgproto3.CopyData{Data: XLogDataSent(tx.Commit, end, sent, Commit(tx.Commit, tx.End, tx.Time))})
}

// readStatuses records the client's status updates until its CopyDone
// (done <- true) or the connection ends (done <- false).
func (s *Server) readStatuses(c *conn, done chan<- bool) {
	for {
		msg, err := c.be.Receive()
		if err != nil {
			done <- false
			return
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			st, ok := parseStatus(m.Data)
			if !ok {
				continue
			}
			st.PID, st.At = c.pid, time.Now()
			s.mu.Lock()
			s.statuses = append(s.statuses, st)
			if st.Flush > s.slot.Confirmed {
				s.slot.Confirmed = st.Flush
			}
			s.changeLocked()
			s.mu.Unlock()
		case *pgproto3.CopyDone:
			done <- true
			return
		default:
			done <- false
			return
		}
	}
}
