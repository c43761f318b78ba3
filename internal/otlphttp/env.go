package otlphttp

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// The defaults of the OTLP exporter specification for OTLP/HTTP.
const (
	// DefaultEndpoint is the base URL when neither endpoint variable is set.
	DefaultEndpoint = "http://localhost:4318"
	// TracesPath is appended to OTEL_EXPORTER_OTLP_ENDPOINT (never to
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
	TracesPath = "/v1/traces"
	// DefaultTimeout bounds an export when no timeout variable is set.
	DefaultTimeout = 10 * time.Second
)

const prefix = "OTEL_EXPORTER_OTLP_"

// env reads the OTEL_EXPORTER_OTLP_* variables: for a setting X,
// OTEL_EXPORTER_OTLP_TRACES_X wins over OTEL_EXPORTER_OTLP_X. A value is
// trimmed; an empty one is unset.
type env func(string) string

// get returns the name and value of setting x: the traces variable when
// set, else the generic one; "" when neither is.
func (e env) get(x string) (name, value string) {
	for _, n := range []string{prefix + "TRACES_" + x, prefix + x} {
		if v := strings.TrimSpace(e(n)); v != "" {
			return n, v
		}
	}
	return "", ""
}

// FromEnv builds the Config the OTLP exporter specification's variables
// describe, read through getenv (os.Getenv in walpost), each
// OTEL_EXPORTER_OTLP_TRACES_<X> winning over OTEL_EXPORTER_OTLP_<X>:
//
//   - TRACES_ENDPOINT: the URL the spans are posted to, as is (a URL without
//     a path posts to /). Else ENDPOINT, a base URL to which /v1/traces is
//     appended. Default http://localhost:4318/v1/traces. The scheme is http
//     or https and decides whether TLS is used (OTEL_EXPORTER_OTLP_INSECURE,
//     which the specification gives to gRPC, is not read).
//   - HEADERS: comma-separated key=value pairs (W3C Baggage's list syntax),
//     keys HTTP tokens, values URL-decoded; the traces variable replaces the
//     generic one as a whole.
//   - TIMEOUT: milliseconds an export may take, its retries included
//     (default 10000; 0: no limit of its own, the caller's context still
//     bounds it).
//   - COMPRESSION: gzip or none (the default).
//   - CERTIFICATE: a PEM file of the CAs that verify the collector (default
//     the system's); CLIENT_CERTIFICATE and CLIENT_KEY: PEM files of the
//     client's certificate and key, both or neither. Either needs https.
//   - PROTOCOL: http/protobuf (the default) only: walpost sends nothing
//     else.
//
// A value it cannot use is an error naming its variable and what is allowed
// (where the OTLP exporter of OpenTelemetry Go logs it and goes on with its
// default). Header values are never part of an error.
func FromEnv(getenv func(string) string) (Config, error) {
	e := env(getenv)
	var cfg Config
	var err error
	if cfg.URL, err = e.url(); err != nil {
		return Config{}, err
	}
	if cfg.Headers, err = e.headers(); err != nil {
		return Config{}, err
	}
	if cfg.Timeout, err = e.timeout(); err != nil {
		return Config{}, err
	}
	if cfg.Gzip, err = e.compression(); err != nil {
		return Config{}, err
	}
	if err := e.protocol(); err != nil {
		return Config{}, err
	}
	if cfg.TLS, err = e.tls(); err != nil {
		return Config{}, err
	}
	if cfg.TLS != nil && cfg.URL.Scheme != "https" {
		name, _ := e.get("CERTIFICATE")
		if name == "" {
			name, _ = e.get("CLIENT_CERTIFICATE")
		}
		return Config{}, fmt.Errorf("%s is set but the endpoint %s is not https", name, cfg.URL.Redacted())
	}
	return cfg, nil
}

func (e env) url() (*url.URL, error) {
	name, v := e.get("ENDPOINT")
	u, err := parseEndpoint(name, v)
	if err != nil {
		return nil, err
	}
	switch {
	case name == prefix+"TRACES_ENDPOINT":
		if u.Path == "" {
			u.Path, u.RawPath = "/", ""
		}
	default: // the generic variable or the default: a base URL
		u.Path, u.RawPath = path.Join("/", u.Path, TracesPath), ""
	}
	return u, nil
}

// parseEndpoint parses the value of variable name (the default when name
// is ""): an absolute http or https URL with a host.
func parseEndpoint(name, v string) (*url.URL, error) {
	if name == "" {
		v = DefaultEndpoint
	}
	u, err := url.Parse(v)
	if err != nil {
		// url.Error repeats the value, which may hold a password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: not a URL (%w); want http://host:port or https://host:port, with a path for the traces variable", name, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: want an http:// or https:// URL with a host (e.g. http://collector:4318)", name, u.Redacted())
	}
	return u, nil
}

func (e env) headers() (map[string]string, error) {
	name, v := e.get("HEADERS")
	if name == "" {
		return nil, nil
	}
	h := make(map[string]string)
	for i, member := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(member, "=")
		if !ok {
			return nil, fmt.Errorf("%s: member %d is not key=value; want comma-separated key=value pairs (values URL-encoded)", name, i+1)
		}
		k = strings.TrimSpace(k)
		if !isToken(k) {
			return nil, fmt.Errorf("%s: member %d: the key %q is not an HTTP header name", name, i+1, k)
		}
		dec, err := url.PathUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("%s: member %d (%s): the value is not URL-encoded correctly (a %% not followed by two hex digits)", name, i+1, k)
		}
		h[k] = strings.TrimSpace(dec)
	}
	return h, nil
}

// isToken reports whether s is an HTTP token (RFC 9110, 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func (e env) timeout() (time.Duration, error) {
	name, v := e.get("TIMEOUT")
	if name == "" {
		return DefaultTimeout, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > int64(time.Duration(1<<63-1)/time.Millisecond) {
		return 0, fmt.Errorf("%s=%q: want milliseconds, a whole number ≥ 0 (default 10000)", name, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (e env) compression() (bool, error) {
	name, v := e.get("COMPRESSION")
	switch v {
	case "", "none":
		return false, nil
	case "gzip":
		return true, nil
	}
	return false, fmt.Errorf("%s=%q: want gzip or none", name, v)
}

func (e env) protocol() error {
	name, v := e.get("PROTOCOL")
	switch v {
	case "", "http/protobuf":
		return nil
	case "grpc", "http/json":
		return fmt.Errorf("%s=%q: walpost exports http/protobuf only (unset it, or set http/protobuf)", name, v)
	}
	return fmt.Errorf("%s=%q: want http/protobuf", name, v)
}

// tls is the TLS configuration of the certificate variables; nil when none
// is set.
func (e env) tls() (*tls.Config, error) {
	caName, ca := e.get("CERTIFICATE")
	certName, cert := e.get("CLIENT_CERTIFICATE")
	keyName, key := e.get("CLIENT_KEY")
	if caName == "" && certName == "" && keyName == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caName != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caName, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in the file; want the collector's CA certificates, PEM-encoded", caName, ca)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certName != "" && keyName == "":
		return nil, fmt.Errorf("%s is set without %sCLIENT_KEY: want both (PEM files) or neither", certName, prefix)
	case keyName != "" && certName == "":
		return nil, fmt.Errorf("%s is set without %sCLIENT_CERTIFICATE: want both (PEM files) or neither", keyName, prefix)
	case certName != "":
		certPEM, err := os.ReadFile(cert)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certName, err)
		}
		keyPEM, err := os.ReadFile(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyName, err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s and %s: %w; want a PEM certificate and its PEM private key", certName, keyName, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
