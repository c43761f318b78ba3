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
	var b strings.Builder
	line := func(label, value string) { fmt.Fprintf(&b, "  %-14s %s\n", label+":", value) }
	orDash := func(s *string) string {
		if s == nil || *s == "" {
			return "-"
		}
		return *s
	}
	errLine := func(e *string) {
		if e != nil {
			line("error", *e)
		}
	}

	fmt.Fprintf(&b, "postgres %s\n", r.Postgres.Database)
	line("version", r.Postgres.Version)
	cur := orDash(r.Postgres.CurrentWALLSN)
	if r.Postgres.InRecovery {
		cur += " (standby: last replayed)"
	}
	line("current WAL", cur)

	s := r.Slot
	fmt.Fprintf(&b, "slot %s\n", s.Name)
	if !s.Exists {
		line("exists", "no")
	} else {
		active := "no"
		if s.Active != nil && *s.Active {
			active = "yes"
			if s.ActivePID != nil {
				active += fmt.Sprintf(" (pid %d)", *s.ActivePID)
			}
		}
		line("active", active)
		line("plugin", orDash(s.Plugin))
		line("confirmed LSN", orDash(s.ConfirmedFlushLSN))
		line("restart LSN", orDash(s.RestartLSN))
		line("lag", formatBytes(s.LagBytes))
		line("retained WAL", formatBytes(s.RetainedWALBytes))
		line("wal_status", orDash(s.WALStatus))
		safe := formatBytes(s.SafeWALSizeBytes)
		if s.SafeWALSizeBytes == nil && s.SafeWALUnlimited && deref(s.WALStatus) != "lost" {
			safe = "unlimited (max_slot_wal_keep_size = -1)"
		}
		line("safe WAL size", safe)
		if s.Failover != nil {
			failover := "no"
			if *s.Failover {
				failover = "yes"
			}
			if s.Synced != nil && *s.Synced {
				failover += " (synced copy on this standby)"
			}
			line("failover", failover)
		}
		for _, sb := range s.Standbys {
			state := sb.State
			if sb.State == "synced" {
				state += " (a failover loses nothing)"
			} else {
				state += " (failover not yet protected)"
			}
			line("standby "+sb.Standby, state)
		}
	}
	errLine(s.Error)

	p := r.Publication
	fmt.Fprintf(&b, "publication %s\n", p.Name)
	if p.Exists {
		tables := strings.Join(p.Tables, ", ")
		if p.AllTables != nil && *p.AllTables {
			tables = "ALL TABLES"
		} else if tables == "" {
			tables = "(none)"
		}
		line("tables", tables)
		ops := strings.Join(p.Operations, ", ")
		if ops == "" {
			ops = "(none)"
		}
		line("operations", ops)
	} else {
		line("exists", "no")
	}
	errLine(p.Error)

	o := r.Outbox
	fmt.Fprintf(&b, "outbox %s\n", o.Table)
	est := "-"
	if o.RowEstimate != nil {
		est = fmt.Sprintf("~%d (estimate from %s)", *o.RowEstimate, orDash(o.RowEstimateSource))
	}
	line("rows", est)
	errLine(o.Error)

	pz := r.Poison
	fmt.Fprintf(&b, "poison %s\n", pz.Table)
	line("pending", formatInt(pz.Pending))
	line("replayed", formatInt(pz.Replayed))
	errLine(pz.Error)

	k := r.Kafka
	fmt.Fprintf(&b, "kafka topic %s\n", k.Topic)
	line("brokers", strings.Join(k.Brokers, ","))
	parts := "-"
	if k.Partitions != nil {
		parts = strconv.Itoa(*k.Partitions)
	}
	line("partitions", parts)
	if len(k.EndOffsets) > 0 {
		var offs []string
		for _, po := range k.EndOffsets {
			offs = append(offs, fmt.Sprintf("%d=%s", po.Partition, formatInt(po.EndOffset)))
		}
		sum := ""
		if k.EndOffsetSum != nil {
			sum = fmt.Sprintf(" (sum %d)", *k.EndOffsetSum)
		}
		line("end offsets", strings.Join(offs, " ")+sum)
	} else {
		line("end offsets", "-")
	}
	errLine(k.Error)

	if len(r.Notes) > 0 {
		fmt.Fprintln(&b, "notes")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
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
