package replication

import (
	"strings"
	"testing"
	"time"
)

// TestReplicationConfigForcesRendering: whatever the URL or PGTZ says, the
// startup packet carries exactly one DateStyle (ISO) and one TimeZone (UTC),
// in any spelling PostgreSQL would match.
func TestReplicationConfigForcesRendering(t *testing.T) {
	for _, tt := range []struct{ url, pgtz string }{
		{"postgres://u@h/db?timezone=America/New_York&datestyle=SQL", ""},
		{"postgres://u@h/db?TIMEZONE=Europe/Amsterdam&DateStyle=German", ""},
		{"postgres://u@h/db?TimeZone=Asia/Kolkata&DATESTYLE=Postgres,MDY", ""},
		{"postgres://u@h/db", "Pacific/Chatham"},
		{"host=h user=u timezone=America/New_York datestyle=SQL", ""},
	} {
		t.Run(tt.url+" PGTZ="+tt.pgtz, func(t *testing.T) {
			t.Setenv("PGTZ", tt.pgtz)
			cfg, err := replicationConfig(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for k, v := range cfg.RuntimeParams {
				got[strings.ToLower(k)] = append(got[strings.ToLower(k)], k+"="+v)
			}
			for name, want := range map[string]string{"timezone": "TimeZone=UTC", "datestyle": "DateStyle=ISO"} {
				if len(got[name]) != 1 || got[name][0] != want {
					t.Errorf("startup parameters %s: %q, want exactly [%s]", name, got[name], want)
				}
			}
			if cfg.RuntimeParams["replication"] != "database" {
				t.Errorf("replication = %q, want database", cfg.RuntimeParams["replication"])
			}
		})
	}
}

// TestReceiveTimeoutFor: the receive timeout stays above the server's
// wal_sender_timeout (which bounds how long a live server replaying an
// unrelated transaction is silent), never below what is configured, and
// is left alone when the server never times out (0).
func TestReceiveTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		configured, sender, want time.Duration
	}{
		{30 * time.Second, 90 * time.Second, 90*time.Second + SenderTimeoutMargin},
		{30 * time.Second, 60 * time.Second, 60*time.Second + SenderTimeoutMargin},
		{30 * time.Second, 20 * time.Second, 30 * time.Second},
		{2 * time.Minute, 90 * time.Second, 2 * time.Minute},
		{30 * time.Second, 0, 30 * time.Second},
		{2 * time.Second, 500 * time.Millisecond, 500*time.Millisecond + SenderTimeoutMargin},
	} {
		if got := ReceiveTimeoutFor(tc.configured, tc.sender); got != tc.want {
			t.Errorf("ReceiveTimeoutFor(%s, wal_sender_timeout %s) = %s, want %s", tc.configured, tc.sender, got, tc.want)
		}
	}
}

// TestStatusIntervalFor: the status interval stays at most half the
// server's wal_sender_timeout; without a timeout the configured one stays.
func TestStatusIntervalFor(t *testing.T) {
	for _, tc := range []struct{ configured, sender, want time.Duration }{
		{10 * time.Second, 60 * time.Second, 10 * time.Second},
		{10 * time.Second, 20 * time.Second, 10 * time.Second},
		{10 * time.Second, 5 * time.Second, 2500 * time.Millisecond},
		{time.Second, 5 * time.Second, time.Second},
		{10 * time.Second, 0, 10 * time.Second},
	} {
		if got := StatusIntervalFor(tc.configured, tc.sender); got != tc.want {
			t.Errorf("StatusIntervalFor(%s, %s) = %s, want %s", tc.configured, tc.sender, got, tc.want)
		}
	}
}
