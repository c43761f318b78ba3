package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/sink"
)

// Transactions of the exactly-once mode (DESIGN.md, "Exactly-once
// delivery"): a Sink built with Config.TransactionalID produces inside
// Kafka transactions that the caller begins (BeginTxn) and ends with the
// checkpoint record (CommitTxn) or without it (AbortTxn). Produce, Flush
// and Close keep the sink contract; an ack of a record inside a
// transaction means the broker holds it, not that it is committed.

// ErrFenced: another producer initialised the same transactional id (a
// second walpost on the slot, or one that took it over), so this one may
// never commit again. Terminal: walpost stops with the slot unconfirmed
// past its last commit, and never re-initialises (that would fence the
// other one in turn).
var ErrFenced = errors.New("kafka fenced this producer: another walpost initialised the same transactional id (same slot and database); this one stops and must not retry")

// TransactionalID is the transactional id of a slot of one PostgreSQL
// cluster: stable across restarts, distinct for every other slot or
// cluster.
func TransactionalID(slot string, systemID int64) string {
	return "walpost-" + slot + "-" + strconv.FormatInt(systemID, 10)
}

// TxnMark is the position a committed Kafka transaction reached, the
// value of the slot's record in the checkpoint topic: every event of the
// transactions ending at or before LSN, and the first Ordinal events of
// the transaction whose commit LSN is PartialCommitLSN (0: none), are in
// committed Kafka transactions (or the poison table).
//
// The anchor ties the checkpoint to the WAL it was read from: the last
// PostgreSQL transaction with events at or before LSN has the commit LSN
// AnchorCommitLSN (0: none since the position the session started from)
// and the commit time AnchorCommitTime, and the partial transaction the
// commit time PartialCommitTime. A server restored to an earlier point of
// the same timeline writes other transactions at those LSNs: the anchor
// tells them apart (DESIGN.md, INV-11). Anchored is false for a
// checkpoint written without an anchor (before walpost wrote them).
type TxnMark struct {
	Slot              string
	SystemID          int64
	Timeline          int32
	LSN               pglogrepl.LSN
	PartialCommitLSN  pglogrepl.LSN
	PartialCommitTime time.Time
	Ordinal           int
	Anchored          bool
	AnchorCommitLSN   pglogrepl.LSN
	AnchorCommitTime  time.Time
}

type checkpointJSON struct {
	Slot              string  `json:"slot"`
	SystemID          string  `json:"system_identifier"`
	Timeline          int32   `json:"timeline"`
	LSN               string  `json:"lsn"`
	PartialCommitLSN  string  `json:"partial_commit_lsn,omitempty"`
	PartialCommitTime string  `json:"partial_commit_time,omitempty"`
	Ordinal           int     `json:"ordinal,omitempty"`
	AnchorCommitLSN   *string `json:"anchor_commit_lsn,omitempty"`
	AnchorCommitTime  string  `json:"anchor_commit_time,omitempty"`
}

// MarshalJSON writes LSNs as PostgreSQL writes them (0/16B3748), the
// system identifier as a string (it exceeds 2^53) and commit times in
// RFC 3339 with microseconds, UTC. Every checkpoint written carries
// anchor_commit_lsn (0/0: no transaction with events).
func (c TxnMark) MarshalJSON() ([]byte, error) {
	anchor := c.AnchorCommitLSN.String()
	j := checkpointJSON{Slot: c.Slot, SystemID: strconv.FormatInt(c.SystemID, 10), Timeline: c.Timeline, LSN: c.LSN.String(), Ordinal: c.Ordinal,
		AnchorCommitLSN: &anchor}
	if c.PartialCommitLSN != 0 {
		j.PartialCommitLSN = c.PartialCommitLSN.String()
		j.PartialCommitTime = commitTime(c.PartialCommitTime)
	}
	if c.AnchorCommitLSN != 0 {
		j.AnchorCommitTime = commitTime(c.AnchorCommitTime)
	}
	return json.Marshal(j)
}

// Equal says whether c and o are the same checkpoint record (commit times
// compared as instants).
func (c TxnMark) Equal(o TxnMark) bool {
	return c.Slot == o.Slot && c.SystemID == o.SystemID && c.Timeline == o.Timeline && c.LSN == o.LSN &&
		c.PartialCommitLSN == o.PartialCommitLSN && c.PartialCommitTime.Equal(o.PartialCommitTime) && c.Ordinal == o.Ordinal &&
		c.Anchored == o.Anchored && c.AnchorCommitLSN == o.AnchorCommitLSN && c.AnchorCommitTime.Equal(o.AnchorCommitTime)
}

// commitTime writes a commit time as the checkpoint stores it ("" for
// none): PostgreSQL's commit timestamps have microseconds.
func commitTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

func parseCommitTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%s %q: %w", field, s, err)
	}
	return t, nil
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *TxnMark) UnmarshalJSON(b []byte) error {
	var j checkpointJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	id, err := strconv.ParseInt(j.SystemID, 10, 64)
	if err != nil {
		return fmt.Errorf("system_identifier %q: %w", j.SystemID, err)
	}
	lsn, err := pglogrepl.ParseLSN(j.LSN)
	if err != nil {
		return fmt.Errorf("lsn %q: %w", j.LSN, err)
	}
	var partial pglogrepl.LSN
	if j.PartialCommitLSN != "" {
		if partial, err = pglogrepl.ParseLSN(j.PartialCommitLSN); err != nil {
			return fmt.Errorf("partial_commit_lsn %q: %w", j.PartialCommitLSN, err)
		}
	}
	ptime, err := parseCommitTime("partial_commit_time", j.PartialCommitTime)
	if err != nil {
		return err
	}
	*c = TxnMark{Slot: j.Slot, SystemID: id, Timeline: j.Timeline, LSN: lsn, PartialCommitLSN: partial, PartialCommitTime: ptime, Ordinal: j.Ordinal}
	if j.AnchorCommitLSN != nil {
		c.Anchored = true
		if c.AnchorCommitLSN, err = pglogrepl.ParseLSN(*j.AnchorCommitLSN); err != nil {
			return fmt.Errorf("anchor_commit_lsn %q: %w", *j.AnchorCommitLSN, err)
		}
		if c.AnchorCommitTime, err = parseCommitTime("anchor_commit_time", j.AnchorCommitTime); err != nil {
			return err
		}
	}
	return nil
}

// txnErr names what failed and marks fencing with ErrFenced.
func txnErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if Fenced(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrFenced, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// aclFix names the ACL that fixes err when it is an authorization the
// exactly-once mode needs, refused: on the checkpoint topic topic (read:
// READ and DESCRIBE, else WRITE and DESCRIBE), on the transactional id
// txnID, or on the cluster; "" when err is none of these.
func aclFix(err error, topic string, read bool, txnID string) string {
	const acls = "kafka-acls.sh --add --allow-principal User:<principal>"
	txnACL := fmt.Sprintf("WRITE and DESCRIBE on TransactionalId %s (%s --operation Write --operation Describe --transactional-id %s)", txnID, acls, txnID)
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return ""
	}
	switch ke {
	case kerr.TopicAuthorizationFailed:
		verb, op, flag := "write", "WRITE", "--operation Write"
		if read {
			verb, op, flag = "read", "READ", "--operation Read"
		}
		return fmt.Sprintf("walpost's principal may not %s the checkpoint topic %q (kafka.checkpoint_topic): grant it %s and DESCRIBE on topic %s (%s %s --operation Describe --topic %s)",
			verb, topic, op, topic, acls, flag, topic)
	case kerr.TransactionalIDAuthorizationFailed:
		return fmt.Sprintf("walpost's principal may not use the transactional id %q: grant it %s", txnID, txnACL)
	case kerr.ClusterAuthorizationFailed:
		return fmt.Sprintf("walpost's principal may not initialise a transactional producer: grant it %s and, before Kafka 3.0, IDEMPOTENT_WRITE on the cluster (%s --operation IdempotentWrite --cluster)", txnACL, acls)
	}
	return ""
}

// refused makes err a destination failure (sink.Destination: walpost waits
// until it is fixed and never skips past it) whose message ends with fix.
func refused(err error, fix string) error {
	_, class := Classify(err)
	return &sink.Error{Kind: sink.Destination, Class: class, Err: fmt.Errorf("%w: fix: %s", err, fix)}
}

// Fenced says whether err means another producer took this one's
// transactional id: PRODUCER_FENCED, which the coordinator answers
// (InitProducerID, AddPartitionsToTxn, EndTxn). INVALID_PRODUCER_EPOCH is
// not fencing: a broker answers it to a produce of an older epoch, also
// after the coordinator aborted a transaction open past its timeout and
// bumped the epoch. It is transient (Classify): the abort that follows
// says PRODUCER_FENCED when another producer did take the id (franz-go
// re-initialises the producer ID, or sends EndTxn, with the old epoch),
// otherwise the next session resumes from the checkpoint with a new
// producer.
func Fenced(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, kerr.ProducerFenced)
}

func (k *Sink) transactional() error {
	if k.cfg.TransactionalID == "" {
		return errors.New("sink: not transactional (no Config.TransactionalID)")
	}
	return nil
}

// InitProducer initialises the producer ID (InitProducerID) now, not at the
// first record: the coordinator bumps the id's epoch, which fences every
// earlier producer of the transactional id, and completes or aborts its
// open transaction before it answers. INV-10: the checkpoint is read only
// after this returned.
func (k *Sink) InitProducer(ctx context.Context) error {
	if err := k.transactional(); err != nil {
		return err
	}
	_, _, err := k.client.Load().ProducerID(ctx)
	if fix := aclFix(err, k.cfg.CheckpointTopic, false, k.cfg.TransactionalID); fix != "" {
		err = refused(err, fix)
	}
	return txnErr("initialise the transactional producer "+k.cfg.TransactionalID, err)
}

