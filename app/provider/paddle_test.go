package provider_test

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// paddleVector is the signed test vector of Paddle's official Go SDK.
type paddleVector struct {
	Secret, Signature, Body string
}

// loadTestdata reads testdata/<name>, and decodes it into into unless nil.
func loadTestdata(t *testing.T, name string, into any) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func headerOf(k, v string) map[string][]string { return map[string][]string{k: {v}} }

// TestPaddleVerifiesTheSDKVector: the signature Paddle's own SDK verifies,
// verified here, byte for byte; one byte changed, refused.
func TestPaddleVerifiesTheSDKVector(t *testing.T) {
	t.Parallel()
	var v paddleVector
	loadTestdata(t, "paddle/sdk_vector.json", &v)
	signedAt := time.Unix(1710929255, 0)
	p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{"pdl_ntfset_another_secret_rotated_out", v.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p.Verify(headerOf("Paddle-Signature", v.Signature), []byte(v.Body), signedAt.Add(time.Minute))
	if err != nil {
		t.Fatalf("the SDK's vector: %v", err)
	}
	if ev.ID != "evt_01hsdn97563968dy0szkmgjwh3" || ev.Type != "price.created" || ev.Fulfils() {
		t.Errorf("event = %+v", ev)
	}
	altered := []byte(v.Body)
	altered[len(altered)/2] ^= 1
	if _, err := p.Verify(headerOf("Paddle-Signature", v.Signature), altered, signedAt); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("a body altered by one byte: %v, want ErrSignature", err)
	}
	// Our signer agrees with Paddle's: the same secret, ts and body give
	// the SDK's signature.
	if got := providertest.SignPaddle([]byte(v.Body), v.Secret, signedAt).Get("Paddle-Signature"); got != v.Signature {
		t.Errorf("providertest.SignPaddle = %s, want the SDK's %s", got, v.Signature)
	}
}

func TestPaddleSignatures(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "pdl_ntfset_old_0123456789abcdef", "pdl_ntfset_new_0123456789abcdef"
	body := loadTestdata(t, "paddle/transaction_completed.json", nil)
	now := time.Unix(1767225600, 0)
	p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{newSecret}})
	if err != nil {
		t.Fatal(err)
	}
	sig := func(secret string, at time.Time) string {
		return providertest.SignPaddle(body, secret, at).Get("Paddle-Signature")
	}
	h1 := func(secret string) string { _, v, _ := strings.Cut(sig(secret, now), ";"); return v }
	tests := []struct {
		name   string
		header string
		want   error
	}{
		{"Signed", sig(newSecret, now), nil},
		{"RotationCarriesBothSignatures", sig(oldSecret, now) + ";" + h1(newSecret), nil},
		{"OnlyTheRetiredSecret", sig(oldSecret, now), provider.ErrSignature},
		{"Stale", sig(newSecret, now.Add(-time.Hour)), provider.ErrTimestamp},
		{"FromTheFuture", sig(newSecret, now.Add(time.Hour)), provider.ErrTimestamp},
		{"TwoTimestamps", "ts=" + now.Format("") + "1;" + sig(newSecret, now), provider.ErrSignature},
		{"Missing", "", provider.ErrSignature},
		{"NotHex", "ts=1767225600;h1=zz", provider.ErrSignature},
		{"NoH1", "ts=1767225600", provider.ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := p.Verify(headerOf("Paddle-Signature", tt.header), body, now)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Verify(%q) = %v, want %v", tt.header, err, tt.want)
			}
		})
	}
}

