package kafka

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSTS answers AssumeRoleWithWebIdentity for role with credentials that
// expire at exp, counting the calls; any other request is refused as STS
// refuses a bad token.
func fakeSTS(t *testing.T, role, token string, exp time.Time, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if err := r.ParseForm(); err != nil || r.Form.Get("Action") != "AssumeRoleWithWebIdentity" ||
			r.Form.Get("RoleArn") != role || r.Form.Get("WebIdentityToken") != token {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>no</Message></Error></ErrorResponse>`))
			return
		}
		_, _ = w.Write([]byte(`<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>
<AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>secret</SecretAccessKey><SessionToken>session</SessionToken>
<Expiration>` + exp.UTC().Format(time.RFC3339) + `</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAWSWebIdentity: with no static AWS credentials, AWS_MSK_IAM takes
// the ServiceAccount's role (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE):
// the token is exchanged at STS, the credentials are kept until five
// minutes before they expire, and a refused token is an error naming the
// role's trust policy.
func TestAWSWebIdentity(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("jwt-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	const role = "arn:aws:iam::123456789012:role/walpost"
	srv := fakeSTS(t, role, "jwt-1", time.Now().Add(time.Hour), &calls)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_ROLE_ARN", role)
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", file)
	t.Setenv("AWS_ENDPOINT_URL_STS", srv.URL)
	creds := awsCredentials(SASL{Mechanism: "AWS_MSK_IAM"})
	for range 3 {
		a, err := creds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if a.AccessKey != "ASIAEXAMPLE" || a.SecretKey != "secret" || a.SessionToken != "session" {
			t.Fatalf("credentials %+v, want STS's", a)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d STS calls for 3 connections, want 1 (credentials kept until they near expiry)", n)
	}
	// A token STS refuses: the error says where to look.
	if err := os.WriteFile(file, []byte("jwt-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := awsCredentials(SASL{Mechanism: "AWS_MSK_IAM"})
	if _, err := bad(context.Background()); err == nil || !strings.Contains(err.Error(), "trust policy") || !strings.Contains(err.Error(), "InvalidIdentityToken") {
		t.Fatalf("refused token: %v, want an error naming the trust policy", err)
	}
	// Static credentials win over the web identity.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIA")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	before := calls.Load()
	if a, err := awsCredentials(SASL{Mechanism: "AWS_MSK_IAM"})(context.Background()); err != nil || a.AccessKey != "AKIA" || calls.Load() != before {
		t.Fatalf("static credentials: %+v, %v; STS calls %d → %d", a, err, before, calls.Load())
	}
}

// TestAWSWebIdentityRefreshes: credentials within five minutes of their
// expiry are exchanged again, with the token file read again.
func TestAWSWebIdentityRefreshes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("jwt"), 0o600); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := fakeSTS(t, "r", "jwt", time.Now().Add(4*time.Minute), &calls)
	w := &webIdentity{role: "r", tokenFile: file, endpoint: srv.URL, session: "walpost", client: srv.Client(), now: time.Now}
	for range 2 {
		if _, err := w.auth(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d STS calls for credentials 4 minutes from expiry, want 2 (each refreshed)", n)
	}
}