// BeginTxn begins a Kafka transaction.
func (k *Sink) BeginTxn() error {
	if err := k.transactional(); err != nil {
		return err
	}
	k.staged = nil
	return txnErr("begin a kafka transaction", k.client.Load().BeginTransaction())
}

// stagedCheckpoint is a checkpoint record produced into the open
// transaction, and the channel its outcome comes on.
type stagedCheckpoint struct {
	cp   TxnMark
	rec  *kgo.Record
	done chan error
}

// StageCheckpoint produces cp's record into the open transaction before
// the caller flushes it, so the records and the checkpoint travel in the
// one flush, and CommitTxn(ctx, cp) that follows waits for its outcome
// instead of producing it after the flush (one produce round trip less
// per commit). ctx bounds the record's delivery: pass the one CommitTxn
// gets; like any Produce it waits while the client's buffer is full
// (the records ahead of it drain meanwhile). An error means nothing was
// produced. CommitTxn must name the same position (an error otherwise).
// INV-9 is the transaction's: a checkpoint staged in a transaction that
// aborts is aborted with it.
func (k *Sink) StageCheckpoint(ctx context.Context, cp TxnMark) error {
	if err := k.transactional(); err != nil {
		return err
	}
	st, err := k.produceCheckpoint(ctx, cp)
	if err != nil {
		return err
	}
	k.staged = st
	return nil
}

// StagedRefusal is the staged checkpoint record's failure when Kafka
// refused it for walpost's rights (an ACL on the checkpoint topic or the
// transactional id), nil otherwise (none staged, no outcome yet,
// acknowledged, another failure). A flush that failed the transaction's
// records may have failed them for the checkpoint's sake, or the
// checkpoint for theirs: before transaction.version 2, a partition the
// broker refuses to add to the transaction fails every record buffered
// with it (franz-go), so the caller names this fix beside the records'.
// It does not consume the outcome CommitTxn waits for.
func (k *Sink) StagedRefusal() error {
	st := k.staged
	if st == nil {
		return nil
	}
	select {
	case err := <-st.done:
		st.done <- err
		if err == nil {
			return nil
		}
		if fix := aclFix(err, k.cfg.CheckpointTopic, false, k.cfg.TransactionalID); fix != "" {
			return txnErr("produce the checkpoint to "+k.cfg.CheckpointTopic, refused(err, fix))
		}
	default:
	}
	return nil
}

// produceCheckpoint produces cp's record into the open transaction.
func (k *Sink) produceCheckpoint(ctx context.Context, cp TxnMark) (*stagedCheckpoint, error) {
	if k.cfg.CheckpointTopic == "" {
		return nil, errors.New("sink: no checkpoint topic (Config.CheckpointTopic)")
	}
	value, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("encode the checkpoint: %w", err)
	}
	st := &stagedCheckpoint{cp: cp, done: make(chan error, 1),
		rec: &kgo.Record{Topic: k.cfg.CheckpointTopic, Key: []byte(TransactionalID(cp.Slot, cp.SystemID)), Value: value}}
	k.client.Load().Produce(ctx, st.rec, func(_ *kgo.Record, err error) { st.done <- err })
	return st, nil
}

// CommitTxn ends the open transaction with cp's record in the checkpoint
// topic: every record produced since BeginTxn must have its outcome (the
// caller flushed and saw no failure). INV-9: the records and the
// checkpoint covering them commit together or not at all. An error means
// the outcome is unknown: call AbortTxn (unless Fenced), then read the
// checkpoint again with a new producer.
func (k *Sink) CommitTxn(ctx context.Context, cp TxnMark) error {
	if err := k.transactional(); err != nil {
		return err
	}
	st := k.staged
	k.staged = nil
	if st != nil && !st.cp.Equal(cp) {
		return fmt.Errorf("commit the kafka transaction: the checkpoint staged in it names %s (partial %s, ordinal %d), the commit %s (partial %s, ordinal %d); abort it",
			st.cp.LSN, st.cp.PartialCommitLSN, st.cp.Ordinal, cp.LSN, cp.PartialCommitLSN, cp.Ordinal)
	}
	if st == nil {
		var err error
		if st, err = k.produceCheckpoint(ctx, cp); err != nil {
			return err
		}
	}
	cl := k.client.Load()
	rec := st.rec
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush the kafka transaction: %w", err)
	}
	var cpErr error
	select {
	case cpErr = <-st.done:
	default: // after the flush it is there; a late one is bound by ctx
		select {
		case cpErr = <-st.done:
		case <-ctx.Done():
			return fmt.Errorf("commit the kafka transaction: the checkpoint record has no outcome after the flush: %w", ctx.Err())
		}
	}
	if err := cpErr; err != nil {
		if fix := aclFix(err, k.cfg.CheckpointTopic, false, k.cfg.TransactionalID); fix != "" {
			return txnErr("produce the checkpoint to "+k.cfg.CheckpointTopic, refused(err, fix))
		}
		return txnErr("produce the checkpoint to "+k.cfg.CheckpointTopic, classified(err, k.cfg.CheckpointTopic))
	}
	if err := awaitPartition(ctx, cl, rec.Topic, rec.Partition); err != nil {
		return fmt.Errorf("commit the kafka transaction: the producer does not list partition %d of checkpoint topic %q, which acknowledged the checkpoint: %w", rec.Partition, rec.Topic, err)
	}
	err := cl.EndTransaction(ctx, kgo.TryCommit)
	if fix := aclFix(err, k.cfg.CheckpointTopic, false, k.cfg.TransactionalID); fix != "" {
		err = refused(err, fix)
	}
	if err == nil {
		k.awaitMarkers(ctx)
	}
	return txnErr("commit the kafka transaction", err)
}

