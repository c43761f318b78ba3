package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/preflight"
)

func newCheckCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Pre-flight: verify PostgreSQL and Kafka are ready for walpost",
		Long: "check prints one line per check (OK, FAIL with the fix, WARN: passed with a risk named, or\n" +
			"SKIP when an earlier failure makes it moot) and exits 1 when any check fails.\n\n" +
			"With --json it prints one object, {\"checks\": [{\"name\", \"status\", \"detail\", \"fix\"}, …],\n" +
			"\"failed\": N}, valid against cmd/walpost/schema/check.schema.json; the exit status is the same.",
		Example: "  # before the first walpost run\n" +
			"  WALPOST_POSTGRES_URL=postgres://walpost:secret@db:5432/app WALPOST_KAFKA_BROKERS=kafka:9092 walpost check\n\n" +
			"  # in a deployment pipeline: the failed checks and their fixes\n" +
			"  walpost check --config walpost.yaml --json | jq '.checks[] | select(.status == \"FAIL\")'",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			var res preflight.Result
			if asJSON {
				res = preflight.Run(cmd.Context(), cfg, nil)
				if err := writeCheckJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			} else {
				res = preflight.Run(cmd.Context(), cfg, oneLineWriter{cmd.OutOrStdout()})
			}
			if failed := res.Failed(); failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d check(s) failed", failed)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"checks":[{"name","status","detail","fix"}…],"failed":N} instead of lines`)
	addConfigFlags(cmd, flagsPostgres|flagsKafka|flagsLog)
	return cmd
}

// checkJSON is one check of `walpost check --json`
// (schema/check.schema.json).
type checkJSON struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	// Fix is what to do, split off the detail's "; fix: …" (FAIL and
	// WARN); empty when the check names none.
	Fix string `json:"fix"`
}

// writeCheckJSON writes res as one JSON object.
func writeCheckJSON(w io.Writer, res preflight.Result) error {
	out := struct {
		Checks []checkJSON `json:"checks"`
		Failed int         `json:"failed"`
	}{Checks: make([]checkJSON, 0, len(res.Checks)), Failed: res.Failed()}
	for _, c := range res.Checks {
		detail, fix := splitFix(oneLine(c.Detail))
		out.Checks = append(out.Checks, checkJSON{Name: c.Name, Status: string(c.Status), Detail: detail, Fix: fix})
	}
	return writeJSON(w, out)
}

// splitFix splits a check's detail at its last "fix: " (preflight writes
// "the problem; fix: what to do").
func splitFix(detail string) (string, string) {
	i := strings.LastIndex(detail, "fix: ")
	if i < 0 {
		return detail, ""
	}
	return strings.TrimRight(detail[:i], "; :"), strings.TrimSpace(detail[i+len("fix: "):])
}
