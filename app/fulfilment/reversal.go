package fulfilment

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Revoke is one reason a policy takes a payment back.
type Revoke string

// The reasons a policy may take a payment back for.
const (
	// OnFullRefund: a refund of the whole payment.
	OnFullRefund Revoke = "full_refund"
	// OnAnyRefund: any refund, partial ones included.
	OnAnyRefund Revoke = "any_refund"
	// OnDisputeOpened: a dispute opened (the funds are held or withdrawn
	// while it runs).
	OnDisputeOpened Revoke = "dispute_opened"
	// OnDisputeLost: a dispute lost.
	OnDisputeLost Revoke = "dispute_lost"
)

// AllRevokes lists every reason, in the order an operator reads them.
var AllRevokes = []Revoke{OnFullRefund, OnAnyRefund, OnDisputeOpened, OnDisputeLost}

// ReversalPolicy is the set of reasons a deployment takes a fulfilled
// payment back for. A payment is taken back at most once whatever number
// of its reversals match.
type ReversalPolicy []Revoke

// DefaultReversalPolicy takes a payment back on a full refund and on a
// dispute lost: the money is gone for good. A partial refund (a goodwill
// discount) and an open dispute (which the merchant may win) leave it.
var DefaultReversalPolicy = ReversalPolicy{OnFullRefund, OnDisputeLost}

// ParseReversalPolicy reads a comma-separated policy ("full_refund,
// dispute_lost"); "none" takes nothing back.
func ParseReversalPolicy(s string) (ReversalPolicy, error) {
	if strings.TrimSpace(s) == "none" {
		return ReversalPolicy{}, nil
	}
	var p ReversalPolicy
	for _, part := range strings.Split(s, ",") {
		r := Revoke(strings.TrimSpace(part))
		if !slices.Contains(AllRevokes, r) {
			names := make([]string, len(AllRevokes))
			for i, a := range AllRevokes {
				names[i] = string(a)
			}
			return nil, fmt.Errorf("%q is not one of %s, or none", r, strings.Join(names, ", "))
		}
		p = append(p, r)
	}
	return p, nil
}

// Revokes reports whether the policy takes the payment back for r.
func (p ReversalPolicy) Revokes(r provider.Reversal) bool {
	switch r.Kind {
	case provider.Refund:
		return slices.Contains(p, OnAnyRefund) || (r.Full && slices.Contains(p, OnFullRefund))
	case provider.Dispute:
		return (r.Stage == provider.DisputeOpened && slices.Contains(p, OnDisputeOpened)) ||
			(r.Stage == provider.DisputeLost && (slices.Contains(p, OnDisputeLost) || slices.Contains(p, OnDisputeOpened)))
	}
	return false
}

// reverses is the payment the policy takes back for ev, or "".
func (s *Service) reverses(ev provider.Event) string {
	if ev.Reversal != nil && s.cfg.Reversals.Revokes(*ev.Reversal) {
		return ev.Reversal.PaymentID
	}
	return ""
}

// takeBack applies reversals to the given payments in tx: a pending
// fulfilment is cancelled before it goes out, a fulfilled one gets its
// revocation and that a dispatch job. A fulfilment in flight or parked is
// left to its facts: once it settles fulfilled, the sweep takes it back.
// Payments nil is the sweep's catch-all: every reversed payment's pending
// rows, and revocations for the payments settled fulfilled since
// settledSince (every payment when it is zero). It returns what it moved.
func (s *Service) takeBack(ctx context.Context, tx pgx.Tx, actor string, payments []db.Payment, settledSince time.Time) (cancelled, revoking []string, err error) {
	if cancelled, err = db.CancelReversedPending(ctx, tx, actor, payments); err != nil {
		return nil, nil, err
	}
	if payments == nil && !settledSince.IsZero() {
		revoking, err = db.CreateRevocationsSettledSince(ctx, tx, actor, settledSince)
	} else {
		revoking, err = db.CreateRevocations(ctx, tx, actor, payments)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(revoking) > 0 {
		if err := s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, revoking...); err != nil {
			return nil, nil, fmt.Errorf("enqueue revocations: %w", err)
		}
	}
	return cancelled, revoking, nil
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
func (s *Service) sweepTakeBack(ctx context.Context, tx pgx.Tx, actor string) (cancelled, revoking []string, err error) {
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
