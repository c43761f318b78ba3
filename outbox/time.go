package outbox

import "time"

var pgLayouts = []string{
	"2006-01-02 15:04:05.999999999-07",
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999-07:00:00",
}

// AppendRFC3339 appends PostgreSQL's ISO rendering of a timestamptz
// ("2026-11-29 22:50:51.123456+00") as RFC 3339 to dst. The common shapes
// are rewritten byte by byte; others go through time.Parse; a value that
// does not parse (infinity, BC dates) is appended unchanged.
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
	for _, l := range pgLayouts {
		if t, err := time.Parse(l, string(pg)); err == nil {
			return t.AppendFormat(dst, time.RFC3339Nano)
		}
	}
	return append(dst, pg...)
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