// markerWait bounds awaitMarkers: past it the commit returns and the
// broker holds the next transaction's records until the markers are
// written, as it would without the wait.
const markerWait = time.Second

// describeTries is how many commits in a row may fail to describe their
// transaction (for a reason other than describeRefused) before the wait
// is turned off: a coordinator moving fails one or two.
const describeTries = 3

// describeRefused says whether err means the coordinator will never
// describe the transactional id to walpost: a missing ACL, or a broker
// without DescribeTransactions (before Kafka 3.0).
func describeRefused(err error) bool {
	return errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.UnsupportedVersion) || strings.Contains(err.Error(), "broker is too old")
}

// awaitMarkers waits until the coordinator has written the markers of
// the transaction EndTransaction just committed: DescribeTransactions no
// longer says PrepareCommit. Then its records are visible to
// read_committed consumers, and the next transaction's first records
// reach partitions whose markers are written. EndTxn returns once the
// commit is decided, before the markers: on Kafka 4 (transaction.version
// 2) a produce that reaches a partition before them is held by the broker
// for add.partitions.to.txn.retry.backoff.ms (20 ms by default), which
// was most of exactly-once's latency at high commit rates. The wait is
// an optimisation only: a coordinator that cannot describe the
// transactional id (a broker before Kafka 3.0, no DESCRIBE ACL on it), or
// that fails to describe it describeTries commits in a row, turns it off
// for the sink's life, logged once; no outcome of it fails the commit.
func (k *Sink) awaitMarkers(ctx context.Context) {
	if k.noDescribe.Load() {
		return
	}
	id := k.cfg.TransactionalID
	adm := kadm.NewClient(k.admin)
	// The bound covers each describe too (franz-go retries inside it); a
	// wait that reaches it is not a failure.
	ctx, cancel := context.WithTimeout(ctx, markerWait)
	defer cancel()
	for pause := 250 * time.Microsecond; ; pause = min(2*pause, 2*time.Millisecond) {
		d, err := adm.DescribeTransactions(ctx, id)
		if err == nil {
			if err = d[id].Err; err == nil && d[id].TxnID != id {
				err = errors.New("not in the coordinator's answer")
			}
		}
		if err != nil {
			if ctx.Err() == nil && (describeRefused(err) || k.describeFails.Add(1) >= describeTries) {
				k.noDescribe.Store(true)
				k.log.Info("exactly-once: commits do not wait for their transaction markers: the coordinator cannot describe the transactional id (allow DESCRIBE on it for lower latency)",
					"transactional_id", id, "err", err)
			}
			return
		}
		k.describeFails.Store(0)
		if d[id].State != "PrepareCommit" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// awaitPartition waits until cl's producer state lists partition of topic,
// which a record just acknowledged was produced to.
//
// franz-go (v1.22) sends the records that waited for a topic's first
// metadata before it publishes the topic's partitions to the producer
// state that EndTransaction reads: the metadata goroutine partitions them,
// then stores the partitions. Preempted in between, it lets the record be
// acknowledged, and the caller flush, while the partition is not listed
// yet. EndTransaction then finds no partition added to the transaction
// and, since a record was produced, turns TryCommit into an abort and
// returns nil: the commit would report success for an aborted transaction.
// It also resets the sequence numbers (the epoch is bumped at every
// EndTxn) only of the partitions listed, so the next transaction's record
// to the checkpoint partition would be refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER. The checkpoint topic is new to each
// session's producer, so its first commit meets this.
//
// PartitionLeader answers -1 for a partition not listed; once listed it
// has a leader, or a load error and a negative seed id instead. The wait
// ends at once but in that window, when the metadata goroutine runs again.
// AbortTxn needs none: AbortBufferedRecords takes the lock the metadata
// goroutine holds until it has stored the partitions.
func awaitPartition(ctx context.Context, cl *kgo.Client, topic string, partition int32) error {
	listed := func() bool {
		leader, _, _ := cl.PartitionLeader(topic, partition)
		return leader != -1
	}
	if listed() {
		return nil
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !listed() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// AbortTxn fails the records not yet sent, waits for those in flight and
// aborts the transaction; after a commit of unknown outcome franz-go does
// it by initialising the producer ID again, which completes the earlier
// attempt either way. A Fenced producer must not call it. After a failure
// that is not Fenced (INVALID_PRODUCER_EPOCH on a produce) its error is
// Fenced when another producer took the transactional id: the caller then
// stops as on any fencing, and otherwise resumes with a new producer.
func (k *Sink) AbortTxn(ctx context.Context) error {
	if err := k.transactional(); err != nil {
		return err
	}
	k.staged = nil
	cl := k.client.Load()
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		return txnErr("abort the buffered records", err)
	}
	return txnErr("abort the kafka transaction", cl.EndTransaction(ctx, kgo.TryAbort))
}

// ReadCheckpoint reads the last committed checkpoint of key (the record key
// CommitTxn writes: TransactionalID of the slot and system identifier, so
// slots of several clusters may share the topic) from topic (one
// partition). found is false when the topic holds none for key.
//
// It reads read_uncommitted, control records included, from the
// partition's leader (fenced by its leader epoch) up to the leader's high
// watermark as ListOffsets answers it, and replays the records of key: a
// non-transactional one is the checkpoint at once; a transactional one
// becomes it only when a COMMIT marker of the same producer ID follows,
// and an ABORT marker discards it. read_committed would stop at the last
// stable offset, which an open transaction of any producer pins: on the
// shared topic another walpost's (slow, stopped or dead) transaction would
// hide this slot's newer checkpoints for up to its transaction timeout,
// and the session would resume from an older one and send committed
// events again.
//
// The end comes from ListOffsets, not from a fetch's answer: a replica
// that is not the leader (the client's metadata behind a leader change)
// serves a consumer's fetch up to its own high watermark, and a leader
// just elected answers fetches with the high watermark it had as a
// follower until its followers fetch again; both may lack the newest
// checkpoint. The leader answers ListOffsets with OFFSET_NOT_AVAILABLE
// until its high watermark covers what the earlier leader acknowledged
// (KIP-207), and the read then waits.
//
// A transactional record of key with no marker before the end is left out
// (ReadCheckpoint) or waited for (ReadCheckpointFrom with await): after
// InitProducer (INV-10), which completes this transactional id's earlier
// transaction and writes its markers, none should be open, and one seen
// open means the read is of a replica or a moment before the marker.
//
// A refused READ or DESCRIBE on topic is a destination failure
// (sink.Destination) naming the ACL to add.
func ReadCheckpoint(ctx context.Context, cl *kgo.Client, topic, key string) (cp TxnMark, found bool, err error) {
	cp, found, _, err = ReadCheckpointFrom(ctx, cl, topic, key, false)
	return cp, found, err
}

// CheckpointRead says where ReadCheckpointFrom read: the node it fetched
// from (the partition's leader), its leader epoch, the high watermark it
// read up to, the offset of the record it returned (-1 when none), the
// offsets of the records of key without a marker below the high
// watermark, and how many reads it took (a leader moving, its high
// watermark not yet known, or a marker waited for).
type CheckpointRead struct {
	Leader        int32
	LeaderEpoch   int32
	HighWatermark int64
	Offset        int64
	Unmarked      []int64
	Reads         int
}

// checkpointRetry is the pause between two reads of the checkpoint
// partition when one could not be completed or saw a record of key
// without its marker.
const checkpointRetry = 100 * time.Millisecond

// ReadCheckpointFrom is ReadCheckpoint, saying where it read; with await
// it reads again until no record of key is without its marker, or ctx
// ends (an error naming the records).
func ReadCheckpointFrom(ctx context.Context, cl *kgo.Client, topic, key string, await bool) (cp TxnMark, found bool, rd CheckpointRead, err error) {
	defer func() {
		if fix := aclFix(err, topic, true, ""); fix != "" {
			err = refused(err, fix)
		}
	}()
	reads := 0
	var waited CheckpointRead // the last read that found a record without its marker
	for {
		reads++
		var again bool
		cp, found, rd, again, err = readCheckpointOnce(ctx, cl, topic, key)
		rd.Reads = reads
		if err == nil && !(await && len(rd.Unmarked) > 0) {
			return cp, found, rd, nil
		}
		if err == nil {
			waited = rd
		}
		if err != nil && !again && ctx.Err() == nil {
			return cp, false, rd, err
		}
		select {
		case <-ctx.Done():
			if len(waited.Unmarked) > 0 {
				// Said even when the deadline ended a request: what
				// the read waited for is the news.
				rd = waited
				err = fmt.Errorf("checkpoint topic %q: the checkpoint records of %s at offsets %v have no transaction marker at the leader (node %d, high watermark %d) after %d reads: %w; "+
					"this transactional id's earlier transaction was completed when the producer was initialised, so its marker is due; "+
					"if it stays missing, describe the partition's producers (kafka-transactions.sh describe-producers --topic %s --partition 0): "+
					"a transaction the coordinator completed without writing its markers hangs until it is aborted; Kafka skips them for a partition "+
					"without a leader at that moment (KAFKA-20734: the broker logs \"Couldn't find leader endpoint for partitions\" with this transactional id), "+
					"e.g. a single broker killed during a commit and started again; README, Runbook, \"Hanging Kafka transaction\"",
					topic, key, rd.Unmarked, rd.Leader, rd.HighWatermark, reads, ctx.Err(), topic)
			} else if err == nil {
				err = ctx.Err()
			}
			return cp, false, rd, err
		case <-time.After(checkpointRetry):
		}
	}
}

// retriableRead says whether a partition error of the checkpoint read
// means reading again from the leader the metadata names then: the
// leader moved, or has not yet caught up with its predecessor.
func retriableRead(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownLeaderEpoch) || errors.Is(err, kerr.OffsetNotAvailable) ||
		errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.ReplicaNotAvailable) ||
		errors.Is(err, kerr.KafkaStorageError) || errors.Is(err, kerr.RequestTimedOut) ||
		errors.Is(err, kerr.UnknownTopicID)
}

// readCheckpointOnce is one read of the checkpoint partition (see
// ReadCheckpoint); again says an error is worth another read.
func readCheckpointOnce(ctx context.Context, cl *kgo.Client, topic, key string) (cp TxnMark, found bool, rd CheckpointRead, again bool, err error) {
	rd.Offset = -1
	leader, epoch, topicID, err := checkpointPartition(ctx, cl, topic)
	if err != nil {
		return cp, false, rd, errors.Is(err, errNoLeader), err
	}
	rd.Leader, rd.LeaderEpoch = leader, epoch
	br := cl.Broker(int(leader))
	end, err := checkpointEnd(ctx, br, topic, epoch)
	if err != nil {
		return cp, false, rd, retriableRead(err), err
	}
	rd.HighWatermark = end
	replay := checkpointReplay{key: key, pending: map[int64]*kgo.Record{}, offset: -1}
	// One fetch at least, even of an empty partition: a refused READ is
	// found at the first start, not at the first start after a commit.
	offset, stuck := int64(0), 0
	for first := true; first || offset < end; first = false {
		part, err := fetchCheckpoints(ctx, br, topic, topicID, epoch, offset, offset < end)
		if err != nil {
			return cp, false, rd, false, err
		}
		perr := kerr.ErrorForCode(part.ErrorCode)
		if errors.Is(perr, kerr.OffsetOutOfRange) {
			// Deleted below (DeleteRecords): go on from the log start
			// offset. Kafka does not say it in this answer.
			start, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
			if err != nil {
				return cp, false, rd, false, fmt.Errorf("list the start offset of checkpoint topic %q: %w", topic, err)
			}
			lo, ok := start.Lookup(topic, 0)
			if !ok || lo.Err != nil || lo.Offset <= offset {
				return cp, false, rd, false, fmt.Errorf("fetch checkpoint topic %q at offset %d: %w (log start offset %d, %v)", topic, offset, kerr.OffsetOutOfRange, lo.Offset, lo.Err)
			}
			offset = lo.Offset
			continue
		}
		if perr != nil {
			return cp, false, rd, retriableRead(perr), fmt.Errorf("fetch checkpoint topic %q from node %d: %w", topic, leader, perr)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			KeepControlRecords: true, Offset: offset, IsolationLevel: kgo.ReadUncommitted(), Topic: topic, Partition: 0,
		}, part, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return cp, false, rd, false, fmt.Errorf("fetch checkpoint topic %q: %w", topic, fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset >= end {
				break // after the end: the read is of one moment
			}
			if err := replay.apply(r); err != nil {
				return cp, false, rd, false, fmt.Errorf("checkpoint topic %q: %w", topic, err)
			}
		}
		if next <= offset {
			// Nothing new: the answer's high watermark is below end
			// (a fetch served before the leader's advanced), or a batch
			// larger than the answer.
			if stuck++; stuck > 50 {
				return cp, false, rd, true, fmt.Errorf("fetch checkpoint topic %q from node %d: no progress at offset %d (high watermark %d, end %d)", topic, leader, offset, part.HighWatermark, end)
			}
			continue
		}
		stuck, offset = 0, next
	}
	for _, r := range replay.pending {
		rd.Unmarked = append(rd.Unmarked, r.Offset)
	}
	slices.Sort(rd.Unmarked)
	rd.Offset = replay.offset
	return replay.cp, replay.found, rd, false, nil
}

// errNoLeader: the checkpoint partition has no leader in the metadata
// (an election under way); the read is tried again.
var errNoLeader = errors.New("no leader")

// checkpointPartition returns the leader of topic's only partition, its
// leader epoch and the topic's ID, from a metadata request of its own
// (kgo.Client.Request sends it; kadm's ListTopics may answer from the
// client's cache, up to MetadataMinAge old).
func checkpointPartition(ctx context.Context, cl *kgo.Client, topic string) (leader, epoch int32, id [16]byte, err error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, 0, id, fmt.Errorf("list checkpoint topic %q: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return 0, 0, id, fmt.Errorf("list checkpoint topic %q: unexpected answer", topic)
	}
	td := resp.Topics[0]
	terr := kerr.ErrorForCode(td.ErrorCode)
	if errors.Is(terr, kerr.UnknownTopicOrPartition) {
		return 0, 0, id, fmt.Errorf("kafka.checkpoint_topic: %w: %q: fix: create it with one partition and cleanup.policy=compact, or set kafka.create_topic_partitions so walpost creates it", ErrTopicMissing, topic)
	}
	if terr != nil {
		return 0, 0, id, fmt.Errorf("describe checkpoint topic %q: %w", topic, terr)
	}
	if len(td.Partitions) != 1 || td.Partitions[0].Partition != 0 {
		return 0, 0, id, fmt.Errorf("kafka.checkpoint_topic %q has %d partitions: it needs exactly one", topic, len(td.Partitions))
	}
	pd := td.Partitions[0]
	if perr := kerr.ErrorForCode(pd.ErrorCode); pd.Leader < 0 || (perr != nil && !errors.Is(perr, kerr.ReplicaNotAvailable)) {
		return 0, 0, id, fmt.Errorf("checkpoint topic %q partition 0: %w (%v)", topic, errNoLeader, perr)
	}
	return pd.Leader, pd.LeaderEpoch, td.TopicID, nil
}

// checkpointEnd asks the leader br for the checkpoint partition's high
// watermark (ListOffsets, latest, read_uncommitted), fenced by epoch.
func checkpointEnd(ctx context.Context, br *kgo.Broker, topic string, epoch int32) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 0
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = 0, epoch, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, br)
	if err != nil {
		return 0, fmt.Errorf("list the end offset of checkpoint topic %q: %w", topic, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("list the end offset of checkpoint topic %q: unexpected answer", topic)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return 0, fmt.Errorf("list the end offset of checkpoint topic %q: %w", topic, err)
	}
	return p.Offset, nil
}

