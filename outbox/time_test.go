package outbox

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

// The reference: regular expressions and time.Date, independent of the
// byte-by-byte rewrite and of parsePG.
var (
	pgRE     = regexp.MustCompile(`^(\d{4,6})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?( BC)?$`)
	headerRE = regexp.MustCompile(`^([+-]?\d{4,})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:(Z)|([+-])(\d\d):(\d\d))$`)
)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func nanos(frac string) int {
	frac = (frac + "000000000")[:9]
	return atoi(frac)
}

// refInstant is the instant PostgreSQL's ISO text denotes, ok false when
// it is not such a text (or out of range).
func refInstant(in string) (time.Time, bool) {
	m := pgRE.FindStringSubmatch(in)
	if m == nil {
		return time.Time{}, false
	}
	y, mo, d, h, mi, s := atoi(m[1]), atoi(m[2]), atoi(m[3]), atoi(m[4]), atoi(m[5]), atoi(m[6])
	if m[12] != "" {
		y = 1 - y
	}
	oh, om, os := atoi(m[9]), atoi(m[10]), atoi(m[11])
	if h > 23 || mi > 59 || s > 59 || oh > 23 || om > 59 || os > 59 {
		return time.Time{}, false
	}
	off := oh*3600 + om*60 + os
	if m[8] == "-" {
		off = -off
	}
	t := time.Date(y, time.Month(mo), d, h, mi, s, nanos(m[7]), time.FixedZone("", off))
	if t.Year() != y || t.Month() != time.Month(mo) || t.Day() != d { // normalised: out of range
		return time.Time{}, false
	}
	return t, true
}

// headerInstant parses a created_at header value back (RFC 3339 with ISO
// 8601 expanded years).
func headerInstant(h string) (time.Time, bool) {
	m := headerRE.FindStringSubmatch(h)
	if m == nil {
		return time.Time{}, false
	}
	y := atoi(m[1])
	if (y < 0 || y > 9999) != (m[1][0] == '-' || m[1][0] == '+') {
		return time.Time{}, false // a sign exactly for years outside 0000-9999
	}
	off := 0
	if m[8] == "" {
		off = atoi(m[10])*3600 + atoi(m[11])*60
		if m[9] == "-" {
			off = -off
		}
	}
	return time.Date(y, time.Month(atoi(m[2])), atoi(m[3]), atoi(m[4]), atoi(m[5]), atoi(m[6]), nanos(m[7]), time.FixedZone("", off)), true
}

// checkRendering: a PostgreSQL text becomes a header denoting the same
// instant; anything else is passed through unchanged.
func checkRendering(t *testing.T, in string) {
	t.Helper()
	got := string(AppendRFC3339(nil, []byte(in)))
	want, ok := refInstant(in)
	if !ok {
		if got != in {
			t.Errorf("AppendRFC3339(%q) = %q, want it unchanged", in, got)
		}
		return
	}
	if gt, ok := headerInstant(got); !ok || !gt.Equal(want) {
		t.Errorf("AppendRFC3339(%q) = %q, want the instant %s", in, got, want.UTC().Format(time.RFC3339Nano))
	}
}

func TestAppendRFC3339(t *testing.T) {
	cases := map[string]string{
		"2026-11-29 22:50:51.123456+00": "2026-11-29T22:50:51.123456Z",
		"2026-11-29 22:50:51+00":        "2026-11-29T22:50:51Z",
		"2026-11-29 22:50:51.1+05:30":   "2026-11-29T22:50:51.1+05:30",
		"2026-11-29 22:50:51-03":        "2026-11-29T22:50:51-03:00",
		"2026-11-29 22:50:51.5-09:30":   "2026-11-29T22:50:51.5-09:30",
		"2026-11-29 22:50:51.123456+13": "2026-11-29T22:50:51.123456+13:00",
		"infinity":                      "infinity",
		"-infinity":                     "-infinity",
		"2026-11-29 22:50:51.120000+00": "2026-11-29T22:50:51.12Z",
		"2026-11-29 22:50:51.000+00":    "2026-11-29T22:50:51Z",
		// Offsets with seconds (local mean time): converted to UTC, exact.
		"1850-01-01 00:00:00+00:53:28":    "1849-12-31T23:06:32Z",
		"1850-01-01 12:00:00.25-04:56:02": "1850-01-01T16:56:02.25Z",
		"1900-01-01 00:00:00+05:30:00":    "1900-01-01T00:00:00+05:30",
		// BC: astronomical years, signed below 0000.
		"0044-03-15 12:00:00+00 BC":       "-0043-03-15T12:00:00Z",
		"0001-01-01 00:00:00+00 BC":       "0000-01-01T00:00:00Z",
		"0005-02-29 00:00:00.5+00 BC":     "-0004-02-29T00:00:00.5Z",
		"4713-11-24 00:00:00+00 BC":       "-4712-11-24T00:00:00Z",
		"0044-03-15 12:00:00+00:53:28 BC": "-0043-03-15T11:06:32Z",
		// Past 9999: signed expanded years.
		"10000-01-01 00:00:00+00":         "+10000-01-01T00:00:00Z",
		"294276-12-31 23:59:59.999999+00": "+294276-12-31T23:59:59.999999Z",
		// Not PostgreSQL's ISO output: unchanged.
		"Sun Nov 29 22:50:51 2026 UTC": "Sun Nov 29 22:50:51 2026 UTC",
		"0005-02-29 00:00:00+00":       "0005-02-29 00:00:00+00",
	}
	for in, want := range cases {
		if got := string(AppendRFC3339(nil, []byte(in))); got != want {
			t.Errorf("AppendRFC3339(%q) = %q, want %q", in, got, want)
		}
		checkRendering(t, in)
	}
}

func TestAppendTime(t *testing.T) {
	for _, tt := range []struct {
		t    time.Time
		want string
	}{
		{time.Date(2026, 11, 29, 22, 50, 51, 120000000, time.UTC), "2026-11-29T22:50:51.12Z"},
		{time.Date(-43, 3, 15, 12, 0, 0, 0, time.UTC), "-0043-03-15T12:00:00Z"},
		{time.Date(-4712, 11, 24, 0, 0, 0, 0, time.UTC), "-4712-11-24T00:00:00Z"},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), "+10000-01-01T00:00:00Z"},
		{time.Date(1850, 1, 1, 0, 0, 0, 0, time.FixedZone("LMT", 3208)), "1849-12-31T23:06:32Z"},
	} {
		if got := string(AppendTime(nil, tt.t)); got != tt.want {
			t.Errorf("AppendTime(%s) = %q, want %q", tt.t, got, tt.want)
		}
	}
}

func FuzzAppendRFC3339(f *testing.F) {
	for _, s := range []string{"2026-11-29 22:50:51.123456+00", "2026-11-29 22:50:51-03", "2026-11-29 22:50:51.1+05:30", "infinity", "",
		"1850-01-01 00:00:00+00:53:28", "0044-03-15 12:00:00+00 BC", "10000-01-01 00:00:00+00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkRendering(t, in)
	})
}

func TestDaysIn(t *testing.T) {
	for y := 1; y <= 2400; y++ {
		for mo := 1; mo <= 12; mo++ {
			if got, want := daysIn(y, mo), time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day(); got != want {
				t.Fatalf("daysIn(%d, %d) = %d, want %d", y, mo, got, want)
			}
		}
	}
}
