package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
)

// BenchmarkApplyBatch: a batch of 1,000 first sends over 6 partitions in
// one transaction, against a transaction with a no-op per record (the
// consumer without the inbox). Needs the stack's PostgreSQL.
func BenchmarkApplyBatch(b *testing.B) {
	d := newDB(b)
	ctx := context.Background()
	in, _ := inbox.New(inbox.Config{Group: "bench"})
	const size = 1000
	batch := func(n int) []*kgo.Record {
		recs := make([]*kgo.Record, size)
		for i := range recs {
			seq := n*size + i
			lsn := uint64(0x1000000 + seq/3*0x100)
			recs[i] = record(int32(seq%6), int64(seq/6), fmt.Sprintf("%012d", seq), fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)))
		}
		return recs
	}
	b.Run("plain", func(b *testing.B) {
		for n := 0; b.Loop(); n++ {
			recs := batch(n)
			if err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
				for range recs {
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("inbox", func(b *testing.B) {
		for n := 0; b.Loop(); n++ {
			recs := batch(n)
			if err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
				_, err := in.ApplyBatch(ctx, tx, recs, func(context.Context, pgx.Tx, []*kgo.Record) error { return nil })
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
	})
}
