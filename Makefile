# walpost — see README.md. Every target works from a fresh clone: the stack
# installs PostgreSQL from Debian and Kafka from Maven Central by itself.
SHELL := /bin/bash
GO ?= go
BIN := bin/walpost
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
STACK := scripts/stack.sh
# Fuzz budget per target inside `make test`: a count, so the outcome does
# not depend on the machine's load (scripts/fuzz.sh says why). 100000
# inputs take a few seconds per target on a 2-core machine, beside the
# build of each instrumented test binary; `make fuzz` runs for longer.
FUZZ_EXECS ?= 100000x
# Duration per target for a deliberate `make fuzz` (FUZZTIME=10m, 1h, …).
FUZZTIME ?= 1m

PG_VERSIONS ?= 14 16 17 18

.PHONY: all build run test test-pg test-failover test-debezium unit integration lint vet staticcheck fuzz fuzz-short bench nemesis soak stack-up stack-down stack-status clean image

all: build

# A static binary: walpost needs no cgo (walpost lint's parser runs as
# WebAssembly); with cgo on, pg_query_go's unused C parser would be linked.
# Built as the release and the image build it (-trimpath, no symbol table
# or DWARF: -s -w), so the benchmark measures the binary users run: the
# process maps the executable, and its size counts in the peak RSS.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)" -o $(BIN) ./cmd/walpost

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

stack-status:
	$(STACK) status

# Stack up, schema migrated, walpost in the foreground against the local
# stack (Ctrl-C drains, confirms and exits).
run: build stack-up
	. .stack/env && ./$(BIN) migrate && \
	  WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=$${WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS:-3} ./$(BIN) run

# The whole suite: vet, staticcheck, unit tests with -race and the
# allocation gates without it (scripts/allocs.sh), short fuzz runs,
# lint of our own migrations, then the integration tests against the real
# stack. The stack is stopped at the end, also on failure.
test:
	FUZZ_EXECS=$(FUZZ_EXECS) scripts/test.sh

# The core integration tests on other PostgreSQL majors: PG_VERSION=17
# (or PG_VERSION="14 18"), else each of PG_VERSIONS. Leaves the stack
# running on the last one (make stack-down stops it).
test-pg:
	scripts/test-pg.sh $(or $(PG_VERSION),$(PG_VERSIONS))

# The failover test on a fresh primary and standby (PG_VERSION 17 or 18,
# 17 by default); stops the stack and removes both data directories.
test-failover:
	scripts/test-failover.sh $(or $(PG_VERSION),17)

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck ./...

lint: vet staticcheck

# Unit tests with -race, then the allocation gates, which skip under it.
unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /integration)
	GO=$(GO) scripts/allocs.sh

integration:
	. .stack/env && WALPOST_REQUIRE_STACK=1 $(GO) test -count=1 -timeout 40m ./integration

# The byte-for-byte comparison with the real Debezium (Kafka Connect
# standalone + PostgreSQL connector + Outbox Event Router, jars from
# scripts/debezium.sh install; needs a JDK) and the cutover from Debezium
# to walpost of docs/migrate-from-debezium.md under continuous writes:
# about 15 s each once the jars are resolved.
test-debezium: stack-up
	. .stack/env && WALPOST_DEBEZIUM=1 WALPOST_REQUIRE_STACK=1 $(GO) test -count=1 -run '^(TestDebeziumBytes|TestDebeziumCutover|TestDebeziumTraceHeaders)$$' -v ./integration

# Every fuzz target for FUZZTIME each (a duration or a count).
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

# The short, count-bounded fuzz runs of `make test`.
fuzz-short:
	scripts/fuzz.sh $(FUZZ_EXECS)

bench: build stack-up
	scripts/bench.sh

# The seeded nemesis on three Kafka nodes, on stacks of its own, and its
# report bench/results/nemesis-<date>.md (+ .svg, .jsonl): SEED (1),
# SCHEDULES (50 per delivery mode), MODES, FAULTS (4 per schedule), EVENTS
# (52000 per schedule at least), PAUSE (100ms: each writer's pause),
# PARALLEL (2: a stack per mode). One
# schedule again: make nemesis SEED=17 SCHEDULES=1 MODES=exactly-once
nemesis:
	SEED="$(SEED)" SCHEDULES="$(SCHEDULES)" MODES="$(MODES)" FAULTS="$(FAULTS)" EVENTS="$(EVENTS)" PAUSE="$(PAUSE)" PARALLEL="$(PARALLEL)" GO="$(GO)" scripts/nemesis.sh

# The single-broker nemesis loop until interrupted (Ctrl-C), printing a running tally.
soak: stack-up
	. .stack/env && WALPOST_SOAK=1 WALPOST_REQUIRE_STACK=1 $(GO) test -count=1 -run TestSoak -timeout 0 -v ./integration

clean:
	rm -rf bin

# The container image without a container engine (deploy/image, docs/image.md):
# the static binary for linux/amd64 and linux/arm64 in an OCI image index,
# written to dist/image/ as an OCI layout (oci/), its archive
# (walpost.oci.tar: podman load, docker load on Docker 25+) and a `docker
# save` archive per platform (walpost-linux-<arch>.docker.tar).
image:
	cd deploy && GO=$(GO) $(GO) run ./image -root .. -out ../dist/image -version "$(VERSION)" -commit "$(COMMIT)" -date "$(DATE)"

# Release archives for linux/darwin × amd64/arm64 and checksums into dist/,
# locally and without publishing (.goreleaser.yaml).
# In a checkout without a git remote goreleaser's snapshot mode drops all
# git information (commit "none" in the version and in --version); the
# project's URL is given to git for this command only (GIT_CONFIG_*, never
# written to the repository's config) so it reads the real commit, date
# and tags.
GORELEASER_VERSION ?= v2.15.1
RELEASE_REMOTE_ENV = $(if $(shell git remote 2>/dev/null),,GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/walpost/walpost.git)
.PHONY: release-snapshot
release-snapshot:
	$(RELEASE_REMOTE_ENV) $(GO) run github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION) release --snapshot --clean