// TestPaddleRules: transaction.completed with status completed fulfils the
// transaction; transaction.paid, another status, a renewal (unless asked)
// and a missing id never do.
func TestPaddleRules(t *testing.T) {
	t.Parallel()
	var fixture map[string]any
	loadTestdata(t, "paddle/transaction_completed.json", &fixture)
	const secret = "pdl_ntfset_rules_0123456789abcdef"
	now := time.Unix(1767225600, 0)
	variant := func(typ string, edit func(data map[string]any)) []byte {
		var ev map[string]any
		b, _ := json.Marshal(fixture)
		_ = json.Unmarshal(b, &ev)
		ev["event_type"] = typ
		if edit != nil {
			edit(ev["data"].(map[string]any))
		}
		out, _ := json.Marshal(ev)
		return out
	}
	tests := []struct {
		name     string
		renewals bool
		body     []byte
		payment  string
		note     string
	}{
		{"CompletedFulfilsTheTransaction", false, variant("transaction.completed", nil), "txn_01h8dzxgkvdwemdhbpcapj2tbj", ""},
		{"PaidNeverFulfils", false, variant("transaction.paid", func(d map[string]any) { d["status"] = "paid" }), "", ""},
		{"AnotherStatusWaits", false, variant("transaction.completed", func(d map[string]any) { d["status"] = "past_due" }), "", `status is "past_due"`},
		{"RenewalsOnlyWhenAsked", false, variant("transaction.completed", func(d map[string]any) { d["origin"] = "subscription_recurring" }), "", "renewal"},
		{"RenewalAsked", true, variant("transaction.completed", func(d map[string]any) { d["origin"] = "subscription_recurring" }), "txn_01h8dzxgkvdwemdhbpcapj2tbj", ""},
		{"PaymentMethodChangePaysNothing", false, variant("transaction.completed", func(d map[string]any) { d["origin"] = "subscription_payment_method_change" }), "", "pays for no purchase"},
		{"SubscriptionUpdatePaysNothing", false, variant("transaction.completed", func(d map[string]any) { d["origin"] = "subscription_update" }), "", "pays for no purchase"},
		{"ZeroValueCheckoutIsAPurchase", false, variant("transaction.completed", func(d map[string]any) {
			d["details"].(map[string]any)["totals"].(map[string]any)["grand_total"] = "0"
		}), "txn_01h8dzxgkvdwemdhbpcapj2tbj", ""},
		{"NumericIDIsFlagged", false, variant("transaction.completed", func(d map[string]any) { d["id"] = 42 }), "", "no string transaction id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{secret}, FulfilRenewals: tt.renewals})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := p.Verify(providertest.SignPaddle(tt.body, secret, now), tt.body, now)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "evt_01h8e1jxjnw9ra6zarhnz1a7y1" || ev.PaymentID != tt.payment || !strings.Contains(ev.Note+ev.Unmapped, tt.note) {
				t.Errorf("event = id %q payment %q note %q unmapped %q, want payment %q note ~%q", ev.ID, ev.PaymentID, ev.Note, ev.Unmapped, tt.payment, tt.note)
			}
			if ev.Fulfils() && (ev.Paid == nil || ev.Paid.Currency != "USD") {
				t.Errorf("paid = %+v, want the transaction's grand_total in USD", ev.Paid)
			}
			if (tt.name == "NumericIDIsFlagged") != (ev.Unmapped != "") {
				t.Errorf("unmapped = %q: only a paid transaction without a readable id is flagged", ev.Unmapped)
			}
		})
	}
}

// TestPaddleReversals: adjustments by Paddle's rules, from the official
// Node SDK's adjustment.updated mock.
func TestPaddleReversals(t *testing.T) {
	t.Parallel()
	var mock map[string]any
	loadTestdata(t, "paddle/adjustment_updated.json", &mock)
	p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{"pdl_ntfset_01reversal_secret"}})
	if err != nil {
		t.Fatal(err)
	}
	variant := func(fields map[string]any) []byte {
		var ev map[string]any
		b, _ := json.Marshal(mock)
		_ = json.Unmarshal(b, &ev)
		data := ev["data"].(map[string]any)
		for k, v := range fields {
			if v == nil {
				delete(data, k)
			} else {
				data[k] = v
			}
		}
		out, _ := json.Marshal(ev)
		return out
	}
	const txn = "txn_01h8bxpvx398a7zbawb77y0kp5"
	tests := []struct {
		name string
		body []byte
		want *provider.Reversal
	}{
		{"TheSDKsPartialRefund", variant(nil), &provider.Reversal{PaymentID: txn, Kind: provider.Refund}},
		{"FullRefund", variant(map[string]any{"type": "full"}), &provider.Reversal{PaymentID: txn, Kind: provider.Refund, Full: true}},
		{"RefundPendingApproval", variant(map[string]any{"status": "pending_approval"}), nil},
		{"RefundRejected", variant(map[string]any{"status": "rejected"}), nil},
		{"Chargeback", variant(map[string]any{"action": "chargeback"}), &provider.Reversal{PaymentID: txn, Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"ChargebackWarning", variant(map[string]any{"action": "chargeback_warning"}), &provider.Reversal{PaymentID: txn, Kind: provider.Dispute, Stage: provider.DisputeOpened}},
		{"ChargebackReversed", variant(map[string]any{"action": "chargeback_reverse"}), &provider.Reversal{PaymentID: txn, Kind: provider.Dispute, Stage: provider.DisputeWon}},
		{"Credit", variant(map[string]any{"action": "credit"}), nil},
		{"NoTransaction", variant(map[string]any{"transaction_id": nil}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := p.Verify(providertest.SignPaddle(tt.body, "pdl_ntfset_01reversal_secret", time.Now()), tt.body, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ev.Reversal, tt.want) || ev.Fulfils() {
				t.Errorf("reversal %+v, want %+v", ev.Reversal, tt.want)
			}
			if tt.want == nil && ev.Note == "" {
				t.Error("no word on why it is no reversal")
			}
		})
	}
}

