package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/jobs"
)

// flakyItems lists one product for any session, failing its first call.
type flakyItems struct{ calls atomic.Int64 }

func (f *flakyItems) Items(context.Context, string) ([]provider.Item, error) {
	if f.calls.Add(1) == 1 {
		return nil, errors.New("stripe answered 503: try again")
	}
	return []provider.Item{{Product: "prod_course"}}, nil
}

// TestRouteJobsFetchUntilTheItemsComeOnce: a Checkout purchase whose
// routes need its items gets one routing job however often it is asked
// for; River retries the failed fetch, and the purchase's action is made
// and performed once.
func TestRouteJobsFetchUntilTheItemsComeOnce(t *testing.T) {
	t.Parallel()
	source := &flakyItems{}
	licence := &connectortest.Recorder{}
	b := setup(t, nil, false, options{Fulfilment: func(c *fulfilment.Config) {
		c.Actions = &actions.Set{Source: "routes.yaml", Digest: "d",
			Actions: []actions.Action{{Name: "licence", TakeBack: actions.DefaultPolicy}},
			Routes:  []actions.Route{{Name: "courses", Actions: []string{"licence"}, Match: actions.Match{Products: []string{"prod_course"}}}}}
		c.Performers = map[string]fulfilment.Performer{"licence": {Connector: licence}}
		c.Items = map[string]fulfilment.ItemsSource{"stripe": source}
	}})
	ev := provider.Event{Provider: "stripe", ID: "evt_1", Type: "checkout.session.completed", PaymentID: "pi_1", ItemsRef: "cs_1",
		Payload: []byte(`{}`), Paid: &provider.Money{Minor: 100, Currency: "EUR"}}
	_, err := b.service.Accept(b.ctx, ev)
	require.NoError(t, err)
	ev.ID, ev.Type = "evt_2", "checkout.session.async_payment_succeeded"
	_, err = b.service.Accept(b.ctx, ev)
	require.NoError(t, err)
	e, err := jobs.NewEnqueuer(b.db.Pool, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	require.NoError(t, e.EnqueueRouteTx(b.ctx, tx, db.Payment{Provider: "stripe", PaymentID: "pi_1"}))
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_route'`), "one live routing job per purchase")

	b.start(t)
	require.Eventually(t, func() bool { return len(licence.Calls()) == 1 }, 20*time.Second, 20*time.Millisecond, "the licence is granted once the items come")
	b.waitJobs(t, `kind = 'guardian_route' AND state = 'completed' AND attempt = 2`, 1)
	require.EqualValues(t, 2, source.calls.Load(), "one failed fetch, one that routed")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_1'`))
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM purchase WHERE awaiting_items IS NOT NULL`))
	time.Sleep(200 * time.Millisecond)
	require.Len(t, licence.Calls(), 1)
}
