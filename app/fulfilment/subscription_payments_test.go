package fulfilment_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// A subscription's payments as Stripe's 2025-03-31 API tells them: the
// Checkout Session that started it (its purchase, cs_N), the first
// invoice's invoice.paid (the subscription it bills, billing reason
// subscription_create), the invoice_payment.paid joining that invoice to
// the payment intent that paid it, and a refund naming only the payment
// intent. A refund names neither the session nor the subscription.
type stripeSubscription struct {
	t      *testing.T
	stripe *provider.Stripe
}

func newStripeSubscription(t *testing.T, fulfilTypes ...string) stripeSubscription {
	s, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"whsec_subscription_payments_0123456789"}, FulfilTypes: fulfilTypes})
	require.NoError(t, err)
	return stripeSubscription{t: t, stripe: s}
}

func (s stripeSubscription) read(format string, args ...any) provider.Event {
	s.t.Helper()
	ev, err := s.stripe.Read(fmt.Appendf(nil, format, args...))
	require.NoError(s.t, err)
	return ev
}

// start is the session, naming its subscription but not its invoice, so
// that the invoice's events alone say the invoice is the first.
func (s stripeSubscription) start(n int) provider.Event {
	return s.read(`{"id":"evt_cs_%[1]d","object":"event","type":"checkout.session.completed","livemode":false,"data":{"object":{"id":"cs_%[1]d","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_%[1]d","amount_total":5000,"currency":"eur","metadata":{"course":"go"}}}}`, n)
}

func (s stripeSubscription) invoicePaid(n int, invoice, reason string) provider.Event {
	return s.read(`{"id":"evt_%[2]s_paid","object":"event","type":"invoice.paid","livemode":false,"data":{"object":{"id":"%[2]s","object":"invoice","billing_reason":"%[3]s","amount_paid":5000,"currency":"eur","metadata":{"course":"go"},"parent":{"type":"subscription_details","subscription_details":{"subscription":"sub_%[1]d"}}}}}`, n, invoice, reason)
}

func (s stripeSubscription) invoicePayment(invoice, intent string) provider.Event {
	return s.read(`{"id":"evt_%[1]s_payment","object":"event","type":"invoice_payment.paid","livemode":false,"data":{"object":{"id":"inpay_%[1]s","object":"invoice_payment","invoice":"%[1]s","status":"paid","payment":{"type":"payment_intent","payment_intent":"%[2]s"}}}}`, invoice, intent)
}

// refund returns the whole amount through refund.created, which does not
// say it is whole: it is weighed against what the purchase paid.
func (s stripeSubscription) refund(intent string) provider.Event {
	return s.read(`{"id":"evt_re_%[1]s","object":"event","type":"refund.created","livemode":false,"data":{"object":{"id":"re_%[1]s","object":"refund","payment_intent":"%[1]s","amount":5000,"currency":"eur","status":"succeeded"}}}`, intent)
}

func (s stripeSubscription) dispute(intent string) provider.Event {
	return s.read(`{"id":"evt_dp_%[1]s","object":"event","type":"charge.dispute.created","livemode":false,"data":{"object":{"id":"dp_%[1]s","object":"dispute","payment_intent":"%[1]s","status":"needs_response"}}}`, intent)
}

