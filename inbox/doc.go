// Package inbox applies the effect of each event walpost delivers once per
// consumer group, in the consumer's own PostgreSQL transaction: the other
// half of the outbox.
//
// walpost delivers at least once. A consumer killed between its database
// commit and its offset commit reads the batch again; a walpost restart
// re-sends the transactions it had not confirmed; `walpost poison replay`
// and `walpost recover` re-send on purpose. The inbox records, in the
// transaction that runs the effect, that the event was applied, and skips
// it when it comes again.
//
// # The guarantee
//
// For one Config.Group, the effect of every event delivered to it commits
// exactly once, provided that the effect only writes through the
// transaction the inbox is given, and the record of it is kept as long as
// the event can come again (Retention). Records of one partition are
// applied in offset order, which is walpost's commit order, and within a
// transaction its insert order.
//
// # The state
//
// Per group and (topic, partition) one watermark row (inbox_watermark):
// the commit LSN of the last transaction applied from walpost's first
// sends, the idempotency keys applied at exactly that LSN (at most one
// transaction's records in that partition), and the Kafka offset after the
// last record handled. Per record the watermark cannot decide, one key row
// (inbox_key). After any run the state is one row per partition plus one
// per replayed, recovered or headerless record: a re-sent suffix, the
// common duplicate, costs no row.
//
// # The rules
//
// A record is a first send when it has a commit_lsn header and none of
// replayed_from_poison, walpost_recovered and walpost_resent. With W the
// watermark's LSN and K its keys:
//
//  1. a first send with an LSN below W was applied: skip it;
//  2. a first send at W is applied unless its key is in K; K gains it;
//  3. a first send above W is applied; W becomes its LSN, K its key;
//  4. any other record (replayed, recovered, resent, no commit_lsn) whose LSN is W
//     and key in K was applied; else the key table decides: the key row is
//     inserted and the effect runs, or the row exists and it is skipped.
//
// The key is the idempotency_key header, else the id header (Debezium
// layout: the outbox row's id), else the record key.
//
// # Why the watermark is enough for first sends
//
// Invariant 1: a first send below the watermark was applied. It rests on
// what walpost does, per partition:
//
//   - records arrive in commit order, a transaction's in insert order
//     (walpost's Invariant 3); commit LSNs are unique per transaction on
//     one timeline, so they are non-decreasing along a partition's first
//     sends;
//   - a restart re-sends whole transactions from the first one the slot
//     had not confirmed, and the slot never confirms past a transaction not
//     wholly in Kafka or quarantined (walpost's Invariant 1); so a re-send
//     of transaction T comes after every earlier transaction was sent
//     whole, and a transaction only partly sent (L1 L2 L3-part) is sent
//     again whole (L3 L4 …), its applied records then in K;
//   - a quarantined record leaves the stream and comes back only as a
//     replay, marked replayed_from_poison, decided by rule 4.
//
// The consumer applies a partition in offset order; W and K describe
// everything it applied from first sends, so any rewind (a lost Kafka
// commit, a rebalance, a group reset to the earliest offset) is safe
// without key rows.
//
// # Failover
//
// After a PostgreSQL failover the new timeline's LSNs continue from the
// switch point, and the old timeline's transactions past that point are
// gone; their LSNs are reused by different transactions. Rule 1 would skip
// a new-timeline transaction whose LSN is below a published old-timeline
// one. walpost prevents that publication: with the standby's slot in
// synchronized_standby_slots (DESIGN.md §9), logical decoding does not
// hand walpost a transaction before the standby has flushed it, so every
// published LSN is at or below the switch point and every new-timeline LSN
// is above all of them. The promoted standby's slot copy may be behind,
// so walpost re-sends old-timeline transactions, which exist on the new
// timeline at the same LSNs: rules 1 and 2 skip them. Without
// synchronized_standby_slots (walpost check warns) the guarantee does not
// hold across a failover: a transaction published and then lost (a
// phantom event) lifts the watermark above new transactions, whose
// effects are skipped.
//
// # What breaks it
//
//   - Effects outside the transaction (an HTTP call, a second database, a
//     Kafka produce): they run once per delivery attempt, and a rolled back
//     attempt is not undone.
//   - A retention (KeepFor) shorter than the longest re-delivery of a
//     keyed record.
//   - walpost recover's margin: rows delivered before the slot was lost
//     are re-sent with a new LSN and walpost_recovered. Rule 4 recognises
//     them only by a key row of their first application: set
//     Config.KeyEveryEvent where recover may run (a row per event).
//   - A failover without synchronized_standby_slots (above), and a
//     point-in-time restore or any other rewind of the outbox database's
//     WAL: LSNs go back, and new transactions below the watermark are
//     skipped. After such a rewind reset the group's watermarks by hand
//     (commit_lsn '0/0', keys '{}'); that is safe only with KeyEveryEvent,
//     whose key rows then recognise what was applied before.
//   - A record walpost appended ahead of an earlier record of its
//     partition that Kafka had refused and that was then re-sent without
//     being quarantined (walpost logs "record appended ahead of an earlier
//     refused record" and counts it): the late record's LSN is below the
//     watermark and is skipped.
//   - Changing the topic's partition count: a key moves to another
//     partition, whose watermark has not seen it (keyed records are safe:
//     the key table is per topic).
//
// # Retention
//
// Watermark rows are never pruned: there is one per partition. Key rows
// are pruned by Prune after Config.KeepFor. The rule: KeepFor must exceed
// the longest time between a keyed record's first application and its
// last delivery, which is the longest of the topic's retention.ms (a group
// reset reads the topic again), and the time within which the same poison
// rows may be replayed again or a recover may re-send the same rows. With
// KeyEveryEvent the same rule covers first sends, which recover may re-send.
//
// # Transactions
//
// Apply, ApplySQL, ApplyBatch and ApplyBatchSQL never begin, commit or roll
// back: they lock the partitions' watermark rows (SELECT … FOR UPDATE, in
// topic and partition order), so concurrent members of one group (a
// rebalance's old and new owner) are serialised per partition; they run the
// effect on the new records; they write the watermarks back. The caller
// commits all of it, or rolls it back after any error.
//
// # Consumer
//
// Consumer is a franz-go group member: read_committed, rebalances blocked
// while a batch is applied, one database transaction per polled batch. The
// watermark rows hold each partition's next offset, written in the batch's
// transaction, and an assigned partition resumes from there: a batch the
// database committed is not read again after a crash. The group's offsets
// in Kafka follow in the background (kgo.AutoCommitMarks: the records of
// committed batches, every 5 s and before partitions are revoked or the
// consumer leaves), for lag monitoring; no batch waits for a Kafka commit,
// and one that is late or lost costs nothing.
//
// Invariant 2: a Consumer decides on the watermarks it last committed
// only while the rows still hold them. It keeps them after each batch, and
// a batch of partitions it has seen writes first (after the idle bound
// below) with an UPDATE of the new
// watermarks where each row still holds the kept one (commit LSN, number
// of keys and next offset; every change of a watermark moves one of them).
// That UPDATE takes the rows' locks; if another member (a rebalance's new
// owner) wrote a row meanwhile, fewer rows match, the transaction is
// rolled back before any effect, and the batch goes the locked way.
//
// A batch's transaction sets idle_in_transaction_session_timeout
// (ConsumerConfig.IdleTimeout, 1 minute by default) for itself: a member
// cut off between its statements and its COMMIT (its machine gone, a
// half-open connection the server does not notice for hours) holds its
// partitions' watermark rows until the server ends that transaction and
// its connection, and the member they go to next waits for them until
// then (TestInboxConsumerCutOffBeforeCommit). A handler that waits on
// anything other than the database inside the transaction for longer has
// its batch ended every time (SQLSTATE 25P03) and needs a larger bound; a
// DB that is a single *pgx.Conn is then closed for good (a pool replaces
// the connection). Apply and its forms leave the caller's transaction alone: bound
// it the same way where a caller's process can vanish.
//
// The package imports pgx, franz-go and the standard library only.
package inbox
