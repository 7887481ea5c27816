package fulfilment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// LinkParams asks for the subscriptions whose events were stored in a
// window to be linked to their purchases from those events, for an
// operator: intake links each subscription as it records its start, but
// one started before Guardian recorded links has none, and its end would
// take nothing back.
type LinkParams struct {
	// Since and Until bound when the events were first seen (zero Until:
	// now).
	Since, Until time.Time
	// Operator is who links, for the audit of what a link takes back.
	Operator string
	// DryRun counts what would be linked and changes nothing.
	DryRun bool
}

// LinkResult counts what a link found and did.
type LinkResult struct {
	// Naming are the stored events whose provider's rules name a
	// subscription's start (its paid start, or the event that links it).
	Naming int
	// Linked are the subscriptions linked now (in a dry run: not linked
	// yet); Ended, the purchases an end stored before made reversed, and
	// took back by their actions' policies.
	Linked, Ended int
}

// addLinks adds to l what an event states of a subscription's life: the
// start it links to its purchase, and what it says of one of its invoices.
func addLinks(l *db.Links, ev provider.Event) {
	if sub, pay := ev.StartsSubscription(); sub != "" {
		l.Starts = append(l.Starts, db.SubscriptionStart{Provider: ev.Provider, SubscriptionID: sub, PaymentID: pay})
	}
	if in := ev.Invoice; in != nil {
		l.Invoices = append(l.Invoices, db.SubscriptionInvoice{
			Provider: ev.Provider, Invoice: in.ID, Payment: in.Payment, SubscriptionID: in.Subscription, First: in.First,
		})
	}
}

// link records links in tx (db.LinkSubscriptions) and weighs the refunds
// it moved to the purchases their payments paid for: those refunded whole
// join the purchases reversed, for the caller to take back in tx.
func (s *Service) link(ctx context.Context, tx pgx.Tx, links db.Links) (db.LinkResult, error) {
	linked, err := db.LinkSubscriptions(ctx, tx, links)
	if err != nil {
		return linked, err
	}
	whole, err := s.weigh(ctx, tx, linked.Weigh)
	linked.Reversed = append(linked.Reversed, whole...)
	slices.SortFunc(linked.Reversed, func(a, b db.Payment) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.PaymentID, b.PaymentID))
	})
	linked.Reversed = slices.Compact(linked.Reversed)
	return linked, err
}

// linkBatch is how many events a link reads at a time.
const linkBatch = 500

// LinkStored reads the stored events of the window again by their
// providers' rules as they are now (Config.Mappers) and links each
// subscription one names to the purchase its start paid for, as intake
// would have (db.LinkSubscriptions): an end stored before is resolved, and
// what the start granted is taken back in the same transaction, by each
// action's policy. A subscription linked before keeps its link. Events
// whose body was pruned cannot be read, and are not.
func (s *Service) LinkStored(ctx context.Context, p LinkParams) (LinkResult, error) {
	var res LinkResult
	if p.Operator == "" {
		return res, errors.New("a link names its operator")
	}
	until := p.Until
	if until.IsZero() {
		until = time.Now()
	}
	actor := "operator " + p.Operator
	var after int64
	for {
		batch, err := db.EventsToLink(ctx, s.cfg.Store.Pool(), p.Since, until, after, linkBatch)
		if err != nil {
			return res, err
		}
		for _, ev := range batch {
			m, ok := s.cfg.Mappers[ev.Provider]
			if !ok {
				continue
			}
			mapped, err := m.Map(ev.Type, ev.Payload)
			if err != nil {
				continue
			}
			var links db.Links
			addLinks(&links, mapped)
			if len(links.Starts) == 0 && len(links.Invoices) == 0 {
				continue
			}
			res.Naming++
			if p.DryRun {
				for _, start := range links.Starts {
					if _, err := db.GetSubscription(ctx, s.cfg.Store.Pool(), ev.Provider, start.SubscriptionID); errors.Is(err, db.ErrNotFound) {
						res.Linked++
					} else if err != nil {
						return res, err
					}
				}
				continue
			}
			err = s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
				linked, err := s.link(ctx, tx, links)
				if err != nil {
					return err
				}
				res.Linked += len(linked.Linked)
				res.Ended += len(linked.Reversed)
				if len(linked.Reversed) == 0 {
					return nil
				}
				_, _, err = s.takeBack(ctx, tx, actor, linked.Reversed, time.Time{})
				return err
			})
			if err != nil {
				return res, fmt.Errorf("link %s event %s: %w", ev.Provider, ev.EventID, err)
			}
		}
		if len(batch) < linkBatch {
			break
		}
		after = batch[len(batch)-1].ID
	}
	s.cfg.Logger.InfoContext(ctx, "subscriptions linked from stored events", "operator", p.Operator, "dry_run", p.DryRun,
		"since", p.Since, "until", until, "naming", res.Naming, "linked", res.Linked, "ended", res.Ended)
	return res, nil
}
