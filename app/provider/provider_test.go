package provider_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

const (
	stripeSecret   = "whsec_test_stripe_secret"
	stripeRotated  = "whsec_test_stripe_rotated"
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardOther  = "whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24="
)

var now = time.Unix(1_800_000_000, 0)

const checkoutCompleted = `{"id":"evt_1","object":"event","api_version":"2020-08-27","type":"checkout.session.completed","data":{"object":{"id":"cs_1","object":"checkout.session","payment_intent":"pi_1"}}}`
const intentSucceeded = `{"id":"evt_2","object":"event","api_version":"2025-01-27.acacia","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent"}}}`

func newStripe(t *testing.T, secrets ...string) *provider.Stripe {
	t.Helper()
	s, err := provider.NewStripe(provider.StripeConfig{Secrets: secrets})
	require.NoError(t, err)
	return s
}

func newStandard(t *testing.T, secrets ...string) *provider.Standard {
	t.Helper()
	s, err := provider.NewStandard(provider.StandardConfig{Secrets: secrets})
	require.NoError(t, err)
	return s
}

func TestStripe(t *testing.T) {
	t.Parallel()

	t.Run("OtherTypesDoNotFulfil", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret)
		body := `{"id":"evt_4","type":"customer.created","data":{"object":{"id":"cus_1"}}}`
		ev, err := s.Verify(providertest.SignStripe([]byte(body), stripeSecret, now), []byte(body), now)
		require.NoError(t, err)
		require.False(t, ev.Fulfils())
	})

	t.Run("FulfillingTypeWithoutPaymentIsStoredNotRefused", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret)
		body := `{"id":"e","type":"checkout.session.completed","data":{"object":{"payment_status":"paid"}}}`
		ev, err := s.Verify(providertest.SignStripe([]byte(body), stripeSecret, now), []byte(body), now)
		require.NoError(t, err, "well signed: acknowledged")
		require.False(t, ev.Fulfils())
		require.Equal(t, "no payment id in data.object", ev.Unmapped, "paid, but no purchase to map: flagged")
		require.Empty(t, ev.Note)
	})

	t.Run("UnknownPaymentStatusIsFlagged", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret)
		body := `{"id":"e","type":"checkout.session.completed","data":{"object":{"id":"cs_1","payment_status":"paid_later","payment_intent":"pi_1"}}}`
		ev, err := s.Verify(providertest.SignStripe([]byte(body), stripeSecret, now), []byte(body), now)
		require.NoError(t, err)
		require.False(t, ev.Fulfils())
		require.Contains(t, ev.Unmapped, `payment_status Guardian does not know: "paid_later"`)
	})

	t.Run("UnpaidIsANoteNotAFlag", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret)
		body := `{"id":"e","type":"checkout.session.completed","data":{"object":{"id":"cs_1","payment_status":"unpaid","payment_intent":"pi_1"}}}`
		ev, err := s.Verify(providertest.SignStripe([]byte(body), stripeSecret, now), []byte(body), now)
		require.NoError(t, err)
		require.Empty(t, ev.Unmapped)
		require.Contains(t, ev.Note, "not paid yet")
	})

	t.Run("RotationAcceptsEitherSecret", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret, stripeRotated)
		for _, secret := range []string{stripeSecret, stripeRotated} {
			_, err := s.Verify(providertest.SignStripe([]byte(intentSucceeded), secret, now), []byte(intentSucceeded), now)
			require.NoError(t, err)
		}
		// Stripe sends two v1 signatures while a secret rolls: one matching is enough.
		h := providertest.SignStripe([]byte(intentSucceeded), "whsec_unknown", now)
		h.Set("Stripe-Signature", h.Get("Stripe-Signature")+",v1="+strings.TrimPrefix(strings.Split(providertest.SignStripe([]byte(intentSucceeded), stripeRotated, now).Get("Stripe-Signature"), ",")[1], "v1="))
		_, err := s.Verify(h, []byte(intentSucceeded), now)
		require.NoError(t, err)
	})

	t.Run("Rejections", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret)
		body := []byte(intentSucceeded)
		tests := []struct {
			name   string
			header http.Header
			body   []byte
			want   error
		}{
			{"WrongSecret", providertest.SignStripe(body, "whsec_other", now), body, provider.ErrSignature},
			{"NoHeader", http.Header{}, body, provider.ErrSignature},
			{"Garbage", http.Header{"Stripe-Signature": {"t=abc,v1=zz"}}, body, provider.ErrSignature},
			{"FreshTimestampInFrontOfACapturedOne", http.Header{"Stripe-Signature": {"t=" + strconv.FormatInt(now.Unix(), 10) + "," +
				providertest.SignStripe(body, stripeSecret, now.Add(-time.Hour)).Get("Stripe-Signature")}}, body, provider.ErrSignature},
			{"TamperedBody", providertest.SignStripe(body, stripeSecret, now), []byte(strings.Replace(intentSucceeded, "pi_1", "pi_2", 1)), provider.ErrSignature},
			{"Stale", providertest.SignStripe(body, stripeSecret, now.Add(-301*time.Second)), body, provider.ErrTimestamp},
			{"Future", providertest.SignStripe(body, stripeSecret, now.Add(301*time.Second)), body, provider.ErrTimestamp},
			{"DuplicateKeys", providertest.SignStripe([]byte(`{"id":"evt_1","id":"evt_2","type":"x","data":{"object":{}}}`), stripeSecret, now), []byte(`{"id":"evt_1","id":"evt_2","type":"x","data":{"object":{}}}`), provider.ErrMalformed},
			{"NestedDuplicateKeys", providertest.SignStripe([]byte(`{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","id":"pi_2"}}}`), stripeSecret, now), []byte(`{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","id":"pi_2"}}}`), provider.ErrMalformed},
			{"NotJSON", providertest.SignStripe([]byte(`not json`), stripeSecret, now), []byte(`not json`), provider.ErrMalformed},
			{"TrailingData", providertest.SignStripe([]byte(intentSucceeded+`{}`), stripeSecret, now), []byte(intentSucceeded + `{}`), provider.ErrMalformed},
			{"NoID", providertest.SignStripe([]byte(`{"type":"x","data":{}}`), stripeSecret, now), []byte(`{"type":"x","data":{}}`), provider.ErrMalformed},
			{"ObjectNotAnObject", providertest.SignStripe([]byte(`{"id":"evt_1","type":"x","data":{"object":"pi_1"}}`), stripeSecret, now), []byte(`{"id":"evt_1","type":"x","data":{"object":"pi_1"}}`), provider.ErrMalformed},
			// Keys match exactly: encoding/json would have read "ID" as id.
			{"IDInOtherCase", providertest.SignStripe([]byte(`{"ID":"evt_1","type":"x","data":{"object":{}}}`), stripeSecret, now), []byte(`{"ID":"evt_1","type":"x","data":{"object":{}}}`), provider.ErrMalformed},
			// Postgres cannot store U+0000: refused, never a 503 forever.
			{"NULInID", providertest.SignStripe([]byte(`{"id":"evt_\u0000","type":"x","data":{"object":{}}}`), stripeSecret, now), []byte(`{"id":"evt_\u0000","type":"x","data":{"object":{}}}`), provider.ErrMalformed},
		}
		for _, tt := range tests {
			_, err := s.Verify(tt.header, tt.body, now)
			require.ErrorIs(t, err, tt.want, tt.name)
			require.NotContains(t, err.Error(), stripeSecret, tt.name)
		}
	})

	t.Run("WithinToleranceBothWays", func(t *testing.T) {
		t.Parallel()
		s := newStripe(t, stripeSecret)
		for _, d := range []time.Duration{-299 * time.Second, 299 * time.Second} {
			_, err := s.Verify(providertest.SignStripe([]byte(intentSucceeded), stripeSecret, now.Add(d)), []byte(intentSucceeded), now)
			require.NoError(t, err)
		}
	})

	t.Run("EmptySecretRefused", func(t *testing.T) {
		t.Parallel()
		_, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"", "  "}})
		require.Error(t, err)
		_, err = provider.NewStripe(provider.StripeConfig{})
		require.Error(t, err)
	})
}