// checkpointFetchBytes bounds one fetch of the checkpoint partition.
const checkpointFetchBytes = 1 << 20

// CheckpointSegmentBytes is the segment.bytes walpost gives the
// checkpoint topic it creates: compaction never cleans the active
// segment, so with Kafka's default (1 GiB) every start reads what a
// walpost committed since the segment rolled (one record and one marker
// per delivery.transaction_interval, about 0.4 GB a day per walpost
// sharing the topic, up to a gigabyte); 16 MiB keeps the partition small.
const CheckpointSegmentBytes = 16 << 20

// fetchCheckpoints fetches the checkpoint partition from offset,
// read_uncommitted, from its leader br, fenced by epoch; with wait the
// leader holds the answer up to 200 ms until it has a record.
func fetchCheckpoints(ctx context.Context, br *kgo.Broker, topic string, topicID [16]byte, epoch int32, offset int64, wait bool) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 200
	req.MinBytes = 1
	if !wait {
		// Nothing below the end to wait for (the first start's fetch of an
		// empty partition): answered at once, not after MaxWait. Between
		// its InitProducerID and its START_REPLICATION the slot is free,
		// and a walpost of the slot that comes meanwhile fences this one's
		// producer; that window is kept short.
		req.MaxWaitMillis, req.MinBytes = 0, 0
	}
	// 1 MiB per answer: the start reads the whole partition, and what one
	// answer holds (and the records decoded from it) is walpost's peak
	// memory while it does; a larger batch still comes whole (KIP-74).
	req.MaxBytes = checkpointFetchBytes
	req.IsolationLevel = 0 // read_uncommitted: ReadCheckpoint applies the markers itself
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, offset, checkpointFetchBytes
	rp.CurrentLeaderEpoch, rp.LogStartOffset = epoch, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, br)
	if err != nil {
		return nil, fmt.Errorf("fetch checkpoint topic %q: %w", topic, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch checkpoint topic %q: %w", topic, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch checkpoint topic %q: unexpected answer", topic)
	}
	return &resp.Topics[0].Partitions[0], nil
}

