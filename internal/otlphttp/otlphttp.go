// Package otlphttp is walpost's OTLP/HTTP trace client: the
// otlptrace.Client that posts the spans OpenTelemetry's otlptrace exporter
// hands it as a binary protobuf ExportTraceServiceRequest, configured by
// the OTLP exporter specification's OTEL_EXPORTER_OTLP_* variables
// (FromEnv).
//
// It replaces otlptracehttp, whose collector package links gRPC and
// grpc-gateway into the binary (about 3 MB for a client that never speaks
// gRPC). It depends on the protobuf runtime and the OTLP message types
// only: the request, one repeated field around the resource spans, is
// written with protowire.
package otlphttp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Config is an OTLP/HTTP trace client's configuration; FromEnv builds it
// from the standard variables.
type Config struct {
	// URL receives the POSTs (e.g. http://localhost:4318/v1/traces).
	// Required.
	URL *url.URL
	// Headers are added to every request (after User-Agent, which they may
	// replace; Content-Type and Content-Encoding are the client's).
	Headers map[string]string
	// Timeout bounds one export, its retries and their waits included. 0:
	// no limit of its own (the caller's context still bounds it).
	Timeout time.Duration
	// Gzip compresses the request body (Content-Encoding: gzip).
	Gzip bool
	// TLS configures https (the CAs, a client certificate); nil: Go's
	// defaults, the system's CAs.
	TLS *tls.Config
	// UserAgent is the User-Agent header, e.g. "walpost/v1.2.0".
	UserAgent string
}

// Client posts spans to an OTLP/HTTP receiver. It implements
// go.opentelemetry.io/otel/exporters/otlp/otlptrace.Client; create it with
// New.
type Client struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client

	// The back-off between attempts: first, then doubled up to max, each
	// with ±25% jitter; a longer Retry-After wins.
	firstBackoff, maxBackoff time.Duration

	stopCtx context.Context // done once Stop is called
	stop    context.CancelFunc
}

// New returns the client of cfg; log (nil: none) receives what a receiver
// reports as a partial success.
func New(cfg Config, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS.Clone()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Client{
		cfg: cfg, log: log,
		http:         &http.Client{Transport: tr},
		firstBackoff: time.Second, maxBackoff: 30 * time.Second,
		stopCtx: ctx, stop: stop,
	}
}

// Start does nothing: connections are made by the first export.
func (c *Client) Start(context.Context) error { return nil }

// Stop interrupts an export in flight and closes idle connections; exports
// after it fail. It is idempotent.
func (c *Client) Stop(context.Context) error {
	c.stop()
	c.http.CloseIdleConnections()
	return nil
}

// UploadTraces posts one ExportTraceServiceRequest of rs. A 2xx response is
// success; 429, 502, 503 and 504 are retried with exponential back-off
// (Retry-After, in seconds or as a date, when it asks for longer) until
// the export's deadline (Config.Timeout, or ctx's if sooner); any other
// status, or a failed connection, is an error at once, carrying the status
// and the start of the response body.
func (c *Client) UploadTraces(ctx context.Context, rs []*tracepb.ResourceSpans) error {
	body, err := c.body(rs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.stopCtx, cancel)()
	if c.cfg.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancelT()
	}
	backoff := c.firstBackoff
	for {
		err := c.post(ctx, body)
		var re *retryableError
		if !errors.As(err, &re) {
			return err
		}
		wait := jitter(backoff)
		if re.after > wait {
			wait = re.after
		}
		backoff = min(2*backoff, c.maxBackoff)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("%w; not retried: the next attempt (in %s) would come after the export's deadline", err, wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w; not retried: %w", err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// body is the request body: ExportTraceServiceRequest's field 1
// (resource_spans, length-delimited) once per resource, the bytes
// proto.Marshal gives for the whole request; gzip-compressed with
// Config.Gzip.
func (c *Client) body(rs []*tracepb.ResourceSpans) ([]byte, error) {
	var b []byte
	for _, r := range rs {
		m, err := proto.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("OTLP/HTTP: encoding the spans: %w", err)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	if !c.cfg.Gzip {
		return b, nil
	}
	var z bytes.Buffer
	w := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(w)
	w.Reset(&z)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return z.Bytes(), nil
}

var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// maxResponse bounds what is read of a response body.
const maxResponse = 64 << 10

// post makes one attempt; a *retryableError says another may succeed.
func (c *Client) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("OTLP/HTTP export to %s: %w", c.cfg.URL.Redacted(), err)
	}
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	for k, v := range c.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if c.cfg.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error names the URL unredacted: keep its cause only.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("OTLP/HTTP export to %s: %w", c.cfg.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse)) // let the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if resp.Header.Get("Content-Type") == "application/x-protobuf" {
			c.partialSuccess(data)
		}
		return nil
	}
	err = fmt.Errorf("OTLP/HTTP export to %s: %s: %s", c.cfg.URL.Redacted(), resp.Status, bodyStart(data))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryableError{err: err, after: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return err
}

// bodyStart is the start of a response body for an error message.
func bodyStart(b []byte) string {
	const n = 256
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return "(empty body)"
	case len(b) > n:
		return strconv.Quote(string(b[:n])) + "…"
	}
	return strconv.Quote(string(b))
}

// retryableError is a response that another attempt may turn into a
// success.
type retryableError struct {
	err   error
	after time.Duration // Retry-After; 0 when absent
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date; 0
// when absent or malformed.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// jitter is d ±25%.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// partialSuccess logs the partial_success of an ExportTraceServiceResponse
// (field 1: rejected_spans, 1, int64; error_message, 2, string) when it
// reports something; the export itself succeeded.
func (c *Client) partialSuccess(resp []byte) {
	ps := lengthField(resp, 1)
	if ps == nil {
		return
	}
	var rejected int64
	var msg string
	for b := ps; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return
			}
			rejected, n = int64(v), m
		case num == 2 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return
			}
			msg, n = string(v), m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return
		}
		b = b[n:]
	}
	if rejected != 0 || msg != "" {
		c.log.Warn("otel: the OTLP receiver rejected part of an export", "rejected_spans", rejected, "message", msg)
	}
}

// lengthField returns the last value of length-delimited field num in the
// message m; nil when absent or m is malformed.
func lengthField(m []byte, num protowire.Number) []byte {
	var out []byte
	for len(m) > 0 {
		n, t, k := protowire.ConsumeTag(m)
		if k < 0 {
			return nil
		}
		m = m[k:]
		if n == num && t == protowire.BytesType {
			v, k := protowire.ConsumeBytes(m)
			if k < 0 {
				return nil
			}
			out, m = v, m[k:]
			continue
		}
		k = protowire.ConsumeFieldValue(n, t, m)
		if k < 0 {
			return nil
		}
		m = m[k:]
	}
	return out
}