func TestStandard(t *testing.T) {
	t.Parallel()

	body := []byte(`{"type":"payment.succeeded","data":{"payment_id":"pay_1","amount":1000}}`)

	t.Run("Verifies", func(t *testing.T) {
		t.Parallel()
		s := newStandard(t, standardSecret)
		h, err := providertest.SignStandard("msg_1", body, standardSecret, now)
		require.NoError(t, err)
		ev, err := s.Verify(h, body, now)
		require.NoError(t, err)
		require.Equal(t, provider.Event{Provider: "standard", ID: "msg_1", Type: "payment.succeeded", PaymentID: "pay_1", Payload: body}, ev)
	})

	t.Run("RotationAndSeveralSignatures", func(t *testing.T) {
		t.Parallel()
		s := newStandard(t, standardOther, standardSecret)
		h, err := providertest.SignStandard("msg_1", body, standardSecret, now)
		require.NoError(t, err)
		h.Set("webhook-signature", "v1,AAAA "+h.Get("webhook-signature"))
		_, err = s.Verify(h, body, now)
		require.NoError(t, err)
	})

	t.Run("Rejections", func(t *testing.T) {
		t.Parallel()
		s := newStandard(t, standardSecret)
		sign := func(id string, b []byte, secret string, at time.Time) http.Header {
			h, err := providertest.SignStandard(id, b, secret, at)
			require.NoError(t, err)
			return h
		}
		noID := sign("msg_1", body, standardSecret, now)
		noID.Del("webhook-id")
		otherID := sign("msg_1", body, standardSecret, now)
		otherID.Set("webhook-id", "msg_2")
		dup := []byte(`{"type":"payment.succeeded","type":"refund","data":{"payment_id":"p"}}`)
		noPay := []byte(`{"type":"payment.succeeded","data":{"payment_id":7}}`)
		tests := []struct {
			name   string
			header http.Header
			body   []byte
			want   error
		}{
			{"WrongSecret", sign("msg_1", body, standardOther, now), body, provider.ErrSignature},
			{"MissingID", noID, body, provider.ErrSignature},
			{"IDNotSigned", otherID, body, provider.ErrSignature},
			{"Stale", sign("msg_1", body, standardSecret, now.Add(-10*time.Minute)), body, provider.ErrTimestamp},
			{"Future", sign("msg_1", body, standardSecret, now.Add(10*time.Minute)), body, provider.ErrTimestamp},
			{"DuplicateKeys", sign("msg_1", dup, standardSecret, now), dup, provider.ErrMalformed},
		}
		// Well signed but naming no payment: stored and acknowledged, never
		// fulfilling.
		ev, err := s.Verify(sign("msg_1", noPay, standardSecret, now), noPay, now)
		require.NoError(t, err)
		require.False(t, ev.Fulfils())
		require.Contains(t, ev.Unmapped, "data.payment_id")
		for _, tt := range tests {
			_, err := s.Verify(tt.header, tt.body, now)
			require.ErrorIs(t, err, tt.want, tt.name)
		}
	})

	t.Run("ConfiguredPaymentPath", func(t *testing.T) {
		t.Parallel()
		p, err := provider.NewStandard(provider.StandardConfig{Secrets: []string{standardSecret}, FulfilTypes: []string{"charge.settled"}, PaymentPath: "data.object.payment.id"})
		require.NoError(t, err)
		body := []byte(`{"type":"charge.settled","data":{"object":{"payment":{"id":"pay_42"}}}}`)
		h, err := providertest.SignStandard("msg_9", body, standardSecret, now)
		require.NoError(t, err)
		ev, err := p.Verify(h, body, now)
		require.NoError(t, err)
		require.Equal(t, "pay_42", ev.PaymentID)
		_, err = provider.NewStandard(provider.StandardConfig{Secrets: []string{standardSecret}, PaymentPath: "data..id"})
		require.Error(t, err)
	})

	t.Run("BadSecretsRefused", func(t *testing.T) {
		t.Parallel()
		for _, secrets := range [][]string{nil, {""}, {"whsec_"}, {"whsec_not base64!"}} {
			_, err := provider.NewStandard(provider.StandardConfig{Secrets: secrets})
			require.Error(t, err, "%q", secrets)
		}
	})
}

