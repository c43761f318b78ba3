package writer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/writer"
)

// appPool and appDB are the application's connection pool and
// database/sql handle, with an accounts table and walpost's outbox.
// TestExamples sets them and runs the examples against PostgreSQL.
var (
	appPool *pgxpool.Pool
	appDB   *sql.DB
)

var errInsufficientFunds = errors.New("insufficient funds")

// debit takes amount from account and writes the event saying so, in one
// transaction: both are committed, or neither.
func debit(ctx context.Context, pool *pgxpool.Pool, key, account string, amount int) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var balance int
		err := tx.QueryRow(ctx, `UPDATE accounts SET balance = balance - $2 WHERE id = $1 RETURNING balance`, account, amount).Scan(&balance)
		if err != nil {
			return err
		}
		err = writer.Insert(ctx, tx, writer.Event{
			Key:          key,
			Payload:      fmt.Appendf(nil, `{"event": "account.debited", "account": %q, "amount": %d}`, account, amount),
			EventType:    "account.debited",
			PartitionKey: account, // one account's events stay in order
		})
		if err != nil {
			return err
		}
		if balance < 0 {
			return errInsufficientFunds // rolls back the debit and its event
		}
		return nil
	})
}

func state(ctx context.Context) (balance, events int) {
	if err := appPool.QueryRow(ctx, `SELECT (SELECT balance FROM accounts WHERE id = 'a1'), (SELECT count(*) FROM outbox)`).Scan(&balance, &events); err != nil {
		log.Fatal(err)
	}
	return balance, events
}

// The business change and its event in one transaction: committed
// together, or not at all.
func Example() {
	ctx := context.Background()
	// Make the key before the transaction: the account's version 1 debit.
	if err := debit(ctx, appPool, writer.DeriveKey("account/a1/debit", 1), "a1", 30); err != nil {
		log.Fatal(err)
	}
	balance, events := state(ctx)
	fmt.Printf("debited: balance %d, %d event\n", balance, events)

	err := debit(ctx, appPool, writer.DeriveKey("account/a1/debit", 2), "a1", 500)
	balance, events = state(ctx)
	fmt.Printf("%v: balance %d, %d event\n", err, balance, events)
}

// A retry keeps the key. When a commit went through but its reply was
// lost, the retry's insert is a duplicate key: the work is done.
func Example_retry() {
	ctx := context.Background()
	key := writer.NewKey() // once, before the first attempt
	for attempt := 1; attempt <= 3; attempt++ {
		err := debit(ctx, appPool, key, "a1", 30)
		if attempt == 1 && err == nil {
			err = errors.New("connection reset while reading the commit's reply")
		}
		switch {
		case err == nil:
			fmt.Printf("attempt %d: committed\n", attempt)
		case errors.Is(err, writer.ErrDuplicateKey):
			fmt.Printf("attempt %d: already written, nothing to do\n", attempt)
		default:
			fmt.Printf("attempt %d: %v; retrying with the same key\n", attempt, err)
			continue
		}
		break
	}
	balance, events := state(ctx)
	fmt.Printf("balance %d, %d event\n", balance, events)
}

// Several events of one transaction in one statement, through
// database/sql.
func Example_batch() {
	ctx := context.Background()
	tx, err := appDB.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	var evs []writer.Event
	for _, line := range []string{"book", "pen", "lamp"} {
		evs = append(evs, writer.Event{
			Key:     writer.DeriveKey("order/o-17/line/"+line, 1),
			Payload: fmt.Appendf(nil, `{"order": "o-17", "line": %q}`, line),
			Topic:   "order-lines",
		})
	}
	if err := writer.InsertBatchSQL(ctx, tx, evs); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	var n int
	if err := appDB.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE topic = 'order-lines'`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "events")
}

func ExampleDeriveKey() {
	// The same entity version gives the same key, in every process and
	// language; the next version another.
	fmt.Println(writer.DeriveKey("account/a1/debit", 1))
	fmt.Println(writer.DeriveKey("account/a1/debit", 2))
	// Output:
	// a6149f8d-ebb5-5b53-b650-922ed8c684f3
	// 167764c8-7362-5085-831d-cbe6889281eb
}

func ExampleNewKey() {
	k := writer.NewKey()
	fmt.Println(len(k), "characters, version", k[14:15])
	// Output: 36 characters, version 7
}
