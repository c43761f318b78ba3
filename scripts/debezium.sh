#!/usr/bin/env bash
# Debezium for the drain benchmark: Kafka Connect standalone with Debezium's
# PostgreSQL connector and Outbox Event Router, resolved from Maven Central
# (stack/debezium/pom.xml). No Docker, no Connect distribution: one flat
# classpath of jars, which bench/drain starts as
#   java -cp "<libs>/*" org.apache.kafka.connect.cli.ConnectStandalone ...
# See DESIGN.md, Running Kafka without Docker, and bench/drain/debezium.go.
#
# Usage: scripts/debezium.sh <command>
#   install   resolve the jars into .stack/debezium/libs (idempotent: skipped
#             while the pom is unchanged) and print that directory as the
#             last line on stdout; OpenTelemetry's SDK goes beside it into
#             .stack/debezium/otel (stack/debezium/otel/pom.xml), which only
#             TestDebeziumTraceHeaders adds to Connect's classpath
#   clean     remove .stack/debezium
#
# Progress goes to stderr; stdout is reserved for the result.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)
STATE=$ROOT/.stack

D_SRC=$ROOT/stack/debezium  # pom.xml, log4j2.properties
D_DIR=$STATE/debezium
D_LIBS=$D_DIR/libs
D_OTEL=$D_DIR/otel

log() { printf 'debezium: %s\n' "$*" >&2; }
die() { printf 'debezium: ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
is_root() { [[ $(id -u) -eq 0 ]]; }

lock() {
	mkdir -p "$D_DIR"
	exec 8>"$D_DIR/.lock"
	flock -w 900 8 || die "could not lock $D_DIR/.lock (another debezium.sh still running?)"
}

# quiet CMD...: run CMD with its output captured; show the output only on failure.
quiet() {
	local out rc=0
	out=$(mktemp)
	"$@" </dev/null >"$out" 2>&1 8>&- || rc=$?
	if ((rc != 0)); then
		sed 's/^/    /' "$out" >&2
	fi
	rm -f "$out"
	return "$rc"
}

ensure_tools() {
	command -v mvn >/dev/null && command -v java >/dev/null && return 0
	is_root || die "mvn and a JDK are needed to resolve and run Kafka Connect; install maven and openjdk-17-jdk-headless"
	log "installing a JDK and Maven with apt-get"
	(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jdk-headless maven) </dev/null >&2 8>&- ||
		die "apt-get install openjdk-17-jdk-headless maven failed"
}

# Everything runs from one class loader, so a class present in two jars is
# loaded from whichever comes first. Fail on any such class except the
# known, harmless overlaps, which the Kafka distribution's libs/ has too:
# the javax/jakarta activation API next to its implementation (JAXB for the
# REST server) and io.debezium.Module, a version holder every Debezium
# module carries.
check_classes() {
	local dir=$1 j dups
	if ! command -v unzip >/dev/null; then
		log "unzip not found; skipping the duplicate-class check"
		return 0
	fi
	dups=$(
		for j in "$dir"/*.jar; do
			unzip -Z1 "$j" 2>/dev/null | grep '\.class$' | grep -v -e '^META-INF/' -e 'module-info\.class$' |
				sed "s|\$| $(basename "$j")|"
		done | sort | awk '
			$1 ~ /^(javax|jakarta)\/activation\// || $1 ~ /^com\/sun\/activation\// || $1 == "io/debezium/Module.class" { next }
			$1 == prev { print prevjar " " $2 " (" $1 ")" }
			{ prev = $1; prevjar = $2 }' | sort -u -k1,2
	)
	if [[ -n $dups ]]; then
		printf '%s\n' "$dups" | head -n 20 | sed 's/^/    /' >&2
		die "jars in $dir define the same classes (listed above); exclude one side in stack/debezium/pom.xml"
	fi
}

cmd_install() {
	local stamp=$D_LIBS/.walpost-debezium-complete want j t0
	want=$(sha256sum "$D_SRC/pom.xml" | cut -d" " -f1)
	lock
	if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
		log "Kafka Connect + Debezium jars already resolved in $D_LIBS"
	else
		ensure_tools
		t0=$(now)
		log "resolving Kafka Connect + Debezium jars with Maven into $D_LIBS (cached in ~/.m2 afterwards)"
		rm -rf "$D_LIBS.tmp"
		quiet mvn -B -q -f "$D_SRC/pom.xml" dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$D_LIBS.tmp" ||
			die "mvn dependency:copy-dependencies failed"
		for j in 'connect-runtime-*.jar' 'kafka-clients-*.jar' 'debezium-connector-postgres-*.jar' \
			'debezium-connect-plugins-*.jar' 'postgresql-*.jar' 'log4j-core-*.jar' 'log4j-slf4j*-impl-*.jar'; do
			compgen -G "$D_LIBS.tmp/$j" >/dev/null || die "resolved libs lack $j (check stack/debezium/pom.xml)"
		done
		check_classes "$D_LIBS.tmp"
		rm -rf "$D_LIBS"
		mv "$D_LIBS.tmp" "$D_LIBS"
		printf '%s\n' "$want" >"$stamp"
		log "resolved $(compgen -G "$D_LIBS/*.jar" | wc -l) jars ($(elapsed "$t0"))"
	fi
	install_otel
	# The logging configuration travels with the jars (not on the classpath:
	# the "<libs>/*" wildcard only picks up .jar files); refreshed every time.
	cp "$D_SRC/log4j2.properties" "$D_LIBS/log4j2.properties.tmp"
	mv "$D_LIBS/log4j2.properties.tmp" "$D_LIBS/log4j2.properties"
	printf '%s\n' "$D_LIBS"
}

# install_otel resolves OpenTelemetry's SDK with its autoconfiguration into
# $D_OTEL (skipped while its pom is unchanged): Debezium's tracing writes
# the trace headers only when it finds OpenTelemetry on the classpath.
install_otel() {
	local stamp=$D_OTEL/.walpost-otel-complete want t0
	want=$(sha256sum "$D_SRC/otel/pom.xml" | cut -d" " -f1)
	if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
		return 0
	fi
	t0=$(now)
	log "resolving OpenTelemetry's SDK with Maven into $D_OTEL"
	rm -rf "$D_OTEL.tmp"
	quiet mvn -B -q -f "$D_SRC/otel/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$D_OTEL.tmp" ||
		die "mvn dependency:copy-dependencies failed (stack/debezium/otel/pom.xml)"
	compgen -G "$D_OTEL.tmp/opentelemetry-sdk-extension-autoconfigure-*.jar" >/dev/null ||
		die "resolved OpenTelemetry jars lack opentelemetry-sdk-extension-autoconfigure"
	rm -rf "$D_OTEL"
	mv "$D_OTEL.tmp" "$D_OTEL"
	printf '%s\n' "$want" >"$stamp"
	log "resolved $(compgen -G "$D_OTEL/*.jar" | wc -l) OpenTelemetry jars ($(elapsed "$t0"))"
}

cmd_clean() {
	lock
	log "removing $D_DIR"
	rm -rf "$D_DIR"
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }

main() {
	local cmd=${1:-}
	case $cmd in
	install) cmd_install ;;
	clean) cmd_clean ;;
	-h | --help | help) usage ;;
	*)
		usage
		die "unknown command '${cmd}'"
		;;
	esac
}

main "$@"