func TestParseStrict(t *testing.T) {
	t.Parallel()

	tests := []struct {
		in     string
		wantOK bool
	}{
		{`{}`, true},
		{`{"a":[{"b":1},{"b":2}]}`, true},
		{`{"a":1,"b":{"a":2}}`, true},
		{`{"a":1,"a":1}`, false},
		{`{"a":{"b":1,"b":2}}`, false},
		{`[{"x":1,"x":2}]`, false},
		{`{"a":1} {"b":2}`, false},
		{`{"a":`, false},
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), false},
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), true},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), false},
		{``, false},
		{`{"a":1,"\u0061":2}`, false},
		{`{"a":null,"a":1}`, false}, // a name held by null is still held
		{`{"a":{},"b":[{"a":1}],"a":{}}`, false},
		{"{\"a\":\"\xff\"}", false},
		{`{"a":"\u00e9","n":-1.5e3,"t":true,"f":false,"z":null,"s":[]}`, true},
		{`{"a":1,}`, false},
		{`{"a" 1}`, false},
		{`[1,]`, false},
		{`nul`, false},
	}
	for _, tt := range tests {
		v, err := provider.ParseStrict([]byte(tt.in))
		if (err == nil) != tt.wantOK {
			t.Errorf("ParseStrict(%.30q) error = %v, want ok %v", tt.in, err, tt.wantOK)
		}
		if err != nil {
			continue
		}
		// One pass gives what encoding/json gives (numbers as json.Number).
		dec := json.NewDecoder(strings.NewReader(tt.in))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v, want) {
			t.Errorf("ParseStrict(%q) = %#v, encoding/json reads %#v", tt.in, v, want)
		}
	}
}