func TestRefundsOfASubscriptionsPayments(t *testing.T) {
	t.Parallel()

	t.Run("TheFirstPaymentsRefundTakesBackTheStartInEveryOrder", func(t *testing.T) {
		t.Parallel()
		s := newStripeSubscription(t)
		b := setup(t, newCoursePlatform("routes.yaml").option)
		perms := permutations([]string{"start", "invoice", "payment", "refund"})
		for n, order := range perms {
			payment := fmt.Sprintf("cs_%d", n)
			for _, step := range order {
				ev := map[string]provider.Event{
					"start": s.start(n), "invoice": s.invoicePaid(n, fmt.Sprintf("in_%d", n), "subscription_create"),
					"payment": s.invoicePayment(fmt.Sprintf("in_%d", n), fmt.Sprintf("pi_%d", n)), "refund": s.refund(fmt.Sprintf("pi_%d", n)),
				}[step]
				_, err := b.svc.Accept(b.ctx, ev)
				require.NoError(t, err)
				b.settleAll(t, payment)
			}
			got := b.ledger(t, payment)
			require.Equal(t, got["licence fulfil"], got["licence revoke"], "%v: the refund of the first payment leaves no access: %v", order, got)
			// The refund is known to be the start's when the last of the
			// four arrives: the start granted before that is taken back; a
			// start that comes last is reversed before its rows are made.
			if order[3] == "start" {
				require.Zero(t, got["licence fulfil"], "%v: a start whose first payment is refunded grants nothing", order)
			} else {
				require.Equal(t, 1, got["licence fulfil"], "%v: granted before the refund was known to be the start's", order)
			}
			require.Equal(t, 1, got["welcome_email fulfil"], "%v: what no refund takes back is kept", order)
			require.NotEqual(t, state.Pending, b.byAction(t, payment, state.Fulfil)["licence"].State, "%v: no grant left to go out", order)
			refunds := b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_type = 'refund.created' AND reverses = $1`, payment)
			require.Equal(t, 1, refunds, "%v: the refund names the subscription's purchase", order)
		}
		require.Len(t, perms, 24)
	})

	t.Run("ARenewalsRefundTakesBackTheRenewalAlone", func(t *testing.T) {
		t.Parallel()
		s := newStripeSubscription(t, "checkout.session.completed", "invoice.paid")
		b := setup(t, newCoursePlatform("routes.yaml").option)
		for _, ev := range []provider.Event{
			s.start(1), s.invoicePaid(1, "in_first", "subscription_create"), s.invoicePayment("in_first", "pi_first"),
			s.invoicePaid(1, "in_renewal", "subscription_cycle"),
		} {
			_, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
		}
		b.settleAll(t, "cs_1")
		b.settleAll(t, "in_renewal")
		require.Equal(t, 1, b.ledger(t, "in_renewal")["licence fulfil"], "the renewal is a purchase of its own")
		require.Empty(t, b.ledger(t, "in_first"), "the first invoice is the session's purchase, not one of its own")

		// The refund comes before the event that says which payment paid
		// the renewal; a dispute of the same payment after it.
		_, err := b.svc.Accept(b.ctx, s.refund("pi_renewal"))
		require.NoError(t, err)
		b.settleAll(t, "in_renewal")
		require.Zero(t, b.ledger(t, "in_renewal")["licence revoke"], "a refund of a payment Guardian cannot place takes nothing back")
		_, err = b.svc.Accept(b.ctx, s.invoicePayment("in_renewal", "pi_renewal"))
		require.NoError(t, err)
		_, err = b.svc.Accept(b.ctx, s.dispute("pi_renewal"))
		require.NoError(t, err)
		b.settleAll(t, "in_renewal")
		require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, b.ledger(t, "in_renewal"),
			"the renewal's refund, resolved once its payment is known, takes the renewal back once; the dispute adds nothing")
		require.Equal(t, map[string]int{"licence fulfil": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_1"),
			"a renewal's refund is not the end of the subscription")
	})

	t.Run("PaymentsAndRefundsAtOnce", func(t *testing.T) {
		t.Parallel()
		s := newStripeSubscription(t)
		b := setup(t, newCoursePlatform("routes.yaml").option)
		const subs = 16
		b.atOnce(t, subs, func(n int) []provider.Event {
			in, pi := fmt.Sprintf("in_%d", n), fmt.Sprintf("pi_%d", n)
			return []provider.Event{s.start(n), s.invoicePaid(n, in, "subscription_create"), s.invoicePayment(in, pi), s.refund(pi)}
		}, func(n int) string { return fmt.Sprintf("cs_%d", n) })
		for n := range subs {
			payment := fmt.Sprintf("cs_%d", n)
			got := b.ledger(t, payment)
			require.Equal(t, got["licence fulfil"], got["licence revoke"], "%s: a licence granted is taken back: %v", payment, got)
			require.NotEqual(t, state.Pending, b.byAction(t, payment, state.Fulfil)["licence"].State, "%s: no grant left to go out", payment)
		}
		require.Equal(t, subs, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_type = 'refund.created' AND reverses LIKE 'cs_%'`),
			"every refund resolved to its subscription's purchase")
	})

	t.Run("AnOperatorsLinkReadsStoredInvoices", func(t *testing.T) {
		t.Parallel()
		s := newStripeSubscription(t)
		b := setup(t, newCoursePlatform("routes.yaml").option, func(c *fulfilment.Config) {
			c.Mappers = map[string]provider.Mapper{"stripe": s.stripe}
		})
		for _, ev := range []provider.Event{s.start(1), s.invoicePaid(1, "in_1", "subscription_create"), s.invoicePayment("in_1", "pi_1")} {
			_, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
		}
		b.settleAll(t, "cs_1")
		_, err := b.db.Pool.Exec(b.ctx, `DELETE FROM subscription_invoice`) // as before invoices were recorded
		require.NoError(t, err)
		_, err = b.svc.Accept(b.ctx, s.refund("pi_1"))
		require.NoError(t, err)
		b.settleAll(t, "cs_1")
		require.Zero(t, b.ledger(t, "cs_1")["licence revoke"])

		res, err := b.svc.LinkStored(b.ctx, fulfilment.LinkParams{Operator: "ana"})
		require.NoError(t, err)
		require.Equal(t, fulfilment.LinkResult{Naming: 2, Ended: 1}, res, "the two invoice events read (the start is linked), the refund resolved")
		b.settleAll(t, "cs_1")
		require.Equal(t, 1, b.ledger(t, "cs_1")["licence revoke"])
		rows, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", "cs_1")
		require.NoError(t, err)
		require.NotEmpty(t, rows)
	})
}

