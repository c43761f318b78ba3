package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
)

// appPool is the consuming application's pool, with the inbox's tables
// and a credits table. TestExamples sets it and runs the examples against
// PostgreSQL.
var appPool *pgxpool.Pool

// debited is the payload of writer's debit example.
type debited struct {
	Event   string `json:"event"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// credit is the effect: the amount debited from an account is credited to
// its clearing account, in the transaction the inbox is given.
func credit(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
	var ev debited
	if err := json.Unmarshal(rec.Value, &ev); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO credits (account, amount) VALUES ($1, $2)
		ON CONFLICT (account) DO UPDATE SET amount = credits.amount + EXCLUDED.amount`, "clearing/"+ev.Account, ev.Amount)
	return err
}

// handle applies one record: the credit and the record of it commit
// together, or neither.
func handle(ctx context.Context, in *inbox.Inbox, rec *kgo.Record) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
		applied, err = in.Apply(ctx, tx, rec, func(ctx context.Context, tx pgx.Tx) error {
			return credit(ctx, tx, rec)
		})
		return err
	})
	return applied, err
}

// debitRecord is the record walpost sends for writer's Example: key and
// idempotency_key DeriveKey("account/a1/debit", 1), commit_lsn the debit's
// commit.
func debitRecord(offset int64, extra ...kgo.RecordHeader) *kgo.Record {
	key := "a6149f8d-ebb5-5b53-b650-922ed8c684f3"
	return &kgo.Record{
		Topic: "outbox", Partition: 0, Offset: offset, Key: []byte(key),
		Value: []byte(`{"event": "account.debited", "amount": 30, "account": "a1"}`),
		Headers: append([]kgo.RecordHeader{
			{Key: "idempotency_key", Value: []byte(key)},
			{Key: "commit_lsn", Value: []byte("0/16B3748")},
			{Key: "event_type", Value: []byte("account.debited")},
		}, extra...),
	}
}

func balance(ctx context.Context) int64 {
	var n int64
	if err := appPool.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM credits WHERE account = 'clearing/a1'`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	return n
}

// writer's Example debits account a1 by 30 and writes the event; walpost
// delivers it at least once. The consumer credits a1's clearing account
// once: the second delivery (walpost restarted before confirming it) and
// a poison replay of it are recognised.
func Example() {
	ctx := context.Background()
	in, err := inbox.New(inbox.Config{Group: "clearing"})
	if err != nil {
		log.Fatal(err)
	}
	for _, rec := range []*kgo.Record{
		debitRecord(0),
		debitRecord(1), // re-sent after a walpost restart
		debitRecord(2, kgo.RecordHeader{Key: "replayed_from_poison", Value: []byte("true")}),
	} {
		applied, err := handle(ctx, in, rec)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("offset %d: applied %v, clearing/a1 credited %d\n", rec.Offset, applied, balance(ctx))
	}
}

// A consumer group member crediting every debit once. Run returns when
// ctx ends; a process killed at any instant loses no credit and applies
// none twice.
func Example_consumer() {
	ctx := context.Background()
	in, err := inbox.New(inbox.Config{Group: "clearing"})
	if err != nil {
		log.Fatal(err)
	}
	if err := inbox.Migrate(ctx, appPool); err != nil {
		log.Fatal(err)
	}
	c, err := inbox.NewConsumer(inbox.ConsumerConfig{
		Inbox:   in,
		DB:      appPool,
		Brokers: []string{"localhost:9092"},
		Topics:  []string{"outbox"},
		Handle:  credit,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
