package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db/dbtest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func setup(t *testing.T) (*dbtest.DB, *connector.HTTP) {
	t.Helper()
	d := dbtest.NewDB(t)
	h, err := newServer(t.Context(), d.Pool, []string{secret})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := connector.NewHTTP(connector.HTTPConfig{URL: srv.URL + "/fulfil", Secret: secret, Timeout: 5 * time.Second, LookupURL: srv.URL + "/lookup/{key}"})
	require.NoError(t, err)
	return d, c
}

// TestExampleKeepsTheContract: the conformance run `guardian connector
// test` makes passes every step, and leaves no licence behind.
func TestExampleKeepsTheContract(t *testing.T) {
	t.Parallel()
	d, c := setup(t)
	for _, provider := range []string{"stripe", "adyen"} {
		for _, s := range c.Conform(t.Context(), provider) {
			require.True(t, s.OK, "%s: %s: %s", provider, s.Name, s.Verdict)
		}
	}
	require.Zero(t, d.Count(t, `SELECT count(*) FROM licence`), "test deliveries never act")
	require.Positive(t, d.Count(t, `SELECT count(*) FROM guardian_receiver_key WHERE test`))
}

// TestExampleGrantsOnce: Guardian's attempts at one key, eight at once and
// more later, grant one licence; every answer is done or "in progress",
// never a failure; the lookup says done.
func TestExampleGrantsOnce(t *testing.T) {
	t.Parallel()
	d, c := setup(t)
	req := connector.Request{Key: "gk1_example0000000000000000000000000001", Provider: "stripe", PaymentID: "pi_1", EventID: "evt_1",
		EventType: "checkout.session.completed", Payload: json.RawMessage(`{"id":"evt_1"}`)}
	var wg sync.WaitGroup
	outcomes := make([]state.Outcome, 8)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			r.Attempt = i + 1
			outcomes[i] = c.Fulfil(context.Background(), r).Outcome
		}()
	}
	wg.Wait()
	done := 0
	for _, o := range outcomes {
		require.Contains(t, []state.Outcome{state.Done, state.Unknown}, o, "done, or 409 while another attempt held the key")
		if o == state.Done {
			done++
		}
	}
	require.Positive(t, done)
	require.Equal(t, state.Done, c.Fulfil(context.Background(), req).Outcome, "a finished key replays its answer")
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM licence WHERE payment_id = 'pi_1'`))

	got, _, err := c.Lookup(context.Background(), req.Key)
	require.NoError(t, err)
	require.Equal(t, connector.Performed, got)

	// Another body under the key (a restored Guardian that made the row
	// from the payment's other event): refused, nothing granted, and the
	// lookup still settles it.
	other := req
	other.EventID, other.Payload = "evt_2", json.RawMessage(`{"id":"evt_2"}`)
	require.Equal(t, state.Refused, c.Fulfil(context.Background(), other).Outcome)
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM licence`))
}

// TestExampleDeclines: a payment the handler cannot grant is declined,
// signed, for good; Guardian's outcome is Declined and the lookup agrees.
func TestExampleDeclines(t *testing.T) {
	t.Parallel()
	d, c := setup(t)
	req := connector.Request{Key: "gk1_example0000000000000000000000000002", Provider: "standard", EventID: "evt_3", EventType: "payment.succeeded", Payload: json.RawMessage(`{}`)}
	require.Equal(t, state.Declined, c.Fulfil(context.Background(), req).Outcome)
	require.Equal(t, state.Declined, c.Fulfil(context.Background(), req).Outcome, "declined for good")
	got, _, err := c.Lookup(context.Background(), req.Key)
	require.NoError(t, err)
	require.Equal(t, connector.Declined, got)
	require.Zero(t, d.Count(t, `SELECT count(*) FROM licence`))
}

// TestExampleRevokesOnce: a revocation under its own key revokes the
// payment's licence once, however many attempts arrive at once; one for a
// payment never granted is declined, and nothing changes.
func TestExampleRevokesOnce(t *testing.T) {
	t.Parallel()
	d, c := setup(t)
	grantReq := connector.Request{Key: "gk1_example0000000000000000000000000002", Provider: "stripe", PaymentID: "pi_2", EventID: "evt_2",
		EventType: "checkout.session.completed", Payload: json.RawMessage(`{"id":"evt_2"}`)}
	require.Equal(t, state.Done, c.Fulfil(context.Background(), grantReq).Outcome)
	revoke := connector.Request{Key: "gk1_example0000000000000000000000000003", Provider: "stripe", PaymentID: "pi_2", EventID: "evt_refund_2",
		EventType: "charge.refunded", Action: state.Revoke, Payload: json.RawMessage(`{"id":"evt_refund_2"}`)}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			r := revoke
			r.Attempt = i + 1
			o := c.Fulfil(context.Background(), r).Outcome
			require.Contains(t, []state.Outcome{state.Done, state.Unknown}, o)
		})
	}
	wg.Wait()
	require.Equal(t, state.Done, c.Fulfil(context.Background(), revoke).Outcome, "a finished key replays its answer")
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM licence WHERE payment_id = 'pi_2' AND revoked_at IS NOT NULL`))

	never := revoke
	never.Key, never.PaymentID = "gk1_example0000000000000000000000000004", "pi_never"
	require.Equal(t, state.Declined, c.Fulfil(context.Background(), never).Outcome)
	require.Zero(t, d.Count(t, `SELECT count(*) FROM licence WHERE payment_id = 'pi_never'`))
}

// TestExampleIsOneActionOfMany: a body that names its action and carries
// the purchase (a Guardian with an actions file) is read by the kit, and
// the licence records both.
func TestExampleIsOneActionOfMany(t *testing.T) {
	t.Parallel()
	d, c := setup(t)
	req := connector.Request{Key: "gk1_example0000000000000000000000000009", Provider: "paddle", PaymentID: "txn_1", EventID: "evt_9",
		EventType: "transaction.completed", ActionName: "licence",
		Purchase: json.RawMessage(`{"provider":"paddle","id":"txn_1","kind":"one_time","metadata":{"course":"go-101"},"mode":"live"}`),
		Payload:  json.RawMessage(`{"id":"evt_9"}`)}
	require.Equal(t, state.Done, c.Fulfil(context.Background(), req).Outcome)
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM licence WHERE payment_id = 'txn_1' AND action_name = 'licence' AND course = 'go-101'`))
}
