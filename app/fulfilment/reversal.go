package fulfilment

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// reverses is the payment ev takes back for at least one action and the
// actions it takes back, by their policies; "" and nil when it takes
// back none.
func (s *Service) reverses(ev provider.Event) (string, []string) {
	if ev.Reversal == nil {
		return "", nil
	}
	if names := s.cfg.Actions.Revoking(*ev.Reversal); len(names) > 0 {
		return ev.Reversal.PaymentID, names
	}
	return "", nil
}

// ReversedBeforeDispatch is the reason a pending fulfilment is cancelled
// when its payment was taken back before it went out, without a lookup
// to ask.
const ReversedBeforeDispatch = "payment reversed before it went out: never sent"

// RevocationCreated is the first transition's reason of a revocation.
const RevocationCreated = "payment reversed after it was fulfilled: taking it back"

// askReversedPending is the reason a pending fulfilment of a payment taken
// back is parked rather than cancelled.
const askReversedPending = "payment reversed before it went out, by Guardian's rows: whether the receiver acted under the payment's key " +
	"(a restored database forgets what it sent) is asked by lookup; done is taken back, not done is cancelled"

// takeBack applies reversals to the given payments in tx, per action: a
// pending fulfilment of an action taken back does not go out
// (stopReversedPending says where it goes), a fulfilled one gets its
// revocation and that a dispatch job. A fulfilment
// in flight or parked is left to its facts: once it settles fulfilled, the
// sweep takes it back. Payments nil is the sweep's catch-all: every
// reversed payment's pending rows, and revocations for the payments settled
// fulfilled since settledSince (every payment when it is zero). It returns
// what it moved.
func (s *Service) takeBack(ctx context.Context, tx pgx.Tx, actor string, payments []db.Payment, settledSince time.Time) (stopped map[state.State][]string, revoking []string, err error) {
	// What reverses a subscription's start reverses its grants again
	// (db's payment_reversal): they are taken back with it.
	if payments, err = db.WithGrants(ctx, tx, payments); err != nil {
		return nil, nil, err
	}
	if stopped, err = s.stopReversedPending(ctx, tx, actor, payments); err != nil {
		return nil, nil, err
	}
	if payments == nil && !settledSince.IsZero() {
		revoking, err = db.CreateRevocationsSettledSince(ctx, tx, actor, RevocationCreated, settledSince)
	} else {
		revoking, err = db.CreateRevocations(ctx, tx, actor, RevocationCreated, payments)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(revoking) > 0 {
		if err := s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, revoking...); err != nil {
			return nil, nil, fmt.Errorf("enqueue revocations: %w", err)
		}
	}
	return stopped, revoking, nil
}

// stopReversedPending moves the pending fulfilments of the given reversed
// payments (nil: of every reversed payment), of the actions taken back,
// where reversedPending says, and returns them with the state each went
// to.
//
// Guardian's rows say nothing went out, but a database restored from
// before the call forgets that it did: a fulfilment of an action with a
// lookup is parked and its key asked (done: fulfilled and taken back; not
// done: cancelled; Reconcile); one without has nobody to ask, and the rows
// decide: cancelled, never sent.
func (s *Service) stopReversedPending(ctx context.Context, q db.DBTX, actor string, payments []db.Payment) (map[state.State][]string, error) {
	var silent []string
	for _, name := range s.cfg.Actions.Names() {
		if !slices.Contains(s.asks, name) {
			silent = append(silent, name)
		}
	}
	out := map[state.State][]string{}
	for _, move := range []struct {
		actions []string
		to      state.State
		reason  string
	}{{s.asks, state.NeedsReconciliation, askReversedPending}, {silent, state.Cancelled, ReversedBeforeDispatch}} {
		if len(move.actions) == 0 {
			continue
		}
		stopped, err := db.MoveReversedPending(ctx, q, actor, payments, move.actions, move.to, move.reason)
		if err != nil {
			return nil, err
		}
		if len(stopped) > 0 {
			out[move.to] = stopped
		}
	}
	return out, nil
}

// The sweep's catch-all for revocations reads only the payments settled
// fulfilled since its last round, less takeBackOverlap for transactions
// that stamped their rows before that round and committed after it; every
// FullTakeBackEvery, and at the first round a database has seen, it reads
// every reversed payment, which bounds anything a window missed. Its cost
// is then the recent work's, where reading every reversal each round grew
// with the history of refunds (240 ms at a million payments;
// docs/performance.md). Where it stands is kept in the database
// (db.TakeBackWindow), so a new leader goes on from there.
const (
	takeBackOverlap   = 5 * time.Minute
	FullTakeBackEvery = time.Hour
)

// takeBackWindow is where the sweep's revocation catch-all stands: the
// transaction time of its last round, and of its last full round.
type takeBackWindow struct {
	last, lastFull time.Time
}

// since says where the round at now starts: zero for a full round.
func (w takeBackWindow) since(now time.Time) time.Time {
	if w.last.IsZero() || now.Sub(w.lastFull) >= FullTakeBackEvery {
		return time.Time{}
	}
	return w.last.Add(-takeBackOverlap)
}

// after is the window once a round at now that started at since commits.
func (w takeBackWindow) after(now, since time.Time) takeBackWindow {
	w.last = now
	if since.IsZero() {
		w.lastFull = now
	}
	return w
}

