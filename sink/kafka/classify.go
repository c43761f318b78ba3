package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink"
)

// ErrRecordTooLarge: the record exceeds its topic's max.message.bytes. The
// size pre-check reports it before the record is sent, without a broker
// round trip and without touching its neighbours.
var ErrRecordTooLarge = fmt.Errorf("record larger than the topic's max.message.bytes: %w", kerr.MessageTooLarge)

// RecordClasses are the error classes Classify gives record-level
// failures (sink.Record, quarantined after poison.max_attempts) and
// unknown ones ("UNKNOWN" and Kafka's own names): the poison counter is
// exported at 0 for each, so an alert sees the first quarantine.
var RecordClasses = []string{
	"INVALID_HEADERS", "EMPTY_KEY", "NULL_PAYLOAD", "BINARY_TEXT", "LIMIT_RAISED", ClassSchema,
	kerr.MessageTooLarge.Message, kerr.RecordListTooLarge.Message, kerr.InvalidRecord.Message,
	kerr.CorruptMessage.Message, kerr.InvalidTimestamp.Message, kerr.PolicyViolation.Message, "UNKNOWN",
}

// Classify sorts a produce failure by what walpost does with it (see
// sink.Kind) and names its class (the Kafka error
// name, or walpost's own for records it cannot build).
//
// A nil err is no failure: Classify(nil) is (sink.Transient, ""), the zero
// Kind without a class, as sink.KindOf(nil). It is never Record (nothing
// is quarantined) nor Destination or Unknown (nothing waits for an
// operator). Callers classify failed outcomes only.
func Classify(err error) (sink.Kind, string) {
	switch {
	case err == nil:
		return sink.Transient, ""
	case errors.Is(err, ErrInvalidHeaders):
		return sink.Record, "INVALID_HEADERS"
	case errors.Is(err, ErrEmptyKey):
		return sink.Record, "EMPTY_KEY"
	case errors.Is(err, ErrNullPayload):
		return sink.Record, "NULL_PAYLOAD"
	case errors.Is(err, ErrBinaryText):
		return sink.Record, "BINARY_TEXT"
	case errors.Is(err, ErrLimitRaised):
		return sink.Record, "LIMIT_RAISED"
	case errors.Is(err, ErrSchema):
		return sink.Record, ClassSchema
	case errors.Is(err, ErrSchemaRegistry):
		return sink.Transient, ClassSchemaRegistry
	case errors.Is(err, ErrSchemaSubject):
		return sink.Destination, ClassSchemaSubject
	case errors.Is(err, ErrHeldBehind):
		return sink.Transient, "HELD_BEHIND"
	case errors.Is(err, ErrLimitUnknown) && !refusesDescribe(err):
		return sink.Transient, "DESCRIBE_TOPIC"
	case errors.Is(err, kgo.ErrClientClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries):
		return sink.Transient, "CLIENT"
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
			kerr.InvalidTimestamp, kerr.PolicyViolation:
			return sink.Record, ke.Message
		case kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.UnknownTopicOrPartition,
			kerr.UnknownTopicID, kerr.TransactionalIDAuthorizationFailed, kerr.SaslAuthenticationFailed,
			kerr.InvalidTopicException:
			return sink.Destination, ke.Message
		case kerr.InvalidProducerEpoch:
			// A transaction the broker aborted (timeout) or a producer
			// fenced: the session ends and the next one's producer
			// resumes from the checkpoint, unless the abort says
			// PRODUCER_FENCED (see Fenced).
			return sink.Transient, ke.Message
		}
		if ke.Retriable {
			return sink.Transient, ke.Message
		}
		return sink.Unknown, ke.Message
	}
	return sink.Unknown, "UNKNOWN"
}

// refusesDescribe says whether a failed topic description is an
// authorization failure (a destination failure to fix, not a transient
// one).
func refusesDescribe(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.SaslAuthenticationFailed)
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
