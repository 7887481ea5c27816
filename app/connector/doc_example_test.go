package connector

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/receiver/contract"
)

// TestReceiversDocExample: the worked signing example of
// docs/receivers.md is what Guardian sends and what a statement signed
// with SignStatement is, byte for byte: the body EncodeRequest writes, the
// signatures of the action, the lookup and the answer.
func TestReceiversDocExample(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/receivers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "<!-- signing example: begin -->")
	block, _, ok2 := strings.Cut(block, "<!-- signing example: end -->")
	if !ok || !ok2 {
		t.Fatal("docs/receivers.md holds no signing example")
	}
	v := map[string]string{}
	for _, line := range strings.Split(block, "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "```") {
			v[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	signer, err := contract.NewSigner(v["secret"])
	if err != nil {
		t.Fatal(err)
	}
	at := func(name string) time.Time {
		sec, err := strconv.ParseInt(v[name], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return time.Unix(sec, 0)
	}
	check := func(what, id string, body []byte, ts time.Time, want string) {
		t.Helper()
		h, err := contract.SignHeaders(signer, id, body, ts)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Get("webhook-signature"); got != want {
			t.Errorf("%s: signature %s, the document says %s", what, got, want)
		}
	}

	var req contract.Body
	if err := json.Unmarshal([]byte(v["action body"]), &req); err != nil {
		t.Fatal(err)
	}
	body, err := EncodeRequest(Request{Key: req.IdempotencyKey, Provider: req.Provider, PaymentID: req.PaymentID, EventID: req.EventID,
		EventType: req.EventType, Action: state.Action(req.Action), Payload: req.Payload})
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != v["action body"] {
		t.Errorf("Guardian sends\n%s\nthe document says\n%s", body, v["action body"])
	}
	if v["action webhook-id"] != req.IdempotencyKey || v["lookup webhook-id"] != req.IdempotencyKey+".lookup" || v["answer webhook-id"] != req.IdempotencyKey+".answer" {
		t.Error("the document's webhook-ids are not the key, <key>.lookup and <key>.answer")
	}
	check("action", v["action webhook-id"], body, at("action webhook-timestamp"), v["action webhook-signature"])
	check("lookup", v["lookup webhook-id"], nil, at("lookup webhook-timestamp"), v["lookup webhook-signature"])

	var st contract.Statement
	if err := json.Unmarshal([]byte(v["answer body"]), &st); err != nil {
		t.Fatal(err)
	}
	stBody, h, err := contract.SignStatement(v["secret"], st, at("answer webhook-timestamp"))
	if err != nil {
		t.Fatal(err)
	}
	if string(stBody) != v["answer body"] || h.Get("webhook-id") != v["answer webhook-id"] || h.Get("webhook-signature") != v["answer webhook-signature"] {
		t.Errorf("SignStatement makes %s %v, the document says otherwise", stBody, h)
	}
}