// sweepTakeBack is the sweep's catch-all round in tx: it starts where the
// window stored by the last round says, and stores the window for the
// next in the same transaction, so a round that rolls back moves nothing.
// Its statements take one process each (db.Serial): the round's cycles
// are taken from intake and dispatch.
func (s *Service) sweepTakeBack(ctx context.Context, tx pgx.Tx, actor string) (cancelled map[state.State][]string, revoking []string, err error) {
	if err := db.Serial(ctx, tx); err != nil {
		return nil, nil, err
	}
	now, err := db.TxTime(ctx, tx)
	if err != nil {
		return nil, nil, err
	}
	var w takeBackWindow
	if w.last, w.lastFull, err = db.TakeBackWindow(ctx, tx); err != nil {
		return nil, nil, err
	}
	since := w.since(now)
	if cancelled, revoking, err = s.takeBack(ctx, tx, actor, nil, since); err != nil {
		return nil, nil, err
	}
	w = w.after(now, since)
	return cancelled, revoking, db.SetTakeBackWindow(ctx, tx, w.last, w.lastFull)
}

// Whole refunds. Many refund events do not say whether they return the
// whole payment (Stripe's refund.updated alone, PayPal's
// PAYMENT.CAPTURE.REFUNDED, Shopify's refunds/create, Adyen's REFUND), yet
// the default policy takes back only a whole one. Whether it is whole is
// a fact: the amounts the payment's refunds returned against the amount its
// own paid event says was paid, from the providers' signed fields, in
// minor units and one currency. Such a refund is stored undecided
// (refund_of); intake weighs the payment's undecided refunds when one more
// arrives, and when the payment's paid event arrives after them, and a
// payment found refunded whole is reversed as by a refund that said so.

// refundOf is the payment whose refunds ev must be weighed with: a refund
// with an amount that does not say it is whole, under a policy that takes
// a payment back for a whole refund and not for any; "" otherwise.
func (s *Service) refundOf(ev provider.Event) string {
	r := ev.Reversal
	if r == nil || r.Kind != provider.Refund || r.Full || r.Amount == nil {
		return ""
	}
	// An action a whole refund takes back and this one does not.
	whole := s.cfg.Actions.Revoking(provider.Reversal{Kind: provider.Refund, Full: true})
	_, now := s.reverses(ev)
	for _, name := range whole {
		if !slices.Contains(now, name) {
			return r.PaymentID
		}
	}
	return ""
}

// weighRefunds weighs, in tx, the undecided refunds of every payment that a
// stored event of the batch gives a new fact for (a refund of it, or its
// paid event), and marks those refunded whole as reversed. It returns
// those payments, which the caller takes back. The payments are locked
// first (db.LockPayments), so two batches weighing one payment see each
// other's refunds.
func (s *Service) weighRefunds(ctx context.Context, tx pgx.Tx, events []db.BatchEvent, stored []db.BatchEventResult, moved []db.Payment) ([]db.Payment, error) {
	weigh := slices.Clone(moved)
	for i, e := range events {
		switch {
		case !stored[i].Inserted:
		case e.RefundOf != "":
			weigh = append(weigh, db.Payment{Provider: e.Provider, PaymentID: e.RefundOf})
		case stored[i].RefundsPending:
			weigh = append(weigh, db.Payment{Provider: e.Provider, PaymentID: e.PaymentID})
		}
	}
	return s.weigh(ctx, tx, weigh)
}

// weigh weighs, in tx, the undecided refunds of the given payments, and
// marks those refunded whole as reversed. It returns those payments.
func (s *Service) weigh(ctx context.Context, tx pgx.Tx, weigh []db.Payment) ([]db.Payment, error) {
	if len(weigh) == 0 {
		return nil, nil
	}
	if err := db.LockPayments(ctx, tx, weigh); err != nil {
		return nil, err
	}
	shares, err := db.RefundShares(ctx, tx, weigh)
	if err != nil {
		return nil, err
	}
	var whole []db.Payment
	for len(shares) > 0 {
		n := 1
		for n < len(shares) && shares[n].Payment == shares[0].Payment {
			n++
		}
		if refundedWhole(shares[:n]) {
			whole = append(whole, shares[0].Payment)
		}
		shares = shares[n:]
	}
	if len(whole) == 0 {
		return nil, nil
	}
	full := provider.Reversal{Kind: provider.Refund, Full: true}
	return whole, db.MarkWholeRefunds(ctx, tx, whole, full.String(), append([]string{}, s.cfg.Actions.Revoking(full)...))
}

// refundedWhole reports whether one payment's refunds returned all it was
// paid: a cumulative amount (the refunded total so far) or the sum of the
// refunds, each refund counted once at its largest amount, at least the
// amount paid, in the paid currency. A payment whose paid amount is not
// known, or nothing, is never refunded whole by amounts.
func refundedWhole(shares []db.RefundShare) bool {
	paid := shares[0].Paid
	if paid == nil || paid.Minor <= 0 {
		return false
	}
	var cumulative, sum int64
	each := map[string]int64{}
	for _, s := range shares {
		switch {
		case s.Amount.Currency != paid.Currency:
		case s.Cumulative:
			cumulative = max(cumulative, s.Amount.Minor)
		default:
			id := cmp.Or(s.RefundID, fmt.Sprintf("event %d", s.EventPK))
			each[id] = max(each[id], s.Amount.Minor)
		}
	}
	for _, v := range each {
		sum += v
	}
	return max(cumulative, sum) >= paid.Minor
}
