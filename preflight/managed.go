package preflight

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/replication"
)

// platform is the managed PostgreSQL service a server looks like, for the
// fixes wal_level and replication suggest: such services refuse ALTER
// SYSTEM and ALTER ROLE … REPLICATION, or want their own flag.
type platform int

const (
	selfManaged   platform = iota
	rds                    // Amazon RDS or Aurora PostgreSQL
	cloudSQL               // Google Cloud SQL
	azureSingle            // Azure Database for PostgreSQL, Single Server
	azureFlexible          // Azure Database for PostgreSQL, Flexible Server
)

// detectPlatform names the service of m: a setting only that service
// defines, or RDS's rds_replication role.
func detectPlatform(m replication.Managed) platform {
	switch {
	case m.RDSLogicalReplication != nil || m.RDSReplicationRole:
		return rds
	case m.CloudSQLLogicalDecoding != nil:
		return cloudSQL
	case m.AzureReplicationSupport != nil:
		return azureSingle
	case m.AzureExtensions != nil:
		return azureFlexible
	}
	return selfManaged
}

// walLevelFix is how to make wal_level logical on p.
func walLevelFix(p platform) string {
	switch p {
	case rds:
		return "on RDS/Aurora set rds.logical_replication = 1 in the DB (Aurora: cluster) parameter group and reboot the instance (wal_level follows it)"
	case cloudSQL:
		return "on Cloud SQL set the flag cloudsql.logical_decoding = on (gcloud sql instances patch INSTANCE --database-flags=cloudsql.logical_decoding=on; the instance restarts)"
	case azureSingle:
		return "on Azure Single Server set azure.replication_support = LOGICAL (az postgres server configuration set --name azure.replication_support --value logical) and restart the server"
	case azureFlexible:
		return "on Azure Flexible Server set the server parameter wal_level = logical (az postgres flexible-server parameter set --name wal_level --value logical) and restart the server"
	}
	return "set wal_level = logical in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL"
}

// replicationFix is how to let user replicate on p.
func replicationFix(p platform, user string) string {
	role := pgx.Identifier{user}.Sanitize()
	switch p {
	case rds:
		return fmt.Sprintf("on RDS/Aurora grant the rds_replication role (as a member of rds_superuser): GRANT rds_replication TO %s", role)
	case cloudSQL:
		return fmt.Sprintf("on Cloud SQL, as a cloudsqlsuperuser member: ALTER ROLE %s REPLICATION", role)
	case azureSingle, azureFlexible:
		return fmt.Sprintf("on Azure, as the server admin (azure_pg_admin): ALTER ROLE %s REPLICATION", role)
	}
	return fmt.Sprintf("ALTER ROLE %s REPLICATION", role)
}
