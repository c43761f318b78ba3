package replication

import (
	"strings"
	"testing"
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
