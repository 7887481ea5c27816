package fulfilment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Purchases awaiting their items (docs/actions.md, "Routes that need what
// was bought"). A Stripe Checkout Session's event names no line items, so
// routes that match on products or prices cannot decide it from the event.
// Such a purchase is recorded awaiting its items, paying for no action,
// and a job fetches them from the provider's API (RouteAwaiting). The
// fetch is outside the exactly-once decision: it decides nothing and may
// run any number of times; what decides is the one transaction that
// routes the purchase and makes its actions' fulfilments, under the
// purchase's row lock, at most once. A fetch that fails leaves the
// purchase awaiting, with its error, for the job to try again and for
// operators to see (guardian_purchases_awaiting_items, the dashboard's
// queue, GET /api/v1/purchases/awaiting): nothing is dropped or guessed.

// ItemsSource lists what a purchase bought from its provider's API, where
// its paid event names none (provider.Event.ItemsRef).
type ItemsSource interface {
	// Items lists the items of the provider's object ref. Its error names
	// no secret: it is stored for operators.
	Items(ctx context.Context, ref string) ([]provider.Item, error)
}

// RouteTimeout bounds one routing: the fetch and the transaction.
const RouteTimeout = 30 * time.Second

// ErrNoItemsSource means this process fetches no items for the purchase's
// provider: another node's job, or this one's once configured, routes it.
var ErrNoItemsSource = errors.New("no API is configured here to fetch this provider's items")

// awaitsItems reports whether a purchase p of ev is recorded awaiting its
// items: its event names an object whose items the provider's API lists
// and none itself, a route may match on them, and this process can fetch
// them. Without a source it is routed on what the event says, as a
// deployment without an API key always was.
func (s *Service) awaitsItems(ev provider.Event, p *provider.Purchase) bool {
	return ev.ItemsRef != "" && p != nil && len(p.Items) == 0 &&
		s.cfg.Items[ev.Provider] != nil && s.cfg.Actions.NeedsItems(ev.Provider)
}

// recordPurchases records purchases in tx (db.RecordPurchases) and
// enqueues, in the same transaction, the fetch of each one it recorded
// awaiting its items.
func (s *Service) recordPurchases(ctx context.Context, tx pgx.Tx, purchases []db.PurchaseRecord) error {
	awaiting, err := db.RecordPurchases(ctx, tx, purchases)
	if err != nil || len(awaiting) == 0 {
		return err
	}
	if err := s.cfg.Enqueuer.EnqueueRouteTx(ctx, tx, awaiting...); err != nil {
		return fmt.Errorf("enqueue routing: %w", err)
	}
	return nil
}

// RouteAwaiting fetches the items of a purchase recorded awaiting them,
// then, in one transaction holding the purchase's row, decides its actions
// by the routes in force with the items, records them with its detail and
// makes their fulfilments and dispatch jobs, as intake would have. It
// returns the fulfilments made; none when the purchase does not await
// (routed already, by this call's twin or before). A fetch that fails is
// recorded on the purchase and returned: the caller tries again later.
func (s *Service) RouteAwaiting(ctx context.Context, p db.Payment, actor string) ([]db.Born, error) {
	ctx, cancel := context.WithTimeout(ctx, RouteTimeout)
	defer cancel()
	a, ok, err := db.LockAwaiting(ctx, s.cfg.Store.Pool(), p)
	if err != nil || !ok {
		return nil, err
	}
	source := s.cfg.Items[p.Provider]
	if source == nil {
		return nil, fmt.Errorf("route %s purchase %s: %w", p.Provider, p.PaymentID, ErrNoItemsSource)
	}
	items, err := source.Items(ctx, a.Ref)
	s.cfg.Metrics.ItemsFetched(p.Provider, err)
	if err != nil {
		if nerr := db.NoteRoutingFailure(ctx, s.cfg.Store.Pool(), p, err.Error()); nerr != nil {
			s.cfg.Logger.ErrorContext(ctx, "could not record a failed fetch of a purchase's items", "provider", p.Provider, "payment_id", p.PaymentID, "error", nerr)
		}
		s.cfg.Logger.WarnContext(ctx, "fetch of a purchase's items failed: it awaits them, and pays for no action until a fetch succeeds",
			"provider", p.Provider, "payment_id", p.PaymentID, "items_of", a.Ref, "attempts", a.Attempts+1, "error", err)
		return nil, fmt.Errorf("fetch items of %s purchase %s: %w", p.Provider, p.PaymentID, err)
	}

	var born []db.Born
	var actions []string
	err = s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		a, ok, err := db.LockAwaiting(ctx, tx, p)
		if err != nil || !ok {
			return err
		}
		var recorded provider.Purchase
		if err := json.Unmarshal(a.Detail, &recorded); err != nil {
			return fmt.Errorf("read recorded purchase: %w", err)
		}
		purchase := provider.WithItems(recorded, items)
		detail, err := json.Marshal(purchase)
		if err != nil {
			return err
		}
		actions = s.cfg.Actions.Route(purchase)
		eventPK, err := db.RoutePurchase(ctx, tx, p, actions, s.cfg.Actions.Digest, detail)
		if err != nil {
			return err
		}
		born, err = s.born(ctx, tx, []db.BatchFulfilment{{EventPK: eventPK, Actor: actor}}, createdReason)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("route %s purchase %s: %w", p.Provider, p.PaymentID, err)
	}
	s.announce(born)
	for _, b := range born {
		s.cfg.Metrics.Transition(b.Action, "", b.State, 1)
	}
	if actions != nil {
		s.cfg.Logger.InfoContext(ctx, "purchase routed with the items its provider's API lists", "provider", p.Provider, "payment_id", p.PaymentID,
			"items", len(items), "actions", actions, "fulfilments", len(born))
	}
	return born, nil
}

// requeueAwaitingAfter is how long a purchase awaits, untried, before the
// sweep gives it a routing job: its job's retries ran out, or it was lost.
const requeueAwaitingAfter = 10 * time.Minute

// RequeueAwaiting enqueues a routing job for each purchase that has
// awaited its items for requeueAwaitingAfter without a fetch tried since
// (a purchase whose job still lives keeps it), at most strandedBatch a
// round.
func (s *Service) RequeueAwaiting(ctx context.Context, lease lock.Lease) (int, error) {
	var requeued []db.Payment
	err := s.fenced(ctx, lease, func(tx pgx.Tx) (err error) {
		if requeued, err = db.AwaitingUntried(ctx, tx, requeueAwaitingAfter, strandedBatch); err != nil || len(requeued) == 0 {
			return err
		}
		return s.cfg.Enqueuer.EnqueueRouteTx(ctx, tx, requeued...)
	})
	return len(requeued), err
}
