package status

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteText writes r for people: one section per part, "-" for what could
// not be read, and the notes last.
func (r *Report) WriteText(w io.Writer) error {
	var t textWriter
	t.postgres(r.Postgres)
	t.slot(r.Slot)
	t.publication(r.Publication)
	t.outbox(r.Outbox, r.Poison)
	t.kafka(r.Kafka)
	t.notes(r.Notes)
	_, err := io.WriteString(w, t.b.String())
	return err
}

// textWriter builds the text report: a header line per section, then indented "label: value" lines.
type textWriter struct {
	b strings.Builder
}

// line writes one aligned "label: value" line of a section.
func (t *textWriter) line(label, value string) { fmt.Fprintf(&t.b, "  %-14s %s\n", label+":", value) }

// errLine writes the section's error, if it has one.
func (t *textWriter) errLine(e *string) {
	if e != nil {
		t.line("error", *e)
	}
}

// orDash is *s, or "-" for what could not be read.
func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// postgres writes the server section.
func (t *textWriter) postgres(pg Postgres) {
	fmt.Fprintf(&t.b, "postgres %s\n", pg.Database)
	t.line("version", pg.Version)
	cur := orDash(pg.CurrentWALLSN)
	if pg.InRecovery {
		cur += " (standby: last replayed)"
	}
	t.line("current WAL", cur)
}

// slot writes the replication slot section, with its standbys.
func (t *textWriter) slot(s Slot) {
	fmt.Fprintf(&t.b, "slot %s\n", s.Name)
	if !s.Exists {
		t.line("exists", "no")
	} else {
		active := "no"
		if s.Active != nil && *s.Active {
			active = "yes"
			if s.ActivePID != nil {
				active += fmt.Sprintf(" (pid %d)", *s.ActivePID)
			}
		}
		t.line("active", active)
		t.line("plugin", orDash(s.Plugin))
		t.line("confirmed LSN", orDash(s.ConfirmedFlushLSN))
		t.line("restart LSN", orDash(s.RestartLSN))
		t.line("lag", formatBytes(s.LagBytes))
		t.line("retained WAL", formatBytes(s.RetainedWALBytes))
		t.line("wal_status", orDash(s.WALStatus))
		safe := formatBytes(s.SafeWALSizeBytes)
		if s.SafeWALSizeBytes == nil && s.SafeWALUnlimited && deref(s.WALStatus) != "lost" {
			safe = "unlimited (max_slot_wal_keep_size = -1)"
		}
		t.line("safe WAL size", safe)
		if s.Failover != nil {
			failover := "no"
			if *s.Failover {
				failover = "yes"
			}
			if s.Synced != nil && *s.Synced {
				failover += " (synced copy on this standby)"
			}
			t.line("failover", failover)
		}
		for _, sb := range s.Standbys {
			state := sb.State
			if sb.State == "synced" {
				state += " (a failover loses nothing)"
			} else {
				state += " (failover not yet protected)"
			}
			t.line("standby "+sb.Standby, state)
		}
	}
	t.errLine(s.Error)
}

// publication writes the publication section.
func (t *textWriter) publication(p Publication) {
	fmt.Fprintf(&t.b, "publication %s\n", p.Name)
	if p.Exists {
		tables := strings.Join(p.Tables, ", ")
		if p.AllTables != nil && *p.AllTables {
			tables = "ALL TABLES"
		} else if tables == "" {
			tables = "(none)"
		}
		t.line("tables", tables)
		ops := strings.Join(p.Operations, ", ")
		if ops == "" {
			ops = "(none)"
		}
		t.line("operations", ops)
	} else {
		t.line("exists", "no")
	}
	t.errLine(p.Error)
}

// outbox writes the outbox and poison table sections.
func (t *textWriter) outbox(o Outbox, pz Poison) {
	fmt.Fprintf(&t.b, "outbox %s\n", o.Table)
	est := "-"
	if o.RowEstimate != nil {
		est = fmt.Sprintf("~%d (estimate from %s)", *o.RowEstimate, orDash(o.RowEstimateSource))
	}
	t.line("rows", est)
	t.errLine(o.Error)

	fmt.Fprintf(&t.b, "poison %s\n", pz.Table)
	t.line("pending", formatInt(pz.Pending))
	t.line("replayed", formatInt(pz.Replayed))
	t.errLine(pz.Error)
}

// kafka writes the topic section.
func (t *textWriter) kafka(k Kafka) {
	fmt.Fprintf(&t.b, "kafka topic %s\n", k.Topic)
	t.line("brokers", strings.Join(k.Brokers, ","))
	parts := "-"
	if k.Partitions != nil {
		parts = strconv.Itoa(*k.Partitions)
	}
	t.line("partitions", parts)
	if len(k.EndOffsets) > 0 {
		var offs []string
		for _, po := range k.EndOffsets {
			offs = append(offs, fmt.Sprintf("%d=%s", po.Partition, formatInt(po.EndOffset)))
		}
		sum := ""
		if k.EndOffsetSum != nil {
			sum = fmt.Sprintf(" (sum %d)", *k.EndOffsetSum)
		}
		t.line("end offsets", strings.Join(offs, " ")+sum)
	} else {
		t.line("end offsets", "-")
	}
	t.errLine(k.Error)
}

// notes writes the notes, last.
func (t *textWriter) notes(notes []string) {
	if len(notes) > 0 {
		fmt.Fprintln(&t.b, "notes")
		for _, n := range notes {
			fmt.Fprintf(&t.b, "  - %s\n", n)
		}
	}
}

func formatInt(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// formatBytes shows a byte count exactly, with a binary-unit rendering
// beside it from 1 KiB up.
func formatBytes(n *int64) string {
	if n == nil {
		return "-"
	}
	v := *n
	abs := v
	if abs < 0 {
		abs = -abs
	}
	if abs < 1024 {
		return fmt.Sprintf("%d B", v)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(v) / 1024
	u := 0
	for (f >= 1024 || f <= -1024) && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%d B (%.1f %s)", v, f, units[u])
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
