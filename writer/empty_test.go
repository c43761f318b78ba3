package writer

import (
	"context"
	"testing"
)

// TestEmptyBatchSendsNothing: with no events there is no statement, so a
// nil transaction is never touched.
func TestEmptyBatchSendsNothing(t *testing.T) {
	if err := InsertBatch(context.Background(), nil, nil); err != nil {
		t.Fatalf("InsertBatch of nothing: %v", err)
	}
	if err := InsertBatchSQL(context.Background(), nil, []Event{}); err != nil {
		t.Fatalf("InsertBatchSQL of nothing: %v", err)
	}
}