func FuzzStripeVerify(f *testing.F) {
	for _, body := range []string{checkoutCompleted, intentSucceeded, `{"id":"e","type":"t","data":{"object":{"payment_intent":{"id":"pi"}}}}`} {
		f.Add(providertest.SignStripe([]byte(body), stripeSecret, now).Get("Stripe-Signature"), []byte(body))
	}
	f.Add("t=1800000000,v1=00,v0=11,t=5", []byte(`{}`))
	s, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		ev, err := s.Verify(http.Header{"Stripe-Signature": {header}}, body, now)
		if err == nil {
			if ev.ID == "" || ev.Type == "" {
				t.Fatalf("accepted an event without id or type: %+v", ev)
			}
			return
		}
		if !errors.Is(err, provider.ErrSignature) && !errors.Is(err, provider.ErrTimestamp) && !errors.Is(err, provider.ErrMalformed) {
			t.Fatalf("unclassified error %v", err)
		}
		if strings.Contains(err.Error(), stripeSecret) {
			t.Fatal("error leaks the secret")
		}
	})
}

func FuzzStandardVerify(f *testing.F) {
	body := []byte(`{"type":"payment.succeeded","data":{"payment_id":"pay_1"}}`)
	h, err := providertest.SignStandard("msg_1", body, standardSecret, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("msg_1", "1800000000", h.Get("webhook-signature"), body)
	f.Add("msg_1", "-1", "v1,AAAA v2,x", []byte(`[]`))
	s, err := provider.NewStandard(provider.StandardConfig{Secrets: []string{standardSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		ev, err := s.Verify(h, body, now)
		if err == nil {
			if ev.ID != id || ev.Type == "" {
				t.Fatalf("accepted a bad event: %+v", ev)
			}
			return
		}
		if !errors.Is(err, provider.ErrSignature) && !errors.Is(err, provider.ErrTimestamp) && !errors.Is(err, provider.ErrMalformed) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

func FuzzParseStrict(f *testing.F) {
	for _, s := range []string{checkoutCompleted, intentSucceeded, `{"a":1,"a":2}`, `[1,{"b":[]}]`, `{"a":{"\u0062":1,"b":2}}`, "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := provider.ParseStrict(data)
		// Refused exactly when jsontext, strict by default (names unique
		// after unescaping, UTF-8 valid), refuses it, or it nests too deep.
		if valid := jsontext.Value(data).IsValid(); err == nil && !valid {
			t.Fatalf("accepted %q, which jsontext refuses", data)
		} else if err != nil && valid && !strings.Contains(err.Error(), "nesting deeper") {
			t.Fatalf("refused %q (%v), which jsontext accepts", data, err)
		}
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		// What it reads is what encoding/json reads.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil || !reflect.DeepEqual(v, want) {
			t.Fatalf("ParseStrict(%q) = %#v, encoding/json reads %#v (%v)", data, v, want, err)
		}
	})
}

// TestStripeMode: test money never fulfils at a live deployment, nor live
// money at a test one: refused with the reason; an event that does not
// say (no livemode) passes.
func TestStripeMode(t *testing.T) {
	t.Parallel()
	now := time.Now()
	body := func(live string) []byte {
		return []byte(`{"id":"evt_m","type":"checkout.session.completed"` + live + `,"data":{"object":{"id":"cs_1","payment_status":"paid","payment_intent":"pi_1"}}}`)
	}
	for _, tt := range []struct {
		mode provider.Mode
		live string
		want error
	}{
		{provider.ModeLive, `,"livemode":true`, nil},
		{provider.ModeLive, `,"livemode":false`, provider.ErrMode},
		{provider.ModeTest, `,"livemode":false`, nil},
		{provider.ModeTest, `,"livemode":true`, provider.ErrMode},
		{provider.ModeLive, ``, nil},
		{"", `,"livemode":false`, nil},
	} {
		s, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret}, Mode: tt.mode})
		require.NoError(t, err)
		b := body(tt.live)
		ev, err := s.Verify(providertest.SignStripe(b, stripeSecret, now), b, now)
		require.ErrorIs(t, err, tt.want, "mode %q, %s", tt.mode, tt.live)
		if tt.want == nil {
			require.Equal(t, "pi_1", ev.PaymentID)
		} else {
			require.Contains(t, err.Error(), "mode")
		}
	}
	_, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret}, Mode: "sandbox"})
	require.Error(t, err)
}

// TestStandardRefunds: a refund type names the payment at the payment path,
// refunded in full by the sender's word; one naming none says why.
func TestStandardRefunds(t *testing.T) {
	t.Parallel()
	s := newStandard(t, standardSecret)
	now := time.Now()
	for body, want := range map[string]*provider.Reversal{
		`{"type":"payment.refunded","data":{"payment_id":"pay_1"}}`: {PaymentID: "pay_1", Kind: provider.Refund, Full: true},
		`{"type":"payment.refunded","data":{"amount":100}}`:         nil,
		`{"type":"payment.updated","data":{"payment_id":"pay_1"}}`:  nil,
	} {
		h, err := providertest.SignStandard("msg_r", []byte(body), standardSecret, now)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Verify(h, []byte(body), now)
		if err != nil {
			t.Fatal(err)
		}
		if (want == nil) != (ev.Reversal == nil) || (want != nil && *want != *ev.Reversal) || ev.Fulfils() {
			t.Errorf("%s: reversal %+v, want %+v", body, ev.Reversal, want)
		}
	}
}
