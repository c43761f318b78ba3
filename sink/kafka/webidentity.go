package kafka

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl/aws"
)

// webIdentity exchanges a Kubernetes ServiceAccount token for temporary
// AWS credentials (IRSA on EKS, and any OIDC web identity): the
// environment AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, as EKS's pod
// identity webhook sets them, and STS AssumeRoleWithWebIdentity, which
// needs no signature. The credentials are kept until five minutes before
// they expire; the token file is read again at every exchange (the
// kubelet rotates it). STS is AWS_ENDPOINT_URL_STS when set, else the
// regional endpoint of AWS_REGION (or AWS_DEFAULT_REGION), else the
// global one.
type webIdentity struct {
	role, tokenFile, endpoint, session string
	client                             *http.Client
	now                                func() time.Time

	mu      sync.Mutex
	cached  aws.Auth
	expires time.Time
}

// webIdentityFromEnv returns the web identity of the environment, or nil
// when AWS_ROLE_ARN or AWS_WEB_IDENTITY_TOKEN_FILE is unset.
func webIdentityFromEnv() *webIdentity {
	role, file := os.Getenv("AWS_ROLE_ARN"), os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE")
	if role == "" || file == "" {
		return nil
	}
	endpoint := os.Getenv("AWS_ENDPOINT_URL_STS")
	if endpoint == "" {
		endpoint = "https://sts.amazonaws.com/"
		region := os.Getenv("AWS_REGION")
		if region == "" {
			region = os.Getenv("AWS_DEFAULT_REGION")
		}
		if region != "" {
			endpoint = "https://sts." + region + ".amazonaws.com/"
		}
	}
	session := os.Getenv("AWS_ROLE_SESSION_NAME")
	if session == "" {
		session = "walpost"
	}
	return &webIdentity{role: role, tokenFile: file, endpoint: endpoint, session: session,
		client: &http.Client{Timeout: 10 * time.Second}, now: time.Now}
}

// auth returns credentials valid for at least five more minutes.
func (w *webIdentity) auth(ctx context.Context) (aws.Auth, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cached.AccessKey != "" && w.now().Before(w.expires.Add(-5*time.Minute)) {
		return w.cached, nil
	}
	token, err := os.ReadFile(w.tokenFile)
	if err != nil {
		return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: read the web identity token (AWS_WEB_IDENTITY_TOKEN_FILE): %w", err)
	}
	form := url.Values{
		"Action": {"AssumeRoleWithWebIdentity"}, "Version": {"2011-06-15"},
		"RoleArn": {w.role}, "RoleSessionName": {w.session},
		"WebIdentityToken": {strings.TrimSpace(string(token))},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: AWS_ENDPOINT_URL_STS: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := w.client.Do(req)
	if err != nil {
		return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: assume role %s with the web identity token: %w", w.role, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: assume role %s: %w", w.role, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    string `xml:"Error>Code"`
			Message string `xml:"Error>Message"`
		}
		_ = xml.Unmarshal(body, &e)
		return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: STS refused to assume role %s with the web identity token: HTTP %d %s: %s (check the role's trust policy for the ServiceAccount, and AWS_ROLE_ARN)", w.role, resp.StatusCode, e.Code, e.Message)
	}
	var ok struct {
		Creds struct {
			AccessKeyID     string    `xml:"AccessKeyId"`
			SecretAccessKey string    `xml:"SecretAccessKey"`
			SessionToken    string    `xml:"SessionToken"`
			Expiration      time.Time `xml:"Expiration"`
		} `xml:"AssumeRoleWithWebIdentityResult>Credentials"`
	}
	if err := xml.Unmarshal(body, &ok); err != nil || ok.Creds.AccessKeyID == "" || ok.Creds.SecretAccessKey == "" {
		return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: assume role %s: an STS answer without credentials (%v)", w.role, err)
	}
	w.cached = aws.Auth{AccessKey: ok.Creds.AccessKeyID, SecretKey: ok.Creds.SecretAccessKey, SessionToken: ok.Creds.SessionToken, UserAgent: "walpost"}
	w.expires = ok.Creds.Expiration
	return w.cached, nil
}
