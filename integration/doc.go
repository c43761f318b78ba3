// Package integration holds walpost's end-to-end tests against a real
// PostgreSQL and a real Kafka broker (started by scripts/stack.sh), and
// nothing else: the delivery validator they judge with is package verify.
// Without the stack (WALPOST_POSTGRES_URL, WALPOST_KAFKA_BROKERS from
// .stack/env) the tests skip, or fail under WALPOST_REQUIRE_STACK=1.
package integration
