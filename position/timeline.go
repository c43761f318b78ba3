package position

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
)

// SwitchPoint returns where the timeline history file history (the content
// TIMELINE_HISTORY returns for the server's timeline) leaves timeline tli:
// the WAL below it is the same on tli and on the history's timeline. ok is
// false when tli is not an ancestor in the history. Lines are
// "parent_tli<TAB>switch_lsn<TAB>reason"; blank lines and lines starting
// with # are comments, as PostgreSQL reads them (readTimeLineHistory).
func SwitchPoint(history []byte, tli int32) (lsn pglogrepl.LSN, ok bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(history))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return 0, false, fmt.Errorf("timeline history line %d %q: want a timeline and a switch point", n, line)
		}
		parent, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("timeline history line %d %q: timeline: %w", n, line, err)
		}
		at, err := pglogrepl.ParseLSN(fields[1])
		if err != nil {
			return 0, false, fmt.Errorf("timeline history line %d %q: switch point: %w", n, line, err)
		}
		if int32(parent) == tli {
			return at, true, nil
		}
	}
	return 0, false, sc.Err()
}

// AcrossSwitch is the plan of a session whose stored position row was
// recorded on another timeline than the server's (Check returned
// TimelineChanged), given the server's timeline history file. When row's
// timeline is an ancestor, the WAL below its switch point S is shared, so
// the transactions ending at or before min(row.LSN, S) were confirmed and
// are skipped; past S the LSNs carry the new timeline's data and nothing
// is. S is a record boundary (the first record of the new timeline starts
// there), so INV-7's C < P ⇔ E ≤ P holds for P = S as well. A row whose
// timeline is not in the history skips nothing.
func AcrossSwitch(row Row, slot Slot, history []byte) (Plan, error) {
	plan := Plan{TimelineChanged: true}
	at, ok, err := SwitchPoint(history, row.Timeline)
	if err != nil || !ok {
		return plan, err
	}
	plan.SwitchPoint = at
	if upTo := min(row.LSN, at); upTo > slot.Confirmed {
		plan.SkipTo = upTo
	}
	return plan, nil
}
