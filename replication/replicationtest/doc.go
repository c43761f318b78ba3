// Package replicationtest is a scripted fake PostgreSQL server for tests
// of walpost's replication sessions, in-process and over a real socket
// (pgproto3): trust authentication, the catalog queries package
// replication sends on a side connection, IDENTIFY_SYSTEM and
// START_REPLICATION ... LOGICAL on a replication connection, then
// CopyBoth with pgoutput XLogData built from the WAL a test appends to,
// primary keepalives on demand and a record of every standby status
// update.
//
// The server models one logical slot: its confirmed_flush_lsn moves with
// the flush positions clients confirm (never backwards, as PostgreSQL's
// does), and each START_REPLICATION streams the committed transactions
// that end after it, so a session that ends and starts again reads again
// what it did not confirm. Disconnect cuts the streaming connections.
//
// Queries the server does not know go to Config.Query first (a test's
// own tables); a query nobody answers fails the test. Clients must use
// the simple query protocol (URL sets default_query_exec_mode).
package replicationtest
