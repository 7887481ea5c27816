package providertest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// SignPaddle makes a Paddle-Signature header for body, as Paddle signs, for
// tests and the demo.
func SignPaddle(body []byte, secret string, at time.Time) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + ":"))
	mac.Write(body)
	h := http.Header{}
	h.Set("Paddle-Signature", "ts="+ts+";h1="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// The Paddle sample's destination secrets: the current one, and one being
// rotated out.
const (
	PaddleSecret    = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_testsecretforguardian"
	PaddleOldSecret = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_retiredsecretguardian"
)

// PaddleEvent is a Paddle Billing event about transaction txn in status.
func PaddleEvent(id, typ, txn, status string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"event_type":%q,"occurred_at":"2026-12-01T00:00:00Z","notification_id":"ntf_%s","data":{"id":%q,"status":%q,"origin":"web","customer_id":"ctm_1","currency_code":"USD"}}`, id, typ, id, txn, status)
}

func init() {
	RegisterSample(Sample{
		Name:     "paddle",
		Settings: map[string]string{"GUARDIAN_PADDLE_SECRETS": PaddleSecret + "," + PaddleOldSecret},
		Sign: func(_ testing.TB, _ string, body []byte, at time.Time, old bool) http.Header {
			if old {
				return SignPaddle(body, PaddleOldSecret, at)
			}
			return SignPaddle(body, PaddleSecret, at)
		},
		Paid: func(p string) (string, []byte) {
			return "evt_completed_" + p, PaddleEvent("evt_completed_"+p, "transaction.completed", "txn_"+p, "completed")
		},
		Other: func(p string) (string, []byte) {
			return "evt_paid_" + p, PaddleEvent("evt_paid_"+p, "transaction.paid", "txn_"+p, "paid")
		},
		Unpaid: func(p string) (string, []byte) {
			return "evt_pastdue_" + p, PaddleEvent("evt_pastdue_"+p, "transaction.completed", "txn_u_"+p, "past_due")
		},
		Reversed: func(p string) (string, []byte) {
			id := "evt_chargeback_" + p
			return id, fmt.Appendf(nil, `{"event_id":%q,"event_type":"adjustment.created","occurred_at":"2026-12-01T00:00:00Z","data":{"id":"adj_%s","action":"chargeback","status":"approved","transaction_id":"txn_%s"}}`, id, p, p)
		},
	})
}
