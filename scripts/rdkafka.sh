#!/usr/bin/env bash
# librdkafka, the second Kafka client of the tests: a Python virtual
# environment with confluent-kafka (stack/rdkafka/requirements.txt, the
# wheel bundles librdkafka) under .stack/rdkafka, and a consumer that
# prints what it reads (stack/rdkafka/consume.py), and a producer of keyed
# records with one of librdkafka's partitioners (stack/rdkafka/produce.py).
#
# Usage: scripts/rdkafka.sh install          create the environment (idempotent)
#        scripts/rdkafka.sh consume ARGS...  install, then run consume.py ARGS
#        scripts/rdkafka.sh produce ARGS...  install, then run produce.py ARGS
#        scripts/rdkafka.sh clean            remove .stack/rdkafka
# Environment: PYTHON (python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE=$ROOT/.stack
SRC=$ROOT/stack/rdkafka
DIR=$STATE/rdkafka
PYTHON=${PYTHON:-python3}

die() { printf 'rdkafka: ERROR: %s\n' "$*" >&2; exit 1; }

install() {
	mkdir -p "$STATE"
	exec 8>"$STATE/.rdkafka.lock"
	flock -w 600 8 || die "could not lock $STATE/.rdkafka.lock (another scripts/rdkafka.sh install still running?)"
	local stamp=$DIR/.complete
	if [[ -f $stamp ]] && cmp -s "$stamp" "$SRC/requirements.txt"; then
		exec 8>&- # the lock guards the install only, not a consumer run after it
		return 0
	fi
	command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.9 or newer, or set PYTHON"
	rm -rf "$DIR"
	"$PYTHON" -m venv "$DIR" || die "$PYTHON -m venv failed: install the venv module (Debian: apt-get install python3-venv)"
	"$DIR/bin/pip" install --quiet --disable-pip-version-check -r "$SRC/requirements.txt" ||
		die "pip could not install $SRC/requirements.txt (network, or a Python without a matching wheel)"
	"$DIR/bin/python" -c 'import confluent_kafka; print("rdkafka: confluent-kafka", confluent_kafka.__version__, "librdkafka", confluent_kafka.libversion()[0])' >&2
	cp "$SRC/requirements.txt" "$stamp"
	exec 8>&-
}

case ${1:-} in
install) install ;;
consume)
	shift
	install
	exec "$DIR/bin/python" "$SRC/consume.py" "$@"
	;;
produce)
	shift
	install
	exec "$DIR/bin/python" "$SRC/produce.py" "$@"
	;;
clean) rm -rf "$DIR" ;;
*) die "usage: scripts/rdkafka.sh install|consume ARGS...|produce ARGS...|clean" ;;
esac