// checkpointReplay applies the records of a checkpoint partition, in
// offset order, to the checkpoint of key (see ReadCheckpoint).
type checkpointReplay struct {
	key     string
	pending map[int64]*kgo.Record // by producer ID: its open transaction's last record of key
	cp      TxnMark
	found   bool
	offset  int64 // cp's record
}

func (p *checkpointReplay) apply(r *kgo.Record) error {
	if r.Attrs.IsControl() {
		rec, ok := p.pending[r.ProducerID]
		if !ok {
			return nil
		}
		var marker kmsg.ControlRecordKey
		if err := marker.ReadFrom(r.Key); err != nil {
			return fmt.Errorf("transaction marker at offset %d: %w", r.Offset, err)
		}
		switch marker.Type {
		case kmsg.ControlRecordKeyTypeCommit:
			delete(p.pending, r.ProducerID)
			return p.set(rec)
		case kmsg.ControlRecordKeyTypeAbort:
			delete(p.pending, r.ProducerID)
		}
		return nil
	}
	if string(r.Key) != p.key {
		return nil
	}
	if r.Attrs.IsTransactional() {
		p.pending[r.ProducerID] = r
		return nil
	}
	return p.set(r)
}

// set makes r's value the checkpoint.
func (p *checkpointReplay) set(r *kgo.Record) error {
	var c TxnMark
	if err := json.Unmarshal(r.Value, &c); err != nil {
		return fmt.Errorf("checkpoint %q at offset %d: %w", p.key, r.Offset, err)
	}
	p.cp, p.found, p.offset = c, true, r.Offset
	return nil
}

