package provider_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// Keys of the tests' own, 32 random bytes in hex as Adyen shows them.
const (
	adyenKey        = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	adyenRetiredKey = "0B4E2A3C5F7D9E1A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3C4D5E6F708192"
	adyenOtherKey   = "A1B2C3D4E5F60718293A4B5C6D7E8F90A1B2C3D4E5F60718293A4B5C6D7E8F90"
)

// TestAdyenSignature: Adyen's official Go library's signed vector verifies,
// and each item of a delivery is checked on its own with every key.
func TestAdyenSignature(t *testing.T) {
	t.Parallel()
	var vector struct {
		HMACKey       string          `json:"hmac_key"`
		SigningString string          `json:"signing_string"`
		Signature     string          `json:"signature"`
		Body          json.RawMessage `json:"body"`
	}
	loadTestdata(t, "adyen/sdk_vector.json", &vector)
	sdk, err := provider.NewAdyen(provider.AdyenConfig{HMACKeys: []string{vector.HMACKey}})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := sdk.Verify(nil, vector.Body, time.Now())
	if err != nil {
		t.Fatalf("the SDK's vector: %v", err)
	}
	if ev.ID != "EVENT:pspReference:true" || ev.Type != "EVENT" || ev.Fulfils() {
		t.Errorf("the SDK's vector read as %+v", ev)
	}
	signing, err := provider.AdyenSigningStrings(vector.Body)
	if err != nil || len(signing) != 1 || signing[0] != vector.SigningString {
		t.Errorf("signing strings %q (%v), want [%q]", signing, err, vector.SigningString)
	}
	resigned, err := providertest.ResignAdyen(vector.Body, vector.HMACKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustItem(t, resigned, 0)["additionalData"].(map[string]any)["hmacSignature"]; got != vector.Signature {
		t.Errorf("providertest.ResignAdyen signed %v, want the SDK's %s", got, vector.Signature)
	}

	a, err := provider.NewAdyen(provider.AdyenConfig{HMACKeys: []string{adyenRetiredKey, adyenKey}})
	if err != nil {
		t.Fatal(err)
	}
	auth := loadTestdata(t, "adyen/authorisation.json", nil)
	signed := func(key string) []byte {
		b, err := providertest.ResignAdyen(auth, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	two, err := providertest.SignAdyen([]providertest.AdyenItem{
		{EventCode: "AUTHORISATION", PSPReference: "PSP_A", MerchantAccount: "M", Value: 100, Currency: "EUR", Success: true},
		{EventCode: "AUTHORISATION", PSPReference: "PSP_B", MerchantAccount: "M", Value: 200, Currency: "EUR", Success: true},
	}, adyenKey, false)
	if err != nil {
		t.Fatal(err)
	}
	secondForged := bytes.Replace(two, []byte(`"value":200`), []byte(`"value":1`), 1)
	tests := []struct {
		name string
		body []byte
		want error
	}{
		{"Signed", signed(adyenKey), nil},
		{"RetiredKeyWhileRotating", signed(adyenRetiredKey), nil},
		{"OtherKey", signed(adyenOtherKey), provider.ErrSignature},
		{"PublishedSignatureOfAnUnknownKey", auth, provider.ErrSignature},
		{"SignedFieldAlteredByOneByte", bytes.Replace(signed(adyenKey), []byte(`"value":10100`), []byte(`"value":10101`), 1), provider.ErrSignature},
		{"UnsignedFieldAltered", bytes.Replace(signed(adyenKey), []byte(`"paymentMethod":"visa"`), []byte(`"paymentMethod":"mc"`), 1), nil},
		{"OneForgedItemRefusesTheDelivery", secondForged, provider.ErrSignature},
		{"NoSignature", bytes.Replace(signed(adyenKey), []byte(`"hmacSignature"`), []byte(`"hmacSignaturX"`), 1), provider.ErrSignature},
		{"NoItems", []byte(`{"live":"false","notificationItems":[]}`), provider.ErrMalformed},
		{"NotJSON", []byte(`{"live":`), provider.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			evs, err := a.VerifyBatch(nil, tt.body, time.Now())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("VerifyBatch = %v, want %v", err, tt.want)
			}
			if err == nil && (len(evs) != 1 || evs[0].ID != "AUTHORISATION:123456789:true" || evs[0].PaymentID != "123456789") {
				t.Errorf("events = %+v", evs)
			}
			if err != nil && strings.Contains(err.Error(), adyenKey) {
				t.Errorf("the error shows a key: %v", err)
			}
		})
	}

	t.Run("EachItemIsAnEventOfItsOwn", func(t *testing.T) {
		t.Parallel()
		evs, err := provider.VerifyAll(a, nil, two, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].PaymentID != "PSP_A" || evs[1].PaymentID != "PSP_B" {
			t.Fatalf("events = %+v", evs)
		}
		// Each event's payload is its own item, as sent.
		for i, ev := range evs {
			item := mustItem(t, two, i)
			var got map[string]any
			if err := json.Unmarshal(ev.Payload, &got); err != nil {
				t.Fatal(err)
			}
			if got["pspReference"] != item["pspReference"] || !bytes.Contains(two, ev.Payload) {
				t.Errorf("event %d's payload is not its item: %s", i, ev.Payload)
			}
		}
		if _, err := a.Verify(nil, two, time.Now()); !errors.Is(err, provider.ErrMalformed) {
			t.Errorf("Verify of two items = %v, want ErrMalformed", err)
		}
	})
}

// TestAdyenRules: what pays under each capture setting, what never does,
// the identity of an event, and the mode.
func TestAdyenRules(t *testing.T) {
	t.Parallel()
	item := func(code, psp, original string, success bool) providertest.AdyenItem {
		return providertest.AdyenItem{EventCode: code, PSPReference: psp, OriginalReference: original, MerchantAccount: "Shop", MerchantReference: "order-7",
			Value: 1999, Currency: "EUR", Success: success, Reason: "Refused"}
	}
	capture := loadTestdata(t, "adyen/capture.json", nil)
	tests := []struct {
		name     string
		capture  string
		mode     provider.Mode
		items    []providertest.AdyenItem
		body     []byte // instead of items
		live     bool
		id       string
		payment  string
		note     string
		unmapped bool
		err      error
	}{
		{name: "AuthorisedUnderAutomaticCapturePays", items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", true)}, id: "AUTHORISATION:PSP1:true", payment: "PSP1"},
		{name: "RefusedNeverPays", items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", false)}, id: "AUTHORISATION:PSP1:false", note: "authorisation refused"},
		{name: "AuthorisedUnderManualCaptureWaits", capture: provider.AdyenCaptureManual, items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", true)}, note: "under manual capture"},
		{name: "CaptureUnderManualCapturePaysThePayment", capture: provider.AdyenCaptureManual, items: []providertest.AdyenItem{item("CAPTURE", "CAP1", "PSP1", true)}, id: "CAPTURE:CAP1:true", payment: "PSP1"},
		{name: "TheLibrarysCaptureFixture", capture: provider.AdyenCaptureManual, body: capture, id: "CAPTURE:PSP_REFERENCE:true", payment: "ORIGINAL_PSP"},
		{name: "FailedCaptureNeverPays", capture: provider.AdyenCaptureManual, items: []providertest.AdyenItem{item("CAPTURE", "CAP1", "PSP1", false)}, note: "capture failed"},
		{name: "CaptureUnderAutomaticCaptureDoesNotPayAgain", items: []providertest.AdyenItem{item("CAPTURE", "CAP1", "PSP1", true)}, note: "under automatic capture"},
		{name: "CaptureNamingNoPaymentIsFlagged", capture: provider.AdyenCaptureManual, items: []providertest.AdyenItem{item("CAPTURE", "CAP1", "", true)}, unmapped: true},
		{name: "RefundNeverPays", items: []providertest.AdyenItem{item("REFUND", "REF1", "PSP1", true)}, id: "REFUND:REF1:true"},
		{name: "LiveAtALiveDeployment", mode: provider.ModeLive, live: true, items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", true)}, payment: "PSP1"},
		{name: "TestAtALiveDeploymentIsRefused", mode: provider.ModeLive, items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", true)}, err: provider.ErrMode},
		{name: "LiveAtATestDeploymentIsRefused", mode: provider.ModeTest, live: true, items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", true)}, err: provider.ErrMode},
		{name: "ATestItemAmongLiveOnesRefusesAll", mode: provider.ModeLive, live: false, items: []providertest.AdyenItem{item("AUTHORISATION", "PSP1", "", true), item("AUTHORISATION", "PSP2", "", true)}, err: provider.ErrMode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := provider.NewAdyen(provider.AdyenConfig{HMACKeys: []string{adyenKey}, Capture: tt.capture, Mode: tt.mode})
			if err != nil {
				t.Fatal(err)
			}
			body := tt.body
			if body == nil {
				body, err = providertest.SignAdyen(tt.items, adyenKey, tt.live)
			} else {
				body, err = providertest.ResignAdyen(body, adyenKey)
			}
			if err != nil {
				t.Fatal(err)
			}
			evs, err := a.VerifyBatch(nil, body, time.Now())
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("VerifyBatch = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			ev := evs[0]
			if tt.id != "" && ev.ID != tt.id {
				t.Errorf("id %q, want %q", ev.ID, tt.id)
			}
			if ev.PaymentID != tt.payment || !strings.Contains(ev.Note, tt.note) || (ev.Unmapped != "") != tt.unmapped {
				t.Errorf("payment %q note %q unmapped %q", ev.PaymentID, ev.Note, ev.Unmapped)
			}
			// A replay maps the stored item the same way.
			again, err := a.Map(ev.Type, ev.Payload)
			if err != nil || again.PaymentID != ev.PaymentID || again.Unmapped != ev.Unmapped {
				t.Errorf("Map = %+v, %v", again, err)
			}
		})
	}

	t.Run("Configuration", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []provider.AdyenConfig{
			{},
			{HMACKeys: []string{"not hex"}},
			{HMACKeys: []string{adyenKey}, Capture: "sometimes"},
			{HMACKeys: []string{adyenKey}, Mode: "staging"},
		} {
			if _, err := provider.NewAdyen(cfg); err == nil {
				t.Errorf("NewAdyen(%+v) accepted", cfg)
			} else if strings.Contains(err.Error(), adyenKey) {
				t.Errorf("the error shows a key: %v", err)
			}
		}
	})
}

// mustItem returns a delivery's i-th NotificationRequestItem, read as
// Verify reads it.
func mustItem(t *testing.T, body []byte, i int) map[string]any {
	t.Helper()
	env, err := provider.ParseObject(body)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := env["notificationItems"].([]any)
	if len(list) <= i {
		t.Fatalf("no item %d", i)
	}
	return list[i].(map[string]any)["NotificationRequestItem"].(map[string]any)
}

// TestAdyenReversals: refunds and chargebacks by Adyen's event codes, each
// naming its payment in originalReference; the library's own REFUND sample,
// which failed, takes nothing back, and the same refund succeeded does.
func TestAdyenReversals(t *testing.T) {
	t.Parallel()
	a, err := provider.NewAdyen(provider.AdyenConfig{HMACKeys: []string{adyenKey}})
	if err != nil {
		t.Fatal(err)
	}
	sample := loadTestdata(t, "adyen/refund.json", nil)
	for success, want := range map[string]*provider.Reversal{"false": nil, "true": {PaymentID: "ORIGINAL_PSP", Kind: provider.Refund, Amount: &provider.Money{1500, "EUR"}, RefundID: "PSP_REFERENCE"}} {
		body, err := providertest.ResignAdyen(bytes.Replace(sample, []byte(`"success": "false"`), []byte(`"success": "`+success+`"`), 1), adyenKey)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := a.Verify(nil, body, time.Now())
		if err != nil || !reflect.DeepEqual(ev.Reversal, want) {
			t.Errorf("the library's REFUND with success %s: %+v, %v; want %+v", success, ev.Reversal, err, want)
		}
	}
	tests := []struct {
		code     string
		success  bool
		original string
		want     *provider.Reversal
	}{
		{"REFUND", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Refund, Amount: &provider.Money{100, "EUR"}, RefundID: "MOD1"}},
		{"REFUND", false, "PSP1", nil},
		{"CANCEL_OR_REFUND", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Refund, Full: true}},
		{"CANCELLATION", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Refund, Full: true}},
		{"NOTIFICATION_OF_CHARGEBACK", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Dispute, Stage: provider.DisputeOpened}},
		{"CHARGEBACK", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"SECOND_CHARGEBACK", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"CHARGEBACK_REVERSED", true, "PSP1", &provider.Reversal{PaymentID: "PSP1", Kind: provider.Dispute, Stage: provider.DisputeWon}},
		{"CHARGEBACK", true, "", nil},
		{"AUTHORISATION", true, "", nil},
	}
	for _, tt := range tests {
		body, err := providertest.SignAdyen([]providertest.AdyenItem{{EventCode: tt.code, PSPReference: "MOD1", OriginalReference: tt.original, MerchantAccount: "Shop",
			Value: 100, Currency: "EUR", Success: tt.success}}, adyenKey, false)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := a.Verify(nil, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ev.Reversal, tt.want) {
			t.Errorf("%s success %v original %q: reversal %+v, want %+v", tt.code, tt.success, tt.original, ev.Reversal, tt.want)
		}
		if ev.Reversal != nil && ev.Fulfils() {
			t.Errorf("%s both fulfils and reverses", tt.code)
		}
	}
}

// TestAdyenReadStopsAtTheFirstForgedItem: verification reads no further
// than the first item whose signature fails: a forged item followed by
// anything at all is a signature refusal, not a parse of the rest.
func TestAdyenReadStopsAtTheFirstForgedItem(t *testing.T) {
	t.Parallel()
	a, err := provider.NewAdyen(provider.AdyenConfig{HMACKeys: []string{adyenKey}})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := providertest.SignAdyen([]providertest.AdyenItem{{EventCode: "AUTHORISATION", PSPReference: "PSP1", MerchantAccount: "Shop", Value: 100, Currency: "EUR", Success: true}}, adyenOtherKey, false)
	if err != nil {
		t.Fatal(err)
	}
	// Cut the delivery after its item and follow it with what no parser
	// would take: only a read that stopped can answer ErrSignature.
	i := bytes.LastIndex(forged, []byte("}]"))
	body := append(append([]byte{}, forged[:i+1]...), []byte(`,{"NotificationRequestItem":`+strings.Repeat("[", 1<<16))...)
	if _, err := a.VerifyBatch(nil, body, time.Now()); !errors.Is(err, provider.ErrSignature) {
		t.Fatalf("VerifyBatch = %v, want ErrSignature before the rest is read", err)
	}
}
