// Package poison is the quarantine of events a sink keeps refusing: the
// poison table (Store: Put, List, MarkReplayed, MarkFailed) and their
// replay (Replayer, over any sink.Sink, one row at a time in created_at
// order, each with its original key and replayed_from_poison set).
//
// The decision to quarantine is the forwarder's (forwarder.Isolator);
// this package only keeps what it is given. Rows are never deleted by
// walpost: a trigger refuses DELETE on the table.
//
// Invariants (DESIGN.md): INV-2, a quarantined event is kept as a row, and
// Put returns only once the row is committed, so the forwarder confirms the
// event only after that (INV-1).
package poison
