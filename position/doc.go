// Package position is walpost's own record of progress in the user's
// database: one row per slot in walpost_position (migration 00003) with the
// cluster's system identifier, the timeline, the confirmed LSN and the
// commit time of the last confirmed transaction.
//
// The slot stays the server's truth; the row is what walpost knows, and it
// outlives the slot. Check compares the two when a session starts
// (DESIGN.md, "Position"):
//   - no row: a first install (or an upgrade from a walpost without the
//     table); the slot is created as before and the row written at once;
//   - a row and no slot, or an invalidated slot: ErrGap; walpost never
//     re-creates a slot over a gap;
//   - a row of another system identifier: ErrOtherSystem; LSNs of two
//     clusters are unrelated, so nothing is confirmed or created;
//   - a row ahead of the slot on the same cluster and timeline (PostgreSQL
//     ≤ 16 lost a confirmed position in a crash or restart): transactions
//     that end at or before the row's LSN are skipped, not produced
//     (INV-7);
//   - another timeline: AcrossSwitch reads the server's timeline history;
//     when the row's timeline is an ancestor, transactions ending at or
//     before the earlier of the row's LSN and the switch point are skipped
//     (the WAL below the switch point is shared), nothing past it (LSNs
//     there carry other data); otherwise nothing is skipped.
//
// Rows are written with synchronous_commit = on and never moved backwards
// on the same timeline, nor overwritten from another cluster.
package position
