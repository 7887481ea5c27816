package receiver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/receiver"
	"github.com/guardian-pay/guardian/receiver/contract"
)

const (
	secret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	oldSecret = "whsec_b3RoZXIgc2VjcmV0IG9mIGFub3RoZXIgcmVjZWl2ZXI="
)

type bundle struct {
	url   string
	d     *dbtest.DB
	c     *connector.HTTP
	calls atomic.Int32
}

// setup serves a Receiver whose handler writes one row per call and then
// returns what next says.
func setup(t *testing.T, next func(n int32) error) *bundle {
	t.Helper()
	b := &bundle{d: dbtest.NewDB(t)}
	ctx := t.Context()
	require.NoError(t, receiver.Migrate(ctx, b.d.Pool))
	require.NoError(t, receiver.Migrate(ctx, b.d.Pool), "Migrate is idempotent")
	_, err := b.d.Pool.Exec(ctx, `CREATE TABLE act (key text NOT NULL)`)
	require.NoError(t, err)
	r, err := receiver.New(receiver.Config{Pool: b.d.Pool, Secrets: []string{secret, oldSecret}, Handler: func(ctx context.Context, tx pgx.Tx, d receiver.Delivery) error {
		n := b.calls.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO act VALUES ($1)`, d.IdempotencyKey); err != nil {
			return err
		}
		return next(n)
	}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /act", r.Action())
	mux.Handle("GET /lookup/{key}", r.Lookup())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	b.c = b.connector(t, secret)
	return b
}

// connector is Guardian's connector to the receiver, signing with withSecret.
func (b *bundle) connector(t *testing.T, withSecret string) *connector.HTTP {
	c, err := connector.NewHTTP(connector.HTTPConfig{URL: b.url + "/act", Secret: withSecret, Timeout: 5 * time.Second, LookupURL: b.url + "/lookup/{key}"})
	require.NoError(t, err)
	return c
}

func request(key string) connector.Request {
	return connector.Request{Key: key, Attempt: 1, Provider: "stripe", PaymentID: "pi_1", EventID: "evt_1", EventType: "checkout.session.completed", Payload: json.RawMessage(`{}`)}
}

func lookup(t *testing.T, c *connector.HTTP, key string) connector.Answer {
	t.Helper()
	a, _, err := c.Lookup(context.Background(), key)
	require.NoError(t, err)
	return a
}

func TestReceiver(t *testing.T) {
	t.Parallel()

	t.Run("AFailedHandlerRecordsNothingAndRunsAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(n int32) error {
			if n == 1 {
				return errors.New("downstream unavailable")
			}
			return nil
		})
		req := request("gk1_a")
		require.Equal(t, state.Unknown, b.c.Fulfil(context.Background(), req).Outcome, "500: Guardian parks it")
		require.Zero(t, b.d.Count(t, `SELECT count(*) FROM act`), "the failed handler's write was rolled back")
		require.Equal(t, connector.NotPerformed, lookup(t, b.c, req.Key), "nothing recorded: Guardian may send it again")
		req.Attempt = 2
		require.Equal(t, state.Done, b.c.Fulfil(context.Background(), req).Outcome)
		require.Equal(t, 1, b.d.Count(t, `SELECT count(*) FROM act`))
		require.Equal(t, connector.Performed, lookup(t, b.c, req.Key))
	})

	t.Run("ADeclineRollsBackTheHandlersWrites", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(int32) error { return receiver.Decline("out of stock") })
		res := b.c.Fulfil(context.Background(), request("gk1_b"))
		require.Equal(t, state.Declined, res.Outcome, "evidence: %v", res.Evidence)
		require.Equal(t, "out of stock", res.Evidence["declined_reason"])
		require.Zero(t, b.d.Count(t, `SELECT count(*) FROM act`))
		require.Equal(t, 1, b.d.Count(t, `SELECT count(*) FROM guardian_receiver_key WHERE status = 'declined'`))
		require.Equal(t, state.Declined, b.c.Fulfil(context.Background(), request("gk1_b")).Outcome)
		require.EqualValues(t, 1, b.calls.Load(), "a declined key never runs the handler again")
	})

	t.Run("TestDeliveriesNeverRunTheHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(int32) error { return nil })
		test := connector.Request{Key: contract.TestKeyPrefix + "1", Attempt: 1, PaymentID: contract.TestPaymentID, EventType: contract.TestEventType, Payload: json.RawMessage(`{}`)}
		require.Equal(t, state.Done, b.c.Fulfil(context.Background(), test).Outcome)
		require.Zero(t, b.calls.Load())

		// A real event under a test key, or a test event under a real
		// key, is refused: no test can reach the handler by a real key.
		real := request(contract.TestKeyPrefix + "2")
		res := b.c.Fulfil(context.Background(), real)
		require.Equal(t, http.StatusBadRequest, res.Evidence["status"])
		disguised := test
		disguised.Key = "gk1_real"
		res = b.c.Fulfil(context.Background(), disguised)
		require.Equal(t, http.StatusBadRequest, res.Evidence["status"])
		require.Zero(t, b.calls.Load())
		require.Equal(t, connector.NotPerformed, lookup(t, b.c, "gk1_real"))
	})

	t.Run("SignaturesAndRotation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(int32) error { return nil })
		wrong := "whsec_d3JvbmcgY29ubmVjdG9yIHNlY3JldCBmb3IgZTJl"
		for _, tt := range []struct {
			secret string
			want   state.Outcome
		}{{wrong, state.NotDelivered}, {oldSecret, state.Done}} {
			c := b.connector(t, tt.secret)
			require.Equal(t, tt.want, c.Fulfil(context.Background(), request("gk1_"+tt.secret[6:12])).Outcome, "signed with %s", tt.secret[:12])
		}
		require.EqualValues(t, 1, b.calls.Load(), "only the request signed with a configured secret acted")
	})
}

// TestTheKitTakesWhatIntakeTook: an event at intake's cap, with ids as
// long and as escaped as intake lets through, reaches the kit's handler
// under its default cap: Guardian never acknowledges an event its own
// receiver refuses as too large (which Guardian would retry for ever).
func TestTheKitTakesWhatIntakeTook(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int32) error { return nil })
	// A payload of exactly the intake cap, and the longest ids intake
	// stores, of characters JSON writes as six bytes each.
	pad := contract.DefaultMaxPayloadBytes - len(`{"x":""}`)
	payload := json.RawMessage(`{"x":"` + strings.Repeat("a", pad) + `"}`)
	require.Len(t, payload, contract.DefaultMaxPayloadBytes)
	long := strings.Repeat("\x01", 255)
	req := connector.Request{Key: "gk1_large", Attempt: 1, Provider: "stripe", PaymentID: long, EventID: long, EventType: long, Action: "revoke", Payload: payload}
	body, err := connector.EncodeRequest(req)
	require.NoError(t, err)
	require.LessOrEqual(t, int64(len(body)), contract.MaxRequestBytes(contract.DefaultMaxPayloadBytes), "the envelope fits EnvelopeBytes")
	require.Equal(t, state.Done, b.c.Fulfil(context.Background(), req).Outcome)
	require.EqualValues(t, 1, b.calls.Load())
}
