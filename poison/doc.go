// Package poison is the quarantine of events a sink keeps refusing: the
// poison table (Store: Put, List, MarkReplayed, MarkFailed) and their
// replay (Replayer, over any sink.Sink, one row at a time in created_at
// order, each with its original key and replayed_from_poison set).
//
// A row is keyed by the event's identity, outbox id and commit LSN (one
// key may have several rows, replayed in created_at order and marked one
// by one). Store.Check (and CheckTable, for walpost check) verifies the
// table's columns and key; Put and Check return a *TableError wrapping
// ErrUnwritable for what retrying cannot cure.
//
// The decision to quarantine is the forwarder's (forwarder's isolator);
// this package only keeps what it is given. Rows are never deleted by
// walpost: a trigger refuses DELETE on the table.
//
// Invariants (DESIGN.md): INV-2, a quarantined event is kept as a row, and
// Put returns only once the row is committed, so the forwarder confirms the
// event only after that (INV-1).
package poison
