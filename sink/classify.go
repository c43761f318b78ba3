package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrRecordTooLarge: the record exceeds its topic's max.message.bytes. The
// size pre-check reports it before the record is sent, without a broker
// round trip and without touching its neighbours.
var ErrRecordTooLarge = fmt.Errorf("record larger than the topic's max.message.bytes: %w", kerr.MessageTooLarge)

// Kind says what a produce failure means for the event (DESIGN §4).
type Kind int

const (
	// Transient failures (network, leadership, timeouts) are retried
	// inside the client; one that reaches a callback ends the session,
	// which resumes from the slot. Never poisoned.
	Transient Kind = iota
	// Record failures belong to one record (too large, invalid, policy):
	// isolated, retried up to poison.max_attempts, then quarantined.
	Record
	// Destination failures (authorization, unknown topic) stop
	// forwarding with a clear error until fixed; never poisoned, never
	// confirmed past.
	Destination
	// Unknown failures are treated like destination failures.
	Unknown
)

func (k Kind) String() string {
	switch k {
	case Transient:
		return "transient"
	case Record:
		return "record"
	case Destination:
		return "destination"
	default:
		return "unknown"
	}
}

// Classify sorts a produce failure and names its class (the Kafka error
// name, or walpost's own for records it cannot build).
func Classify(err error) (Kind, string) {
	switch {
	case err == nil:
		return Transient, ""
	case errors.Is(err, ErrInvalidHeaders):
		return Record, "INVALID_HEADERS"
	case errors.Is(err, ErrEmptyKey):
		return Record, "EMPTY_KEY"
	case errors.Is(err, ErrNullPayload):
		return Record, "NULL_PAYLOAD"
	case errors.Is(err, kgo.ErrClientClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries):
		return Transient, "CLIENT"
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
			kerr.InvalidTimestamp, kerr.PolicyViolation:
			return Record, ke.Message
		case kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.UnknownTopicOrPartition,
			kerr.UnknownTopicID, kerr.TransactionalIDAuthorizationFailed, kerr.SaslAuthenticationFailed,
			kerr.InvalidTopicException:
			return Destination, ke.Message
		}
		if ke.Retriable {
			return Transient, ke.Message
		}
		return Unknown, ke.Message
	}
	return Unknown, "UNKNOWN"
}

// Explain adds what to do to a destination failure.
func Explain(err error, topic string) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return err
	}
	switch ke {
	case kerr.TopicAuthorizationFailed:
		return fmt.Errorf("%w: walpost may not write to topic %q: grant the principal WRITE (and DESCRIBE) on the topic, e.g. kafka-acls.sh --add --allow-principal User:<p> --operation Write --topic %s", err, topic, topic)
	case kerr.ClusterAuthorizationFailed:
		return fmt.Errorf("%w: the idempotent producer needs IDEMPOTENT_WRITE on the cluster (Kafka < 3.0) or WRITE on the topic: grant it to walpost's principal", err)
	case kerr.UnknownTopicOrPartition, kerr.UnknownTopicID:
		return fmt.Errorf("%w: topic %q does not exist: create it, or fix the row's topic column / kafka.topic", err, topic)
	}
	return err
}
