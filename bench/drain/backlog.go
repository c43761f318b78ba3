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
	tag := fmt.Sprintf("%s_%d", wl, payloadSize)
	c := &caseResult{workload: wl, payload: payloadSize}
	table, pub := "outbox_"+f.id+"_"+tag, "pub_"+f.id+"_"+tag
	withDbz := e.dbzLibs != ""
	withCeil := e.ceilSkip == ""
	c.ceilNote = e.ceilSkip
	ceilPub := "ceilpub_" + f.id + "_" + tag
	dbzPub, dbzSlot, dbzTopic := "dbzpub_"+f.id+"_"+tag, "slot_"+f.id+"_"+tag+"_debezium", "topic_"+f.id+"_"+tag+"_debezium"
	type names struct{ slotBase, slotCeil, slotWalpost, slotStream, topic, rawTopic string }
	rounds := make([]names, o.rounds)
	for i := range rounds {
		n := strconv.Itoa(i + 1)
		rounds[i] = names{
			slotBase:    "slot_" + f.id + "_" + tag + "_recvlogical_" + n,
			slotCeil:    "slot_" + f.id + "_" + tag + "_ceiling_" + n,
			slotWalpost: "slot_" + f.id + "_" + tag + "_walpost_" + n,
			slotStream:  "slot_" + f.id + "_" + tag + "_stream_" + n,
			topic:       "topic_" + f.id + "_" + tag + "_walpost_" + n,
			rawTopic:    "topic_" + f.id + "_" + tag + "_raw_" + n,
		}
	}

	// --- objects: every slot exists before the first event is written
	// (and after its publication), so every reader decodes the same
	// backlog. Debezium has its own publication on the same table, and so
	// has the decode ceiling: one whose row filter is never true.
	var objs []object
	defer func() {
		if !o.keep {
			f.drop(objs...)
		}
	}()
	add := func(obj object, err error) error {
		if err == nil {
			objs = append(objs, obj)
		}
		return err
	}
	if err := add(f.createTable(ctx, table)); err != nil {
		return nil, err
	}
	if err := add(f.createPublication(ctx, pub, table)); err != nil {
		return nil, err
	}
	if withCeil {
		if err := add(f.createFilteredPublication(ctx, ceilPub, table, emptyRowFilter)); err != nil {
			return nil, err
		}
	}
	if withDbz {
		if err := add(f.createPublication(ctx, dbzPub, table)); err != nil {
			return nil, err
		}
		if err := add(f.createSlot(ctx, dbzSlot)); err != nil {
			return nil, err
		}
		if err := add(f.createTopic(ctx, dbzTopic, nil)); err != nil {
			return nil, err
		}
	}
	for _, rn := range rounds {
		if err := add(f.createSlot(ctx, rn.slotBase)); err != nil {
			return nil, err
		}
		if withCeil {
			if err := add(f.createSlot(ctx, rn.slotCeil)); err != nil {
				return nil, err
			}
		}
		if err := add(f.createSlot(ctx, rn.slotWalpost)); err != nil {
			return nil, err
		}
		if o.stream {
			if err := add(f.createSlot(ctx, rn.slotStream)); err != nil {
				return nil, err
			}
		}
		if err := add(f.createTopic(ctx, rn.topic, nil)); err != nil {
			return nil, err
		}
		if o.raw {
			if err := add(f.createTopic(ctx, rn.rawTopic, nil)); err != nil {
				return nil, err
			}
		}
	}
	logf("%s %d B: table %s, publication %s, %d rounds of slots and topics (%d partitions)%s%s",
		wl, payloadSize, table, pub, o.rounds, o.partitions, map[bool]string{true: ", decode ceiling publication " + ceilPub, false: ""}[withCeil],
		map[bool]string{true: ", Debezium slot " + dbzSlot, false: ""}[withDbz])

	// --- backlog ------------------------------------------------------
	events, writers, txnSize := o.events, o.writers, o.txnSize
	if wl == wlBigTxn {
		events, writers, txnSize = o.bigTxnEvents, 1, o.bigTxnEvents
	}
	bl, err := f.writeBacklog(ctx, table, f.id+"-"+tag, events, writers, txnSize, payloadSize)
	if err != nil {
		return nil, fmt.Errorf("write backlog: %w", err)
	}
	c.backlog = bl
	n := float64(events)
	logf("%s %d B: backlog written in %s (%.0f events/s); WAL %s → %s (%.1f MiB), avg payload %.0f bytes",
		wl, payloadSize, bl.writeDur.Round(time.Millisecond), n/bl.writeDur.Seconds(), bl.startLSN, bl.endLSN, float64(bl.walBytes)/(1<<20), bl.avgPayload)
	var rowsFile string
	if o.raw {
		dir, err := f.caseDir(tag)
		if err != nil {
			return nil, err
		}
		rowsFile = filepath.Join(dir, "rows.bin")
		if !o.keep {
			defer os.Remove(rowsFile)
		}
		t0 := time.Now()
		got, err := f.dumpRows(ctx, table, rowsFile)
		if err != nil {
			return nil, fmt.Errorf("dump rows for the raw producer: %w", err)
		}
		if got != events {
			return nil, fmt.Errorf("dump rows: %d rows, want %d", got, events)
		}
		logf("%s %d B: rows for the raw producer read once in %s", wl, payloadSize, time.Since(t0).Round(time.Millisecond))
	}

	// --- rounds: each reader drains its own slot / topic ----------------
	readers := []string{rdRecvlogical}
	if withCeil {
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
	for i, rn := range rounds {
		res := &c.rounds[i]
		// Rotate which reader goes first, so order effects cancel out.
		res.order = append(append([]string(nil), readers[i%len(readers):]...), readers[:i%len(readers)]...)
		for _, rd := range res.order {
			var err error
			switch rd {
			case rdRecvlogical:
				logf("%s %d B round %d: pg_recvlogical --endpos=%s on %s", wl, payloadSize, i+1, bl.endLSN, rn.slotBase)
				if res.base, err = f.runRecvlogical(ctx, e.recvlogical, rn.slotBase, pub, bl.endLSN); err != nil {
					return nil, fmt.Errorf("round %d: pg_recvlogical: %w", i+1, err)
				}
				logf("%s %d B round %d: pg_recvlogical drained in %s (%.0f events/s)", wl, payloadSize, i+1, res.base.wall.Round(time.Millisecond), n/res.base.wall.Seconds())
			case rdCeiling:
				logf("%s %d B round %d: pg_recvlogical --endpos=%s on %s, publication %s (row filter %s: decodes, emits nothing)", wl, payloadSize, i+1, bl.endLSN, rn.slotCeil, ceilPub, emptyRowFilter)
				r, err := f.runRecvlogical(ctx, e.recvlogical, rn.slotCeil, ceilPub, bl.endLSN)
				if err != nil {
					return nil, fmt.Errorf("round %d: decode ceiling: %w", i+1, err)
				}
				res.ceiling = &r
				logf("%s %d B round %d: decode ceiling reached the end LSN in %s (%.0f events/s)", wl, payloadSize, i+1, r.wall.Round(time.Millisecond), n/r.wall.Seconds())
			case rdRaw:
				logf("%s %d B round %d: raw produce of %d events to %s", wl, payloadSize, i+1, events, rn.rawTopic)
				r, err := e.runRawProduce(ctx, rowsFile, rn.rawTopic, bl.endLSN, int64(events))
				if err != nil {
					return nil, fmt.Errorf("round %d: %w", i+1, err)
				}
				res.raw = &r
				logf("%s %d B round %d: raw produce acknowledged in %s (%.0f events/s; rows loaded in %s)", wl, payloadSize, i+1, r.wall.Round(time.Millisecond), n/r.wall.Seconds(), r.loadDuration.Round(time.Millisecond))
			case rdStream:
				logf("%s %d B round %d: walpost's stream alone on %s until %s", wl, payloadSize, i+1, rn.slotStream, bl.endLSN)
				r, err := e.runStreamAlone(ctx, table, pub, rn.slotStream, bl.endLSN, int64(events))
				if err != nil {
					return nil, fmt.Errorf("round %d: %w", i+1, err)
				}
				res.stream = &r
				logf("%s %d B round %d: stream alone done in %s (%.0f events/s)", wl, payloadSize, i+1, r.wall.Round(time.Millisecond), n/r.wall.Seconds())
			case rdWalpost:
				logf("%s %d B round %d: walpost run until %s confirms %s", wl, payloadSize, i+1, rn.slotWalpost, bl.endLSN)
				perf := o.perfOut
				if perf != "" {
					perf = fmt.Sprintf("%s.%s.%d", perf, tag, i+1)
				}
				if res.wp, err = f.runWalpost(ctx, e.walpostBin, table, pub, rn.slotWalpost, rn.topic, bl.endLSN, int64(events), perf); err != nil {
					return nil, fmt.Errorf("round %d: walpost: %w", i+1, err)
				}
				logf("%s %d B round %d: walpost drained and confirmed in %s (%.0f events/s)", wl, payloadSize, i+1, res.wp.wall.Round(time.Millisecond), n/res.wp.wall.Seconds())
			}
		}
	}

	// --- Debezium, once -------------------------------------------------
	switch {
	case !withDbz:
		c.dbzNote = e.dbzSkip
	default:
		dir, err := f.caseDir(tag + "-debezium")
		if err != nil {
			return nil, err
		}
		logf("%s %d B: Debezium on %s (publication %s) → %s", wl, payloadSize, dbzSlot, dbzPub, dbzTopic)
		r, err := f.runDebezium(ctx, debeziumSpec{
			libs: e.dbzLibs, table: table, slot: dbzSlot, publication: dbzPub, topic: dbzTopic,
			want: int64(events), workDir: dir,
		})
		if ctx.Err() != nil {
			return nil, ctx.Err()
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
	return c, nil
}
