package writer

import (
	"context"
	"errors"
	"testing"
)

const testTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestWithTraceContext: a W3C traceparent is accepted, a malformed one is
// an error and leaves the context without a trace context.
func TestWithTraceContext(t *testing.T) {
	for _, c := range []struct {
		parent, state string
		ok            bool
	}{
		{testTraceparent, "", true},
		{testTraceparent, "congo=t61rcWkgMzE", true},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", "", true},
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "", false},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", "", false},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "", false},
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "", false},
		{testTraceparent + "-x", "", false},
		{testTraceparent[:54], "", false},
		{testTraceparent, "congo=\n", false},
	} {
		ctx, err := WithTraceContext(context.Background(), c.parent, c.state)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidTraceContext)) {
			t.Errorf("WithTraceContext(%q, %q): %v, want ok %v", c.parent, c.state, err, c.ok)
		}
		if got := traceOf(ctx) != nil; got != c.ok {
			t.Errorf("WithTraceContext(%q, %q): context carries a trace context %v, want %v", c.parent, c.state, got, c.ok)
		}
	}
	if ctx, err := WithTraceContext(context.Background(), "", "x=y"); err != nil || traceOf(ctx) != nil {
		t.Errorf("an empty traceparent: %v; want no trace context and no error", err)
	}
}

// TestTraceHeaders: the context's trace context lands in the headers
// column; an event's own traceparent wins; the caller's map is untouched.
func TestTraceHeaders(t *testing.T) {
	ctx, err := WithTraceContext(context.Background(), testTraceparent, "congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	tc := traceOf(ctx)
	headers := func(h map[string]string) any {
		r, err := encode(0, Event{Key: "k", Payload: []byte(`{}`), Headers: tc.headers(h)})
		if err != nil {
			t.Fatal(err)
		}
		return r[5]
	}
	if got, want := headers(nil), `{"traceparent":"`+testTraceparent+`","tracestate":"congo=t61rcWkgMzE"}`; got != want {
		t.Errorf("headers column %v, want %s", got, want)
	}
	own := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-00", "tenant": "a"}
	if got, want := headers(own), `{"tenant":"a","traceparent":"00-11111111111111111111111111111111-2222222222222222-00"}`; got != want {
		t.Errorf("headers column %v, want the event's own traceparent %s", got, want)
	}
	mine := map[string]string{"tenant": "a", "tracestate": "other=1"}
	if got, want := headers(mine), `{"tenant":"a","traceparent":"`+testTraceparent+`","tracestate":"congo=t61rcWkgMzE"}`; got != want {
		t.Errorf("headers column %v, want %s", got, want)
	}
	if len(mine) != 2 || mine["tracestate"] != "other=1" {
		t.Errorf("the caller's map was modified: %v", mine)
	}
	rows, err := encodeBatch(tc, []Event{{Key: "a", Payload: []byte(`1`)}, {Key: "b", Payload: []byte(`2`)}})
	if err != nil || rows[0][5] == nil || rows[1][5] == nil {
		t.Errorf("batch: %v, %v; want the trace context in every row", rows, err)
	}
	if r, _ := encode(0, Event{Key: "k", Payload: []byte(`{}`), Headers: (*traceContext)(nil).headers(nil)}); r[5] != nil {
		t.Errorf("without a trace context the headers column is %v, want NULL", r[5])
	}
}