// TestRefundsOfALemonSqueezySubscriptionsInvoices: Lemon Squeezy names a
// subscription's payments by its invoices. The first invoice's refund
// takes back what the order granted; a renewal, with renewals fulfilling,
// is a purchase of its own, and its refund takes back the renewal alone.
func TestRefundsOfALemonSqueezySubscriptionsInvoices(t *testing.T) {
	t.Parallel()
	l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{providertest.LemonSqueezySecret}, FulfilRenewals: true})
	require.NoError(t, err)
	cp := newCoursePlatform("routes.yaml")
	cp.set.Routes[0].Match = actions.Match{} // every purchase: a renewal invoice carries no custom data
	b := setup(t, cp.option)
	accept := func(name, typ, id, attrs string, settle ...string) {
		t.Helper()
		body := providertest.LemonSqueezyEvent(name, typ, id, attrs)
		ev, err := l.Verify(providertest.SignLemonSqueezy(body, providertest.LemonSqueezySecret, name), body, time.Now())
		require.NoError(t, err)
		_, err = b.svc.Accept(b.ctx, ev)
		require.NoError(t, err)
		for _, p := range settle {
			b.settleAllOf(t, "lemonsqueezy", p)
		}
	}
	ledger := func(payment string) map[string]int { return b.ledgerOf(t, "lemonsqueezy", payment) }
	accept("order_created", "orders", "1", `"status":"paid","total":999,"currency":"USD"`, "1")
	accept("subscription_created", "subscriptions", "7", `"order_id":1,"status":"active"`)
	accept("subscription_payment_success", "subscription-invoices", "55", `"subscription_id":7,"billing_reason":"initial","status":"paid","total":999,"currency":"USD"`)
	accept("subscription_payment_success", "subscription-invoices", "56", `"subscription_id":7,"billing_reason":"renewal","status":"paid","total":999,"currency":"USD"`, "56")
	require.Equal(t, 1, ledger("1")["licence fulfil"])
	require.Equal(t, 1, ledger("56")["licence fulfil"], "the renewal, a purchase of its own")

	accept("subscription_payment_refunded", "subscription-invoices", "56", `"subscription_id":7,"billing_reason":"renewal","status":"refunded"`, "56", "1")
	require.Equal(t, 1, ledger("56")["licence revoke"], "the renewal's refund takes the renewal back")
	require.Zero(t, ledger("1")["licence revoke"], "and not the order")
	accept("subscription_payment_refunded", "subscription-invoices", "55", `"subscription_id":7,"billing_reason":"initial","status":"refunded"`, "1")
	require.Equal(t, 1, ledger("1")["licence revoke"], "the first invoice's refund takes back what the order granted")
}

// TestASubscriptionsLifeInEveryOrder: a Stripe subscription's start, two
// renewals (invoice.paid fulfilling), the cancellation at the period's
// end and the deletion, read by Stripe's rules from bodies as Stripe sends
// them, in each of the 120 orders. Each renewal acts once whatever the
// order, and is never taken back by the end; the start's licence is
// granted and taken back once when the start comes before the end, and
// never granted when the end comes first (an end before the start grants
// nothing: the "same ledger in every order" cannot hold with that
// rule, and the rule wins: no access outlives the end).
func TestASubscriptionsLifeInEveryOrder(t *testing.T) {
	t.Parallel()
	s := newStripeSubscription(t, "checkout.session.completed", "invoice.paid")
	b := setup(t, newCoursePlatform("routes.yaml").option)
	perms := permutations([]string{"start", "renewal1", "renewal2", "cancel", "end"})
	for n, order := range perms {
		start, r1, r2 := fmt.Sprintf("cs_%d", n), fmt.Sprintf("in_%d_1", n), fmt.Sprintf("in_%d_2", n)
		events := map[string]provider.Event{
			"start": s.start(n), "renewal1": s.invoicePaid(n, r1, "subscription_cycle"), "renewal2": s.invoicePaid(n, r2, "subscription_cycle"),
			"cancel": s.read(`{"id":"evt_cancel_%[1]d","object":"event","type":"customer.subscription.updated","created":1764579600,"livemode":false,"data":{"object":{"id":"sub_%[1]d","object":"subscription","status":"active","cancel_at_period_end":true}}}`, n),
			"end":    s.read(`{"id":"evt_end_%[1]d","object":"event","type":"customer.subscription.deleted","created":1764583200,"livemode":false,"data":{"object":{"id":"sub_%[1]d","object":"subscription","status":"canceled"}}}`, n),
		}
		for _, step := range order {
			_, err := b.svc.Accept(b.ctx, events[step])
			require.NoError(t, err)
			for _, p := range []string{start, r1, r2} {
				b.settleAll(t, p)
			}
		}
		for _, r := range []string{r1, r2} {
			require.Equal(t, map[string]int{"licence fulfil": 1, "welcome_email fulfil": 1}, b.ledger(t, r), "%v: each renewal acts once, and the end leaves it", order)
		}
		want := map[string]int{"welcome_email fulfil": 1}
		if slices.Index(order, "start") < slices.Index(order, "end") {
			want = map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}
		}
		require.Equal(t, want, b.ledger(t, start), "%v", order)
	}
	require.Len(t, perms, 120)
}
