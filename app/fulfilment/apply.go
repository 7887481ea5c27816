package fulfilment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// ApplyParams asks for an action to be applied to past purchases.
type ApplyParams struct {
	// Action is the action to apply: one of the deployment's.
	Action string
	// Since and Until bound when the purchases were first recorded as
	// paid: Since <= routed < Until (zero Until: now).
	Since, Until time.Time
	// Operator is who applies it, for the audit.
	Operator string
	// DryRun counts what would be applied and changes nothing.
	DryRun bool
}

// ApplyResult counts what an apply found and did.
type ApplyResult struct {
	// Considered are the purchases recorded in the window.
	Considered int
	// Matched are those the routes in force now say pay for the action.
	Matched int
	// Already are matched purchases that pay for it already.
	Already int
	// Reversed are matched purchases taken back: never applied to.
	Reversed int
	// Applied are the purchases the action was added to, each with its
	// fulfilment (in a dry run: those it would be added to).
	Applied int
	// Unsendable are matched purchases whose event's body was pruned
	// after the payload retention: nothing to send, nothing applied.
	Unsendable int
}

// errNothingToSend rolls back an apply whose purchase has no body left to
// send (db.InsertFulfilments makes no row from a pruned body).
var errNothingToSend = errors.New("the purchase's event body was pruned")

// applyBatch is how many purchases an apply reads at a time.
const applyBatch = 500

// ApplyAction applies an action to past purchases, for an operator: each
// purchase recorded in the window (or, for a payment fulfilled before
// actions existed, paid in it) that the routes in force now say pays for
// the action, that does not pay for it yet and is not taken back,
// gets the action (recorded with the purchase and audited under the
// operator's name, db.ApplyAction) and its fulfilment, in one transaction
// per purchase, through intake's own rules (db.InsertFulfilments). Each
// purchase gets an action at most once: a second apply, or two at once,
// finds it paying for the action already. A purchase's other actions are
// never sent again.
func (s *Service) ApplyAction(ctx context.Context, p ApplyParams) (ApplyResult, error) {
	var res ApplyResult
	if _, ok := s.cfg.Actions.Action(p.Action); !ok {
		return res, fmt.Errorf("%q is not one of this deployment's actions (%v)", p.Action, s.cfg.Actions.Names())
	}
	if p.Operator == "" {
		return res, errors.New("an apply names its operator")
	}
	until := p.Until
	if until.IsZero() {
		until = time.Now()
	}
	var after db.RoutedPurchase
	for {
		batch, err := db.PurchasesRouted(ctx, s.cfg.Store.Pool(), p.Since, until, after, applyBatch)
		if err != nil {
			return res, err
		}
		for _, rp := range batch {
			if err := s.applyTo(ctx, rp, p, &res); err != nil {
				return res, err
			}
		}
		if len(batch) < applyBatch {
			break
		}
		after = batch[len(batch)-1]
	}
	// Payments fulfilled before actions existed have no recorded purchase:
	// each is recorded now, as intake would record it (with its rows'
	// actions, decided when it was paid), then weighed like the others.
	// Recorded after the walk above, so none is weighed twice.
	var afterID int64
	for {
		batch, err := db.PaidBeforeActions(ctx, s.cfg.Store.Pool(), p.Since, until, afterID, applyBatch)
		if err != nil {
			return res, err
		}
		for _, u := range batch {
			rec := s.route(s.readStored(u.Event))
			rec.RoutedAt = u.Event.FirstSeenAt
			if !p.DryRun {
				if _, err := db.RecordPurchases(ctx, s.cfg.Store.Pool(), []db.PurchaseRecord{rec}); err != nil {
					return res, err
				}
			}
			rp := db.RoutedPurchase{Payment: rec.Payment, Actions: u.Actions, Detail: rec.Detail, RoutedAt: rec.RoutedAt, Reversed: u.Reversed}
			if err := s.applyTo(ctx, rp, p, &res); err != nil {
				return res, err
			}
		}
		if len(batch) < applyBatch {
			break
		}
		afterID = batch[len(batch)-1].Event.ID
	}
	s.cfg.Logger.InfoContext(ctx, "action applied to past purchases", "action_name", p.Action, "operator", p.Operator, "dry_run", p.DryRun,
		"since", p.Since, "until", until, "considered", res.Considered, "matched", res.Matched, "applied", res.Applied)
	return res, nil
}

// applyTo weighs one recorded purchase for the apply, counting it in res,
// and applies the action to it where it is due.
func (s *Service) applyTo(ctx context.Context, rp db.RoutedPurchase, p ApplyParams, res *ApplyResult) error {
	res.Considered++
	if !s.paysFor(rp, p.Action) {
		return nil
	}
	res.Matched++
	switch {
	case slices.Contains(rp.Actions, p.Action):
		res.Already++
		return nil
	case rp.Reversed:
		res.Reversed++
		return nil
	case p.DryRun:
		res.Applied++
		return nil
	}
	applied, err := s.applyOne(ctx, rp.Payment, p)
	switch {
	case errors.Is(err, errNothingToSend):
		res.Unsendable++
	case err != nil:
		return err
	case applied:
		res.Applied++
	default:
		res.Already++ // another apply, or a reversal, came first
	}
	return nil
}

// paysFor reports whether the routes in force now say the recorded
// purchase pays for action.
func (s *Service) paysFor(rp db.RoutedPurchase, action string) bool {
	var pu provider.Purchase
	if len(rp.Detail) == 0 || json.Unmarshal(rp.Detail, &pu) != nil {
		return false
	}
	return slices.Contains(s.cfg.Actions.Route(&pu), action)
}

// applyOne adds the action to one purchase with its fulfilment and
// dispatch job, in one transaction; false when the purchase was found
// paying for it already, or taken back.
func (s *Service) applyOne(ctx context.Context, pay db.Payment, p ApplyParams) (bool, error) {
	actor := "operator " + p.Operator
	var created []db.Born
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		eventPK, err := db.ApplyAction(ctx, tx, pay, p.Action, p.Operator)
		if err != nil || eventPK == 0 {
			return err
		}
		created, err = s.create(ctx, tx, eventPK, p.Action, actor, "action "+p.Action+" applied to a past purchase by "+actor)
		if err == nil && len(created) == 0 {
			return errNothingToSend
		}
		return err
	})
	if errors.Is(err, errNothingToSend) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("apply %s to %s %s: %w", p.Action, pay.Provider, pay.PaymentID, err)
	}
	s.announce(created)
	for _, b := range created {
		s.cfg.Metrics.Transition(b.Action, "", b.State, 1)
	}
	return len(created) > 0, nil
}
