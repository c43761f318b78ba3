package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/verify"
)

func newVerifyCommand() *cobra.Command {
	lt := &verify.LeakTest{}
	var asJSON bool
	var isolation string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Leak test: write events through the outbox and check that none is lost",
		Example: "  # with walpost run forwarding, from another shell\n" +
			"  walpost verify --events 10000 --writers 8\n\n" +
			"  walpost verify --events 1000 --json | jq '{ok, lost, duplicates}'",
		Long: `verify writes --events events through the real outbox table (postgres.table) from
--writers concurrent writers, in transactions of 1..--txn-size rows, and reads them back
from kafka.topic, starting at the topic's end offsets taken before the first write.

verify does NOT forward anything: a 'walpost run' with the same configuration must be
running. If nothing arrives within --timeout after the last commit, the report says so.
It connects as walpost run does: postgres.url, kafka.brokers, kafka.tls.* and kafka.sasl.*.

Keys are walpost-verify-<runid>-w<writer>-t<txn>-r<row>; records of other runs and of
applications are ignored. The written rows are deleted from the outbox table at the end
(the inserts are already in the WAL), unless --keep-rows.

The report: events written, delivered, lost, duplicated, out of order (per partition,
by commit order and by insert order within a transaction), and the latency from commit to
consume (p50/p99/max): from this host's clock right after COMMIT returned to its clock
when the record was fetched. It is not the broker append time: walpost stamps each record
with the transaction's commit time. The verdict comes from the same validator as
walpost's integration tests.

With delivery.mode exactly-once, verify reads with --isolation read_committed (the
default then) and a duplicate is a failure.

Exit status: 0 when nothing was lost and order held (duplicates are allowed in
at-least-once mode, a failure in exactly-once mode); 1 when events were lost, out of order, or the run was
interrupted; 2 when the test could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			kopts, err := kafkaconf.ClientOpts(cfg.Kafka)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			lt.PostgresURL = cfg.Postgres.URL
			lt.Table = cfg.Postgres.Table
			lt.Brokers = cfg.Kafka.Brokers
			lt.KafkaOpts = kopts
			lt.Topic = cfg.Kafka.Topic
			lt.ExactlyOnce = cfg.Delivery.Mode == config.ExactlyOnce
			switch {
			case isolation == "" && lt.ExactlyOnce:
				isolation = verify.IsolationReadCommitted
			case isolation == "":
				isolation = verify.IsolationReadUncommitted
			case isolation != verify.IsolationReadCommitted && isolation != verify.IsolationReadUncommitted:
				return &exitError{code: 2, err: fmt.Errorf("--isolation %q: read_committed or read_uncommitted", isolation)}
			}
			if lt.ExactlyOnce && isolation != verify.IsolationReadCommitted {
				return &exitError{code: 2, err: fmt.Errorf("--isolation %s with delivery.mode exactly-once: a read_uncommitted consumer sees the records of aborted transactions, so duplicates cannot be judged; use --isolation read_committed", isolation)}
			}
			lt.Isolation = isolation
			return runVerify(cmd.Context(), lt, cmd.OutOrStdout(), cmd.ErrOrStderr(), asJSON)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&lt.Events, "events", 10000, "events to write")
	fs.IntVar(&lt.Writers, "writers", 4, "concurrent writers (one connection each)")
	fs.IntVar(&lt.MaxTxnSize, "txn-size", 20, "most rows per transaction; each has 1..N, at random")
	fs.IntVar(&lt.PayloadBytes, "payload-bytes", 200, "size of each JSON payload in bytes")
	fs.DurationVar(&lt.Timeout, "timeout", 2*time.Minute, "how long to wait for delivery after the last commit")
	fs.BoolVar(&lt.KeepRows, "keep-rows", false, "leave the written rows in the outbox table")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&isolation, "isolation", "", "consumer isolation: read_committed or read_uncommitted (default read_committed with delivery.mode exactly-once, which also counts duplicates as a failure; else read_uncommitted)")
	addConfigFlags(cmd, flagsPostgres|flagsKafka|flagsLog)
	return cmd
}

func runVerify(ctx context.Context, lt *verify.LeakTest, out, errw io.Writer, asJSON bool) error {
	stop := startProgress(lt, errw)
	res, err := lt.Run(ctx)
	stop()
	if err != nil {
		return &exitError{code: 2, err: redact.Error(err)}
	}
	if asJSON {
		err = res.WriteJSON(out)
	} else {
		err = res.WriteText(out)
	}
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if !res.OK {
		return &exitError{code: 1}
	}
	return nil
}

// startProgress draws a progress bar on errw while the test runs, when
// errw is a terminal; the returned function clears it.
func startProgress(lt *verify.LeakTest, errw io.Writer) func() {
	if !isTerminal(errw) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(errw, "\r\x1b[K")
				return
			case <-t.C:
				fmt.Fprint(errw, "\r"+progressLine(lt.Progress(), 30)+"\x1b[K")
			}
		}
	}()
	return func() { close(done); <-finished }
}

// progressLine renders one line: the bar fills with delivered events.
func progressLine(p verify.Progress, width int) string {
	frac := 0.0
	if p.Total > 0 {
		frac = min(float64(p.Delivered)/float64(p.Total), 1)
	}
	fill := int(frac * float64(width))
	return fmt.Sprintf("%-11s [%s%s] %3.0f%%  written %d/%d  delivered %d  %s",
		p.Phase, strings.Repeat("#", fill), strings.Repeat(".", width-fill), frac*100,
		p.Written, p.Total, p.Delivered, p.Elapsed.Round(100*time.Millisecond))
}

// isTerminal reports whether w is a character device other than
// /dev/null (no golang.org/x/term in the module graph).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}