// TestPaddleSubscriptionLife reads a subscription's life from the official
// Node SDK's mocks, signed as Paddle signs: the transaction that starts it
// names it; subscription.created links it to that transaction; a
// cancellation scheduled for the period's end, past due and paused are no
// end; subscription.canceled, or an update saying canceled, ends it.
func TestPaddleSubscriptionLife(t *testing.T) {
	t.Parallel()
	const secret = "pdl_ntfset_subscriptions_0123456789"
	now := time.Unix(1767225600, 0)
	p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{secret}})
	require.NoError(t, err)
	require.Subset(t, provider.PaddleRuleTypes, []string{"subscription.created", "subscription.canceled", "subscription.updated"}, "a backfill lists them")
	read := func(name string, edit func(env, data map[string]any)) provider.Event {
		t.Helper()
		var env map[string]any
		loadTestdata(t, name, &env)
		if edit != nil {
			edit(env, env["data"].(map[string]any))
		}
		body, err := json.Marshal(env)
		require.NoError(t, err)
		ev, err := p.Verify(providertest.SignPaddle(body, secret, now), body, now)
		require.NoError(t, err)
		return ev
	}
	const sub, txn = "sub_01h7ht5z5wdg9pz18jx1fagp8k", "txn_01h7hst69d7tar4rm6vyeb0j36"

	start := read("paddle/transaction_completed.json", func(_, d map[string]any) { d["subscription_id"], d["origin"] = sub, "web" })
	require.True(t, start.Fulfils())
	gotSub, gotPay := start.StartsSubscription()
	require.Equal(t, sub, gotSub)
	require.Equal(t, start.PaymentID, gotPay)
	renewal := read("paddle/transaction_completed.json", func(_, d map[string]any) { d["subscription_id"], d["origin"] = sub, "subscription_recurring" })
	gotSub, _ = renewal.StartsSubscription()
	require.Empty(t, gotSub, "a renewal starts nothing")
	require.Equal(t, &provider.Invoice{ID: start.PaymentID, Payment: start.PaymentID, Subscription: sub, First: true}, start.Invoice, "one of its payments: the first")
	require.False(t, renewal.Invoice.First, "a renewal's payment")

	created := read("paddle/subscription_created.json", nil)
	require.False(t, created.Fulfils())
	gotSub, gotPay = created.StartsSubscription()
	require.Equal(t, sub, gotSub)
	require.Equal(t, txn, gotPay, "the transaction that created the subscription")

	for typ, tt := range map[string]struct {
		status  string
		want    *provider.Reversal
		resumes bool
	}{
		"subscription.updated":   {"active", nil, true}, // with a cancellation scheduled: the cancel click
		"subscription.past_due":  {"past_due", &provider.Reversal{Kind: provider.Suspension, Subscription: sub, Standing: provider.PastDue}, false},
		"subscription.paused":    {"paused", &provider.Reversal{Kind: provider.Suspension, Subscription: sub, Standing: provider.Paused}, false},
		"subscription.resumed":   {"active", nil, true},
		"subscription.activated": {"trialing", nil, true},
	} {
		ev := read("paddle/subscription_canceled.json", func(env, d map[string]any) {
			env["event_type"], d["status"] = typ, tt.status
			if typ == "subscription.updated" {
				d["scheduled_change"] = map[string]any{"action": "cancel", "effective_at": "2024-02-11T08:07:35Z", "resume_at": nil}
			}
		})
		require.Equal(t, tt.want, ev.Reversal, typ)
		require.Equal(t, tt.resumes, ev.Resumes == sub, typ)
		require.False(t, ev.StandingAt.IsZero(), "%s: occurred_at, signed", typ)
	}
	canceled := read("paddle/subscription_canceled.json", nil)
	require.Equal(t, &provider.Reversal{Kind: provider.End, Subscription: sub}, canceled.Reversal)
	gotSub, _ = canceled.StartsSubscription()
	require.Empty(t, gotSub, "the mock's transaction_id on a cancellation is not read: Paddle sends it on subscription.created alone")
	updated := read("paddle/subscription_canceled.json", func(env, _ map[string]any) { env["event_type"] = "subscription.updated" })
	require.Equal(t, canceled.Reversal, updated.Reversal)
}
