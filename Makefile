# walpost — see README.md. Every target works from a fresh clone: the stack
# installs PostgreSQL from Debian and Kafka from Maven Central by itself.
SHELL := /bin/bash
GO ?= go
BIN := bin/walpost
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
STACK := scripts/stack.sh
# Fuzz time per target inside `make test`.
FUZZTIME ?= 10s

.PHONY: all build run test unit integration lint vet staticcheck fuzz bench soak stack-up stack-down stack-status clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/walpost

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

# The whole suite: vet, staticcheck, unit tests with -race, short fuzz runs,
# lint of our own migrations, then the integration tests against the real
# stack. The stack is stopped at the end, also on failure.
test:
	scripts/test.sh

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck ./...

lint: vet staticcheck

unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /integration)

integration:
	. .stack/env && WALPOST_REQUIRE_STACK=1 $(GO) test -count=1 -timeout 40m ./integration

fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./replication
	$(GO) test -run='^$$' -fuzz='^FuzzInsert$$' -fuzztime=$(FUZZTIME) ./replication
	$(GO) test -run='^$$' -fuzz='^FuzzAppendRFC3339$$' -fuzztime=$(FUZZTIME) ./outbox
	$(GO) test -run='^$$' -fuzz=FuzzLint -fuzztime=$(FUZZTIME) ./lint

bench: build stack-up
	scripts/bench.sh

# The nemesis loop until interrupted (Ctrl-C), printing a running tally.
soak: stack-up
	. .stack/env && WALPOST_SOAK=1 WALPOST_REQUIRE_STACK=1 $(GO) test -count=1 -run TestSoak -timeout 0 -v ./integration

clean:
	rm -rf bin
