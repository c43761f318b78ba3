package preflight

import (
	"strings"
	"testing"

	"github.com/walpost/walpost/replication"
)

// TestManagedHints: a server that defines a managed service's own setting
// (or RDS's rds_replication role) gets that service's fix for wal_level
// and for the replication privilege instead of ALTER SYSTEM and ALTER
// ROLE … REPLICATION.
func TestManagedHints(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tt := range []struct {
		name      string
		m         replication.Managed
		want      platform
		walLevel  []string
		roleFix   []string
		notInRole string
	}{
		{"self-managed", replication.Managed{}, selfManaged,
			[]string{"ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL"}, []string{`ALTER ROLE "app user" REPLICATION`}, "rds_replication"},
		{"rds by its setting", replication.Managed{RDSLogicalReplication: s("off")}, rds,
			[]string{"rds.logical_replication = 1", "parameter group", "reboot"}, []string{`GRANT rds_replication TO "app user"`}, "ALTER ROLE"},
		{"aurora by the role alone", replication.Managed{RDSReplicationRole: true}, rds,
			[]string{"rds.logical_replication = 1"}, []string{"GRANT rds_replication"}, "ALTER ROLE"},
		{"cloud sql", replication.Managed{CloudSQLLogicalDecoding: s("off")}, cloudSQL,
			[]string{"cloudsql.logical_decoding=on", "gcloud sql instances patch"}, []string{"cloudsqlsuperuser", `ALTER ROLE "app user" REPLICATION`}, "rds_replication"},
		{"azure single server", replication.Managed{AzureReplicationSupport: s("REPLICA")}, azureSingle,
			[]string{"azure.replication_support = LOGICAL"}, []string{"azure_pg_admin", `ALTER ROLE "app user" REPLICATION`}, "rds_replication"},
		{"azure flexible server", replication.Managed{AzureExtensions: s("")}, azureFlexible,
			[]string{"flexible-server parameter set --name wal_level --value logical"}, []string{"azure_pg_admin"}, "ALTER SYSTEM"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := detectPlatform(tt.m)
			if p != tt.want {
				t.Fatalf("platform %d, want %d", p, tt.want)
			}
			wl, rf := walLevelFix(p), replicationFix(p, "app user")
			for _, w := range tt.walLevel {
				if !strings.Contains(wl, w) {
					t.Errorf("wal_level fix %q lacks %q", wl, w)
				}
			}
			for _, w := range tt.roleFix {
				if !strings.Contains(rf, w) {
					t.Errorf("replication fix %q lacks %q", rf, w)
				}
			}
			if p != selfManaged && strings.Contains(wl, "ALTER SYSTEM") {
				t.Errorf("managed service told to ALTER SYSTEM: %q", wl)
			}
			if tt.notInRole != "" && strings.Contains(rf+" "+wl, tt.notInRole) {
				t.Errorf("fixes %q / %q mention %q", wl, rf, tt.notInRole)
			}
		})
	}
}