// ErrCheckpointTopic: kafka.checkpoint_topic is missing (and may not be
// created), or is not a one-partition compacted topic. Fix the topic.
var ErrCheckpointTopic = errors.New("kafka.checkpoint_topic is not usable")

// EnsureCheckpointTopic checks that topic has one partition and
// cleanup.policy=compact (exactly: not compact,delete), creating it so
// when it is missing and create is set. Anything else is an error naming
// the fix.
func EnsureCheckpointTopic(ctx context.Context, cl *kgo.Client, topic string, create bool) (created bool, err error) {
	info, err := DescribeTopic(ctx, cl, topic)
	if errors.Is(err, ErrTopicMissing) && create {
		compact, segment := "compact", strconv.Itoa(CheckpointSegmentBytes)
		configs := map[string]*string{"cleanup.policy": &compact, "segment.bytes": &segment}
		resp, cerr := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, configs, topic)
		if cerr == nil {
			cerr = resp.Err
		}
		if errors.Is(cerr, kerr.InvalidConfig) || errors.Is(cerr, kerr.PolicyViolation) {
			// A managed cluster may not let topics set segment.bytes:
			// the broker's default then, as for a topic made by hand.
			delete(configs, "segment.bytes")
			if resp, cerr = kadm.NewClient(cl).CreateTopic(ctx, 1, -1, configs, topic); cerr == nil {
				cerr = resp.Err
			}
		}
		if cerr != nil && !errors.Is(cerr, kerr.TopicAlreadyExists) {
			return false, fmt.Errorf("create checkpoint topic %q: %w", topic, cerr)
		}
		created = true
		for deadline := time.Now().Add(15 * time.Second); ; {
			if info, err = DescribeTopic(ctx, cl, topic); !errors.Is(err, ErrTopicMissing) || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return created, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if errors.Is(err, ErrTopicMissing) {
		return created, fmt.Errorf("%w: %q does not exist: fix: create it (kafka-topics.sh --create --topic %s --partitions 1 --config cleanup.policy=compact), or set kafka.create_topic_partitions so walpost creates it: %w", ErrCheckpointTopic, topic, topic, ErrTopicMissing)
	}
	if err != nil {
		return created, err
	}
	if info.Partitions != 1 {
		return created, fmt.Errorf("%w: %q has %d partitions: it needs exactly one (create another topic with --partitions 1 and cleanup.policy=compact)", ErrCheckpointTopic, topic, info.Partitions)
	}
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return created, fmt.Errorf("describe config of checkpoint topic %q: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return created, fmt.Errorf("describe config of checkpoint topic %q: %w", topic, err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	return created, checkCleanupPolicy(topic, policy)
}

// checkCleanupPolicy says what is wrong with the checkpoint topic's
// cleanup.policy policy (a comma-separated list): anything but exactly
// compact. With delete beside it, retention removes an idle slot's only
// checkpoint: the session then resumes from walpost_position alone and
// sends the committed part of a partial PostgreSQL transaction again.
func checkCleanupPolicy(topic, policy string) error {
	compact, other := false, false
	for p := range strings.SplitSeq(policy, ",") {
		switch strings.TrimSpace(p) {
		case "compact":
			compact = true
		default:
			other = true
		}
	}
	fix := fmt.Sprintf("fix: kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact", topic)
	switch {
	case compact && !other:
		return nil
	case compact:
		return fmt.Errorf("%w: %q has cleanup.policy=%s: it must be exactly compact (retention would delete an idle slot's only checkpoint): %s", ErrCheckpointTopic, topic, policy, fix)
	}
	return fmt.Errorf("%w: %q is not compacted (cleanup.policy=%s): %s", ErrCheckpointTopic, topic, policy, fix)
}
