package kafka_test

import (
	"testing"

	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestClassifyNil: a nil error is no failure: the zero Kind (Transient)
// without a class, as sink.KindOf gives it, never a kind that quarantines
// the record or waits for an operator.
func TestClassifyNil(t *testing.T) {
	kind, class := kafka.Classify(nil)
	if kind != sink.Transient || class != "" {
		t.Fatalf("Classify(nil) = %s, %q; want transient, \"\"", kind, class)
	}
	if k, c := sink.KindOf(nil); k != kind || c != class {
		t.Errorf("Classify(nil) = %s, %q; sink.KindOf(nil) = %s, %q: they disagree", kind, class, k, c)
	}
}
