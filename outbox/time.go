package outbox

import (
	"strconv"
	"strings"
	"time"
)

// AppendRFC3339 appends PostgreSQL's ISO rendering of a timestamptz
// ("2026-11-29 22:50:51.123456+00") as the created_at header carries it to
// dst (README, Kafka record):
//   - years 0000-9999: RFC 3339, the fraction without trailing zeros, the
//     offset as PostgreSQL wrote it ("Z" for +00); an offset with seconds
//     (local mean time before 1900, "+00:53:28") is converted to UTC, so
//     the instant is exact;
//   - BC dates ("0044-03-15 12:00:00+00 BC") and years past 9999: ISO 8601
//     expanded years, as AppendTime writes them ("-0043-03-15T12:00:00Z",
//     "+10000-01-01T00:00:00Z");
//   - anything else ("infinity", "-infinity", another DateStyle) is
//     appended unchanged.
//
// The common shapes are rewritten byte by byte; the others are parsed.
func AppendRFC3339(dst, pg []byte) []byte {
	// YYYY-MM-DD HH:MM:SS[.f…](+|-)HH[:MM]
	if len(pg) >= 22 && wellFormed(pg) {
		i := 19
		if pg[i] == '.' {
			i++
			for i < len(pg) && pg[i] >= '0' && pg[i] <= '9' {
				i++
			}
			if i == 20 {
				i = len(pg) // "." without digits: not for the fast path
			}
		}
		if i+3 <= len(pg) && (pg[i] == '+' || pg[i] == '-') && digits(pg[i+1:i+3]) && pg[i+1] <= '1' {
			rest := pg[i+3:]
			// As time.Format's RFC3339Nano: no trailing zeros in the fraction.
			clock := pg[11:i]
			for len(clock) > 8 && clock[len(clock)-1] == '0' {
				clock = clock[:len(clock)-1]
			}
			if len(clock) == 9 { // "HH:MM:SS."
				clock = clock[:8]
			}
			switch {
			case len(rest) == 0 && pg[i+1] == '0' && pg[i+2] == '0':
				dst = append(dst, pg[:10]...)
				dst = append(dst, 'T')
				dst = append(dst, clock...)
				return append(dst, 'Z')
			case len(rest) == 0:
				dst = append(dst, pg[:10]...)
				dst = append(dst, 'T')
				dst = append(dst, clock...)
				dst = append(dst, pg[i:i+3]...)
				return append(dst, ':', '0', '0')
			case len(rest) == 3 && rest[0] == ':' && digits(rest[1:]) && rest[1] <= '5':
				dst = append(dst, pg[:10]...)
				dst = append(dst, 'T')
				dst = append(dst, clock...)
				return append(dst, pg[i:]...)
			}
		}
	}
	if t, ok := parsePG(pg); ok {
		return AppendTime(dst, t)
	}
	return append(dst, pg...)
}

// AppendTime appends t as the created_at header renders an instant:
// RFC 3339 with t's offset and the fraction without trailing zeros
// (time.RFC3339Nano) for years 0000-9999; outside them ISO 8601 expanded
// years in astronomical numbering (1 BC is 0000, 44 BC is -0043), at least
// four digits and signed ("-0043-03-15T12:00:00Z", "+10000-01-01T00:00:00Z"),
// as java.time.Instant writes and parses them. An offset with seconds,
// which RFC 3339 cannot write, is converted to UTC.
func AppendTime(dst []byte, t time.Time) []byte {
	if _, off := t.Zone(); off%60 != 0 {
		t = t.UTC()
	}
	y := t.Year()
	if y >= 0 && y <= 9999 {
		return t.AppendFormat(dst, time.RFC3339Nano)
	}
	if y < 0 {
		dst = append(dst, '-')
		y = -y
	} else {
		dst = append(dst, '+')
	}
	for p := 1000; p > 1 && y < p; p /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, int64(y), 10)
	return t.AppendFormat(dst, "-01-02T15:04:05.999999999Z07:00")
}

// parsePG parses PostgreSQL's ISO output of a timestamptz:
// Y{4,6}-MM-DD HH:MM:SS[.f…](+|-)HH[:MM[:SS]][ BC], values in range.
func parsePG(pg []byte) (time.Time, bool) {
	s := string(pg)
	bc := strings.HasSuffix(s, " BC")
	s = strings.TrimSuffix(s, " BC")
	dash := strings.IndexByte(s, '-')
	if dash < 4 || dash > 6 || !digits([]byte(s[:dash])) || len(s) < dash+16 {
		return time.Time{}, false
	}
	y, _ := strconv.Atoi(s[:dash])
	if bc {
		y = 1 - y // astronomical numbering, as time.Date counts
	}
	b := s[dash:] // "-MM-DD HH:MM:SS…"
	if b[3] != '-' || b[6] != ' ' || b[9] != ':' || b[12] != ':' {
		return time.Time{}, false
	}
	num := func(x string) int {
		if !digits([]byte(x)) {
			return -1
		}
		n, _ := strconv.Atoi(x)
		return n
	}
	mo, d, h, mi, sec := num(b[1:3]), num(b[4:6]), num(b[7:9]), num(b[10:12]), num(b[13:15])
	if mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 {
		return time.Time{}, false
	}
	rest := b[15:]
	ns := 0
	if len(rest) > 0 && rest[0] == '.' {
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 1 {
			return time.Time{}, false
		}
		frac := rest[1:j]
		for k := 0; k < 9; k++ {
			ns *= 10
			if k < len(frac) {
				ns += int(frac[k] - '0')
			}
		}
		rest = rest[j:]
	}
	// (+|-)HH[:MM[:SS]]
	if len(rest) != 3 && len(rest) != 6 && len(rest) != 9 || rest[0] != '+' && rest[0] != '-' {
		return time.Time{}, false
	}
	off := 0
	for k, limit := range []int{23, 59, 59} {
		if 3*k+3 > len(rest) {
			break
		}
		if k > 0 && rest[3*k] != ':' {
			return time.Time{}, false
		}
		n := num(rest[3*k+1 : 3*k+3])
		if n < 0 || n > limit {
			return time.Time{}, false
		}
		off = off*60 + n
	}
	for k := len(rest) / 3; k < 3; k++ {
		off *= 60
	}
	if rest[0] == '-' {
		off = -off
	}
	return time.Date(y, time.Month(mo), d, h, mi, sec, ns, time.FixedZone("", off)), true
}

// wellFormed checks the date and time part "YYYY-MM-DD HH:MM:SS" with
// values in range, so the rewritten text is valid RFC 3339.
func wellFormed(pg []byte) bool {
	if pg[4] != '-' || pg[7] != '-' || pg[10] != ' ' || pg[13] != ':' || pg[16] != ':' {
		return false
	}
	num := func(a, b int) int {
		n := 0
		for _, c := range pg[a:b] {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, mo, d, h, mi, s := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59 {
		return false
	}
	return d <= daysIn(y, mo)
}

// daysIn is the number of days of month mo (1-12) of year y, proleptic
// Gregorian as PostgreSQL and time.Date count them.
func daysIn(y, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// ParseTimestamp parses PostgreSQL's ISO text of a timestamptz (what the
// replication connection receives) into a time; the zero time when it
// cannot (infinity, another rendering).
func ParseTimestamp(pg []byte) time.Time {
	t, ok := parsePG(pg)
	if !ok {
		return time.Time{}
	}
	return t
}
