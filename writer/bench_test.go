package writer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/walpost/walpost/writer"
)

// benchEvents returns n events with fresh keys and a payload of about 100
// bytes, as an application's.
func benchEvents(n int) []writer.Event {
	evs := make([]writer.Event, n)
	for i := range evs {
		evs[i] = writer.Event{Key: writer.NewKey(), EventType: "order.created", PartitionKey: fmt.Sprintf("customer-%d", i%10),
			Payload: fmt.Appendf(nil, `{"order": %d, "customer": "customer-%d", "total": {"amount": 1999, "currency": "EUR"}}`, i, i%10)}
	}
	return evs
}

var benchSizes = []int{10, 100, 1000}

// benchTx runs b.N transactions of n events each through each way of
// holding a transaction; insert writes the events in that transaction.
func benchTx(b *testing.B, insert func(ctx context.Context, d *db, v string, tx any, evs []writer.Event) error) {
	d := newDB(b)
	ctx := context.Background()
	for _, v := range []string{"pgx", "database/sql"} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/events=%d", v, n), func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					evs := benchEvents(n)
					b.StartTimer()
					var err error
					if v == "pgx" {
						tx, berr := d.Pool.Begin(ctx)
						if berr != nil {
							b.Fatal(berr)
						}
						if err = insert(ctx, d, v, tx, evs); err == nil {
							err = tx.Commit(ctx)
						}
						_ = tx.Rollback(ctx)
					} else {
						tx, berr := d.SQL.BeginTx(ctx, nil)
						if berr != nil {
							b.Fatal(berr)
						}
						if err = insert(ctx, d, v, tx, evs); err == nil {
							err = tx.Commit()
						}
						_ = tx.Rollback()
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
			})
		}
	}
}

// BenchmarkInsertBatch writes each transaction's events with one
// InsertBatch (COPY) or InsertBatchSQL (multi-row INSERT).
func BenchmarkInsertBatch(b *testing.B) {
	benchTx(b, func(ctx context.Context, d *db, v string, tx any, evs []writer.Event) error {
		if v == "pgx" {
			return d.Outbox.InsertBatch(ctx, tx.(pgxTx), evs)
		}
		return d.Outbox.InsertBatchSQL(ctx, tx.(sqlTx), evs)
	})
}

// BenchmarkInsertRowByRow writes the same events with one Insert or
// InsertSQL each.
func BenchmarkInsertRowByRow(b *testing.B) {
	benchTx(b, func(ctx context.Context, d *db, v string, tx any, evs []writer.Event) error {
		for _, ev := range evs {
			var err error
			if v == "pgx" {
				err = d.Outbox.Insert(ctx, tx.(pgxTx), ev)
			} else {
				err = d.Outbox.InsertSQL(ctx, tx.(sqlTx), ev)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
