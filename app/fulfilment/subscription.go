package fulfilment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
			sub, pay := mapped.StartsSubscription()
			if sub == "" {
				continue
			}
			res.Naming++
			if p.DryRun {
				if _, err := db.GetSubscription(ctx, s.cfg.Store.Pool(), ev.Provider, sub); errors.Is(err, db.ErrNotFound) {
					res.Linked++
				} else if err != nil {
					return res, err
				}
				continue
			}
			start := db.SubscriptionStart{Provider: ev.Provider, SubscriptionID: sub, PaymentID: pay}
			err = s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
				linked, err := db.LinkSubscriptions(ctx, tx, []db.SubscriptionStart{start}, nil)
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
				return res, fmt.Errorf("link %s subscription %s: %w", ev.Provider, sub, err)
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
