package main

// The drain and bigtxn workloads: a backlog written while nothing reads,
// then drained by every reader from its own slot (or, for the raw producer,
// from the rows themselves).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// caseResult is one workload with one payload size.
type caseResult struct {
	workload string
	payload  int // requested payload size
	backlog  backlog
	rounds   []roundResult
	dbz      *debeziumResult
	dbzNote  string // why there are no Debezium numbers
	ceilNote string // why there is no decode ceiling
	steady   []steadyResult
}

// Reader names, as the rounds record their order.
const (
	rdRecvlogical = "pg_recvlogical"
	rdCeiling     = "decode ceiling"
	rdRaw         = "raw produce"
	rdStream      = "stream alone"
	rdWalpost     = "walpost"
)

type roundResult struct {
	order   []string // readers in the order they ran
	base    baseResult
	ceiling *baseResult   // nil when the decode ceiling did not run
	raw     *rawResult    // nil when the raw baseline is off
	stream  *streamResult // nil when the stream-alone baseline is off
	wp      walpostResult
}

// runBacklogCase runs the drain or bigtxn workload with one payload size.
func (e *env) runBacklogCase(ctx context.Context, wl string, payloadSize int) (*caseResult, error) {
	f, o := e.f, e.o
	bc := e.newBacklogCase(wl, payloadSize)
	c := bc.c

	// --- objects: every slot exists before the first event is written
	// (and after its publication), so every reader decodes the same
	// backlog. Debezium has its own publication on the same table, and so
	// has the decode ceiling: one whose row filter is never true.
	defer func() {
		if !o.keep {
			f.drop(bc.objs...)
		}
	}()
	if err := bc.createObjects(ctx); err != nil {
		return nil, err
	}

	// --- backlog ------------------------------------------------------
	if err := bc.writeBacklog(ctx); err != nil {
		return nil, err
	}
	if o.raw {
		dir, err := f.caseDir(bc.tag)
		if err != nil {
			return nil, err
		}
		bc.rowsFile = filepath.Join(dir, "rows.bin")
		if !o.keep {
			defer os.Remove(bc.rowsFile)
		}
		if err := bc.dumpRows(ctx); err != nil {
			return nil, err
		}
	}

	// --- rounds: each reader drains its own slot / topic ----------------
	readers := []string{rdRecvlogical}
	if bc.withCeil {
		readers = append(readers, rdCeiling)
	}
	if o.raw {
		readers = append(readers, rdRaw)
	}
	if o.stream {
		readers = append(readers, rdStream)
	}
	readers = append(readers, rdWalpost)
	c.rounds = make([]roundResult, o.rounds)
	for i, rn := range bc.rounds {
		res := &c.rounds[i]
		// Rotate which reader goes first, so order effects cancel out.
		res.order = append(append([]string(nil), readers[i%len(readers):]...), readers[:i%len(readers)]...)
		for _, rd := range res.order {
			if err := bc.runReader(ctx, rd, i, rn, res); err != nil {
				return nil, err
			}
		}
	}

	// --- Debezium, once -------------------------------------------------
	if err := bc.runDebezium(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// roundNames are the slots and topics of one round.
type roundNames struct{ slotBase, slotCeil, slotWalpost, slotStream, topic, rawTopic string }

// backlogCase is the state of one runBacklogCase: its names, objects and backlog.
type backlogCase struct {
	e           *env
	c           *caseResult
	wl          string
	payloadSize int
	tag         string
	table, pub  string
	withDbz     bool
	withCeil    bool
	ceilPub     string
	dbzPub      string
	dbzSlot     string
	dbzTopic    string
	rounds      []roundNames
	objs        []object // created, dropped at the end unless -keep

	bl       backlog
	events   int
	n        float64 // events, for rates
	rowsFile string  // the rows for the raw producer
}

// newBacklogCase names the case's table, publications, slots and topics.
func (e *env) newBacklogCase(wl string, payloadSize int) *backlogCase {
	f, o := e.f, e.o
	tag := fmt.Sprintf("%s_%d", wl, payloadSize)
	bc := &backlogCase{
		e: e, c: &caseResult{workload: wl, payload: payloadSize}, wl: wl, payloadSize: payloadSize, tag: tag,
		table: "outbox_" + f.id + "_" + tag, pub: "pub_" + f.id + "_" + tag,
		withDbz: e.dbzLibs != "", withCeil: e.ceilSkip == "",
		ceilPub: "ceilpub_" + f.id + "_" + tag,
		dbzPub:  "dbzpub_" + f.id + "_" + tag, dbzSlot: "slot_" + f.id + "_" + tag + "_debezium", dbzTopic: "topic_" + f.id + "_" + tag + "_debezium",
	}
	bc.c.ceilNote = e.ceilSkip
	bc.rounds = make([]roundNames, o.rounds)
	for i := range bc.rounds {
		n := strconv.Itoa(i + 1)
		bc.rounds[i] = roundNames{
			slotBase:    "slot_" + f.id + "_" + tag + "_recvlogical_" + n,
			slotCeil:    "slot_" + f.id + "_" + tag + "_ceiling_" + n,
			slotWalpost: "slot_" + f.id + "_" + tag + "_walpost_" + n,
			slotStream:  "slot_" + f.id + "_" + tag + "_stream_" + n,
			topic:       "topic_" + f.id + "_" + tag + "_walpost_" + n,
			rawTopic:    "topic_" + f.id + "_" + tag + "_raw_" + n,
		}
	}
	return bc
}

// add records obj for the drop at the end when err is nil, and returns err.
func (bc *backlogCase) add(obj object, err error) error {
	if err == nil {
		bc.objs = append(bc.objs, obj)
	}
	return err
}

// createObjects creates the table, the publications, and every slot and topic of every round.
func (bc *backlogCase) createObjects(ctx context.Context) error {
	f, o, add := bc.e.f, bc.e.o, bc.add
	if err := add(f.createTable(ctx, bc.table)); err != nil {
		return err
	}
	if err := add(f.createPublication(ctx, bc.pub, bc.table)); err != nil {
		return err
	}
	if bc.withCeil {
		if err := add(f.createFilteredPublication(ctx, bc.ceilPub, bc.table, emptyRowFilter)); err != nil {
			return err
		}
	}
	if bc.withDbz {
		if err := add(f.createPublication(ctx, bc.dbzPub, bc.table)); err != nil {
			return err
		}
		if err := add(f.createSlot(ctx, bc.dbzSlot)); err != nil {
			return err
		}
		if err := add(f.createTopic(ctx, bc.dbzTopic, nil)); err != nil {
			return err
		}
	}
	for _, rn := range bc.rounds {
		if err := add(f.createSlot(ctx, rn.slotBase)); err != nil {
			return err
		}
		if bc.withCeil {
			if err := add(f.createSlot(ctx, rn.slotCeil)); err != nil {
				return err
			}
		}
		if err := add(f.createSlot(ctx, rn.slotWalpost)); err != nil {
			return err
		}
		if o.stream {
			if err := add(f.createSlot(ctx, rn.slotStream)); err != nil {
				return err
			}
		}
		if err := add(f.createTopic(ctx, rn.topic, nil)); err != nil {
			return err
		}
		if o.raw {
			if err := add(f.createTopic(ctx, rn.rawTopic, nil)); err != nil {
				return err
			}
		}
	}
	logf("%s %d B: table %s, publication %s, %d rounds of slots and topics (%d partitions)%s%s",
		bc.wl, bc.payloadSize, bc.table, bc.pub, o.rounds, o.partitions, map[bool]string{true: ", decode ceiling publication " + bc.ceilPub, false: ""}[bc.withCeil],
		map[bool]string{true: ", Debezium slot " + bc.dbzSlot, false: ""}[bc.withDbz])
	return nil
}

// writeBacklog writes the backlog: many small transactions for drain, one for bigtxn.
func (bc *backlogCase) writeBacklog(ctx context.Context) error {
	f, o := bc.e.f, bc.e.o
	events, writers, txnSize := o.events, o.writers, o.txnSize
	if bc.wl == wlBigTxn {
		events, writers, txnSize = o.bigTxnEvents, 1, o.bigTxnEvents
	}
	bl, err := f.writeBacklog(ctx, bc.table, f.id+"-"+bc.tag, events, writers, txnSize, bc.payloadSize)
	if err != nil {
		return fmt.Errorf("write backlog: %w", err)
	}
	bc.c.backlog = bl
	bc.bl, bc.events, bc.n = bl, events, float64(events)
	logf("%s %d B: backlog written in %s (%.0f events/s); WAL %s → %s (%.1f MiB), avg payload %.0f bytes",
		bc.wl, bc.payloadSize, bl.writeDur.Round(time.Millisecond), bc.n/bl.writeDur.Seconds(), bl.startLSN, bl.endLSN, float64(bl.walBytes)/(1<<20), bl.avgPayload)
	return nil
}

// dumpRows reads the backlog's rows once into rowsFile for the raw producer.
func (bc *backlogCase) dumpRows(ctx context.Context) error {
	t0 := time.Now()
	got, err := bc.e.f.dumpRows(ctx, bc.table, bc.rowsFile)
	if err != nil {
		return fmt.Errorf("dump rows for the raw producer: %w", err)
	}
	if got != bc.events {
		return fmt.Errorf("dump rows: %d rows, want %d", got, bc.events)
	}
	logf("%s %d B: rows for the raw producer read once in %s", bc.wl, bc.payloadSize, time.Since(t0).Round(time.Millisecond))
	return nil
}

// runReader drains round i's slot or topic with reader rd into res.
func (bc *backlogCase) runReader(ctx context.Context, rd string, i int, rn roundNames, res *roundResult) error {
	e, f, o := bc.e, bc.e.f, bc.e.o
	wl, payloadSize, bl, events, n := bc.wl, bc.payloadSize, bc.bl, bc.events, bc.n
	var err error
	switch rd {
	case rdRecvlogical:
		logf("%s %d B round %d: pg_recvlogical --endpos=%s on %s", wl, payloadSize, i+1, bl.endLSN, rn.slotBase)
		if res.base, err = f.runRecvlogical(ctx, e.recvlogical, rn.slotBase, bc.pub, bl.endLSN); err != nil {
			return fmt.Errorf("round %d: pg_recvlogical: %w", i+1, err)
		}
		logf("%s %d B round %d: pg_recvlogical drained in %s (%.0f events/s)", wl, payloadSize, i+1, res.base.wall.Round(time.Millisecond), n/res.base.wall.Seconds())
	case rdCeiling:
		logf("%s %d B round %d: pg_recvlogical --endpos=%s on %s, publication %s (row filter %s: decodes, emits nothing)", wl, payloadSize, i+1, bl.endLSN, rn.slotCeil, bc.ceilPub, emptyRowFilter)
		r, err := f.runRecvlogical(ctx, e.recvlogical, rn.slotCeil, bc.ceilPub, bl.endLSN)
		if err != nil {
			return fmt.Errorf("round %d: decode ceiling: %w", i+1, err)
		}
		res.ceiling = &r
		logf("%s %d B round %d: decode ceiling reached the end LSN in %s (%.0f events/s)", wl, payloadSize, i+1, r.wall.Round(time.Millisecond), n/r.wall.Seconds())
	case rdRaw:
		logf("%s %d B round %d: raw produce of %d events to %s", wl, payloadSize, i+1, events, rn.rawTopic)
		r, err := e.runRawProduce(ctx, bc.rowsFile, rn.rawTopic, bl.endLSN, int64(events))
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		res.raw = &r
		logf("%s %d B round %d: raw produce acknowledged in %s (%.0f events/s; rows loaded in %s)", wl, payloadSize, i+1, r.wall.Round(time.Millisecond), n/r.wall.Seconds(), r.loadDuration.Round(time.Millisecond))
	case rdStream:
		logf("%s %d B round %d: walpost's stream alone on %s until %s", wl, payloadSize, i+1, rn.slotStream, bl.endLSN)
		r, err := e.runStreamAlone(ctx, bc.table, bc.pub, rn.slotStream, bl.endLSN, int64(events))
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		res.stream = &r
		logf("%s %d B round %d: stream alone done in %s (%.0f events/s)", wl, payloadSize, i+1, r.wall.Round(time.Millisecond), n/r.wall.Seconds())
	case rdWalpost:
		logf("%s %d B round %d: walpost run until %s confirms %s", wl, payloadSize, i+1, rn.slotWalpost, bl.endLSN)
		perf := o.perfOut
		if perf != "" {
			perf = fmt.Sprintf("%s.%s.%d", perf, bc.tag, i+1)
		}
		if res.wp, err = f.runWalpost(ctx, e.walpostBin, bc.table, bc.pub, rn.slotWalpost, rn.topic, bl.endLSN, int64(events), perf); err != nil {
			return fmt.Errorf("round %d: walpost: %w", i+1, err)
		}
		logf("%s %d B round %d: walpost drained and confirmed in %s (%.0f events/s)", wl, payloadSize, i+1, res.wp.wall.Round(time.Millisecond), n/res.wp.wall.Seconds())
	}
	return nil
}

// runDebezium drains the backlog once with Debezium, when it is installed; a failure is noted, not returned.
func (bc *backlogCase) runDebezium(ctx context.Context) error {
	e, f, c := bc.e, bc.e.f, bc.c
	wl, payloadSize := bc.wl, bc.payloadSize
	switch {
	case !bc.withDbz:
		c.dbzNote = e.dbzSkip
	default:
		dir, err := f.caseDir(bc.tag + "-debezium")
		if err != nil {
			return err
		}
		logf("%s %d B: Debezium on %s (publication %s) → %s", wl, payloadSize, bc.dbzSlot, bc.dbzPub, bc.dbzTopic)
		r, err := f.runDebezium(ctx, debeziumSpec{
			libs: e.dbzLibs, table: bc.table, slot: bc.dbzSlot, publication: bc.dbzPub, topic: bc.dbzTopic,
			want: int64(bc.events), workDir: dir,
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			// A failed baseline is reported, not fatal: the rest of a long
			// run stays usable.
			c.dbzNote = "failed: " + firstLine(err.Error())
			logf("WARNING: %s %d B: Debezium failed: %v", wl, payloadSize, err)
		} else {
			c.dbz = &r
			logf("%s %d B: Debezium done in %s (first→last %s, JVM start→first %s)", wl, payloadSize,
				r.wall.Round(time.Millisecond), r.firstToLast.Round(time.Millisecond), r.startup.Round(time.Millisecond))
		}
	}
	return nil
}
