package connector

import (
	"testing"
	"time"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// FuzzStatement: an answer is a statement about a key only when it is
// signed with the connector secret, fresh, exactly a Statement, and about
// that key; anything else is "cannot tell", never a panic. Seeds: the
// statements a receiver signs.
func FuzzStatement(f *testing.F) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for _, st := range []contract.Statement{{IdempotencyKey: "gk1_a", Status: contract.StatusDone, Receipt: "r1"}, {IdempotencyKey: "gk1_b", Status: contract.StatusDeclined, Reason: "out of stock"}} {
		body, _, err := contract.SignStatement(secret, st, time.Now())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body, st.IdempotencyKey, true)
	}
	f.Add([]byte(`{"idempotency_key":"gk1_a","status":"done","extra":true}`), "gk1_a", true)
	c, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:9/act", Secret: secret, Timeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, key string, sign bool) {
		header := map[string][]string{}
		if sign {
			h, err := contract.SignHeaders(c.signer, "msg_fuzz", body, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			header = h
		}
		st, why := c.statement(body, header, key)
		if why == "" && (!sign || st.IdempotencyKey != key) {
			t.Fatalf("a statement taken unsigned or about another key: %+v", st)
		}
	})
}
