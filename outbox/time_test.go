package outbox

import (
	"testing"
	"time"
)

// slowRFC3339 is the reference: time.Parse of the PostgreSQL layouts.
func slowRFC3339(in string) string {
	for _, l := range pgLayouts {
		if t, err := time.Parse(l, in); err == nil {
			return t.Format(time.RFC3339Nano)
		}
	}
	return in
}

// sameInstant reports whether the fast rendering denotes what the
// reference does (the same instant, or the same text when unparsable).
func sameInstant(got, want string) bool {
	gt, e1 := time.Parse(time.RFC3339Nano, got)
	wt, e2 := time.Parse(time.RFC3339Nano, want)
	if e1 != nil || e2 != nil {
		return got == want
	}
	return gt.Equal(wt)
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
		"2026-11-29 22:50:51.120000+00": "2026-11-29T22:50:51.12Z",
		"2026-11-29 22:50:51.000+00":    "2026-11-29T22:50:51Z",
	}
	for in, want := range cases {
		if got := string(AppendRFC3339(nil, []byte(in))); got != want {
			t.Errorf("AppendRFC3339(%q) = %q, want %q", in, got, want)
		}
		if got := string(AppendRFC3339(nil, []byte(in))); !sameInstant(got, slowRFC3339(in)) {
			t.Errorf("AppendRFC3339(%q) = %q, reference %q", in, got, slowRFC3339(in))
		}
	}
}

func FuzzAppendRFC3339(f *testing.F) {
	for _, s := range []string{"2026-11-29 22:50:51.123456+00", "2026-11-29 22:50:51-03", "2026-11-29 22:50:51.1+05:30", "infinity", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := string(AppendRFC3339(nil, []byte(in)))
		if want := slowRFC3339(in); !sameInstant(got, want) {
			// The fast path may accept shapes time.Parse refuses only if
			// they are valid RFC 3339 of the same text.
			if _, err := time.Parse(time.RFC3339Nano, got); err != nil || want != in {
				t.Fatalf("AppendRFC3339(%q) = %q, reference %q", in, got, want)
			}
		}
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
