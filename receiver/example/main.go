// Command example is a receiver built on Guardian's receiver kit
// (receiver): it grants one licence per paid payment, in its own
// Postgres, exactly once. It can be the only action (the connector URL)
// or one action of an actions file (docs/actions.md): it records which
// action sent it, and the course the purchase's metadata names.
//
//	RECEIVER_DATABASE_URL=postgres://... RECEIVER_SECRET=whsec_... RECEIVER_ADDR=127.0.0.1:8081 go run ./receiver/example
//
// Point Guardian at it with GUARDIAN_CONNECTOR_URL=http://127.0.0.1:8081/fulfil
// and GUARDIAN_CONNECTOR_LOOKUP_URL=http://127.0.0.1:8081/lookup/{key}, the
// same secret in GUARDIAN_CONNECTOR_SECRET, and check it with
// `guardian connector test`.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/receiver"
	"github.com/guardian-pay/guardian/receiver/contract"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "example receiver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string) error {
	if getenv("RECEIVER_DATABASE_URL") == "" || getenv("RECEIVER_SECRET") == "" {
		return errors.New("set RECEIVER_DATABASE_URL and RECEIVER_SECRET (whsec_...; several, space-separated, while rotating)")
	}
	pool, err := pgxpool.New(ctx, getenv("RECEIVER_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := newServer(ctx, pool, strings.Fields(getenv("RECEIVER_SECRET")))
	if err != nil {
		return err
	}
	addr := getenv("RECEIVER_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8081"
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	slog.Info("example receiver listening", "addr", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// licenceSchema is the example's own table: the action's result.
const licenceSchema = `
CREATE TABLE IF NOT EXISTS licence (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL,
    provider        text        NOT NULL,
    payment_id      text        NOT NULL,
    granted_at      timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE licence ADD COLUMN IF NOT EXISTS revoked_at timestamptz;
ALTER TABLE licence ADD COLUMN IF NOT EXISTS action_name text;
ALTER TABLE licence ADD COLUMN IF NOT EXISTS course text`

// newServer migrates the kit's table and the licence table, and returns
// the receiver's routes: POST /fulfil and GET /lookup/{key}.
func newServer(ctx context.Context, pool *pgxpool.Pool, secrets []string) (http.Handler, error) {
	if err := receiver.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, licenceSchema); err != nil {
		return nil, fmt.Errorf("create licence: %w", err)
	}
	r, err := receiver.New(receiver.Config{Pool: pool, Secrets: secrets, Handler: grant})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /fulfil", r.Action())
	mux.Handle("GET /lookup/{key}", r.Lookup())
	return mux, nil
}

// grant is the merchant's action: one licence row, written in the
// transaction that records the key; or, for a payment taken back (a
// refund or dispute), the licence revoked. It declines a payment it cannot
// grant or revoke anything for.
func grant(ctx context.Context, tx pgx.Tx, d receiver.Delivery) error {
	if d.PaymentID == "" {
		return receiver.Decline("no payment named: nothing to grant")
	}
	if d.Action == contract.ActionRevoke {
		tag, err := tx.Exec(ctx, `UPDATE licence SET revoked_at = now() WHERE provider = $1 AND payment_id = $2 AND revoked_at IS NULL`, d.Provider, d.PaymentID)
		if err == nil && tag.RowsAffected() == 0 {
			return receiver.Decline("no granted licence for this payment: nothing to revoke")
		}
		return err
	}
	// With an actions file, the body names the action and carries the
	// purchase: what was bought, in one shape whatever the provider.
	var course *string
	if p, ok := d.PurchaseOf(); ok {
		if c, ok := p.Metadata["course"]; ok {
			course = &c
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO licence (idempotency_key, provider, payment_id, action_name, course) VALUES ($1, $2, $3, NULLIF($4, ''), $5)`,
		d.IdempotencyKey, d.Provider, d.PaymentID, d.ActionName, course)
	return err
}
