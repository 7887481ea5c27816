package providertest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/guardian-pay/guardian/app/provider"
)

// AdyenItem is one notification item's fields, for SignAdyen.
type AdyenItem struct {
	EventCode, PSPReference, OriginalReference string
	MerchantAccount, MerchantReference         string
	Value                                      int64
	Currency                                   string
	Success                                    bool
	Reason                                     string
}

// SignAdyen makes an Adyen delivery of items, as Adyen sends one, each
// item signed with hexKey; live is the delivery's environment. For tests
// and the demo.
func SignAdyen(items []AdyenItem, hexKey string, live bool) ([]byte, error) {
	list := make([]any, len(items))
	for i, it := range items {
		list[i] = map[string]any{"NotificationRequestItem": map[string]any{
			"additionalData":      map[string]any{},
			"amount":              map[string]any{"currency": it.Currency, "value": it.Value},
			"eventCode":           it.EventCode,
			"eventDate":           "2026-01-01T00:00:00+01:00",
			"merchantAccountCode": it.MerchantAccount,
			"merchantReference":   it.MerchantReference,
			"originalReference":   it.OriginalReference,
			"paymentMethod":       "visa",
			"pspReference":        it.PSPReference,
			"reason":              it.Reason,
			"success":             strconv.FormatBool(it.Success),
		}}
	}
	body, err := json.Marshal(map[string]any{"live": strconv.FormatBool(live), "notificationItems": list})
	if err != nil {
		return nil, err
	}
	return ResignAdyen(body, hexKey)
}

// ResignAdyen signs every notification item of an Adyen delivery with
// hexKey, replacing each additionalData.hmacSignature: a published sample
// becomes one a test's key verifies.
func ResignAdyen(body []byte, hexKey string) ([]byte, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var env map[string]any
	if err := dec.Decode(&env); err != nil {
		return nil, err
	}
	signing, err := provider.AdyenSigningStrings(body)
	if err != nil {
		return nil, err
	}
	list, _ := env["notificationItems"].([]any)
	for i, w := range list {
		item, _ := w.(map[string]any)["NotificationRequestItem"].(map[string]any)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(signing[i]))
		extra, _ := item["additionalData"].(map[string]any)
		if extra == nil {
			extra = map[string]any{}
			item["additionalData"] = extra
		}
		extra["hmacSignature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return json.Marshal(env)
}

// The Adyen sample's HMAC keys: the current one, and one being rotated
// out.
const (
	AdyenKey    = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	AdyenOldKey = "0B4E2A3C5F7D9E1A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3C4D5E6F708192"
)

// AdyenNotification is an Adyen delivery of one test-environment
// notification item, unsigned (ResignAdyen signs it).
func AdyenNotification(code, psp, original string, success bool) []byte {
	return fmt.Appendf(nil, `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{},"amount":{"currency":"EUR","value":1999},"eventCode":%q,"eventDate":"2026-12-01T00:00:00+01:00","merchantAccountCode":"Shop","merchantReference":"order-1","originalReference":%q,"paymentMethod":"visa","pspReference":%q,"reason":"","success":"%t"}}]}`, code, original, psp, success)
}

func init() {
	RegisterSample(Sample{
		Name: "adyen",
		// The sample's notifications are the test environment's.
		Settings:     map[string]string{"GUARDIAN_ADYEN_HMAC_KEYS": AdyenKey + "," + AdyenOldKey, "GUARDIAN_MODE": "test"},
		UnsignedTime: true,
		Seal: func(t testing.TB, body []byte, old bool) []byte {
			key := AdyenKey
			if old {
				key = AdyenOldKey
			}
			sealed, err := ResignAdyen(body, key)
			if err != nil {
				t.Fatal(err)
			}
			return sealed
		},
		Alter: func(body []byte) []byte {
			return []byte(strings.Replace(string(body), `"value":1999`, `"value":1998`, 1))
		},
		Paid: func(p string) (string, []byte) {
			return "AUTHORISATION:PSP_" + p + ":true", AdyenNotification("AUTHORISATION", "PSP_"+p, "", true)
		},
		// Under automatic capture the payment's CAPTURE fulfils nothing more.
		Other: func(p string) (string, []byte) {
			return "CAPTURE:CAP_" + p + ":true", AdyenNotification("CAPTURE", "CAP_"+p, "PSP_"+p, true)
		},
		Unpaid: func(p string) (string, []byte) {
			return "AUTHORISATION:PSP_U_" + p + ":false", AdyenNotification("AUTHORISATION", "PSP_U_"+p, "", false)
		},
		Reversed: func(p string) (string, []byte) {
			return "CHARGEBACK:CB_" + p + ":true", AdyenNotification("CHARGEBACK", "CB_"+p, "PSP_"+p, true)
		},
	})
}
