package providertest

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/state"
)

// Edge is the Guardian under test as the conformance suite sees it: its
// webhook route, what it stored, and what reached the receiver. The web
// package's tests give one over HTTP with the real domain and database
// behind it.
type Edge interface {
	// Post sends header and body to /webhooks/<provider> and returns the
	// status of the answer.
	Post(t *testing.T, provider string, header http.Header, body []byte) int
	// Events counts the provider's stored events: all of them, or the one
	// with the id when id is not empty.
	Events(t *testing.T, provider, id string) int
	// DeliveryID returns the delivery id stored with the event, and
	// answered by the operator API; "" when there is none.
	DeliveryID(t *testing.T, provider, id string) string
	// Fulfilments counts the provider's fulfilments of action, in st when
	// st is not empty.
	Fulfilments(t *testing.T, provider string, action state.Action, st state.State) int
	// Calls returns the actions of the receiver's calls for the provider's
	// one payment, in order.
	Calls(t *testing.T, provider string) []state.Action
}

// Run drives one provider through the cases every provider passes: the
// paid event delivered many times at once is stored once and fulfils
// once; the purchase's other event and an unpaid one fulfil nothing more;
// a bad, stale or future signature, and a body altered by one byte, are
// refused and change nothing; the purchase's reversal, delivered twice at
// once, takes it back once; a secret being rotated out still verifies.
func Run(t *testing.T, s Sample, e Edge) {
	t.Helper()
	now := time.Now()
	post := func(id string, body []byte, at time.Time, old bool) int {
		h, sent := s.Request(t, id, body, at, old)
		return e.Post(t, s.Name, h, sent)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s", what)
			}
		}
	}

	id, body := s.Paid("p1")
	h, sent := s.Request(t, id, body, now, false)
	codes := make([]int, 8)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i] = e.Post(t, s.Name, h, sent) })
	}
	wg.Wait()
	for _, code := range codes {
		if code != http.StatusOK {
			t.Fatalf("the paid event delivered 8 times at once: answers %v, want 200 each", codes)
		}
	}
	if n := e.Events(t, s.Name, id); n != 1 {
		t.Fatalf("the paid event is stored %d times, want once", n)
	}
	want := ""
	if s.Delivery != nil {
		want = s.Delivery(id)
	}
	if got := e.DeliveryID(t, s.Name, id); got != want {
		t.Errorf("delivery id %q stored beside the event's, want %q", got, want)
	}
	eventually("the paid event fulfils", func() bool { return e.Fulfilments(t, s.Name, state.Fulfil, state.Fulfilled) == 1 })

	otherID, other := s.Other("p1")
	unpaidID, unpaid := s.Unpaid("p1")
	if a, b := post(otherID, other, now, false), post(unpaidID, unpaid, now, false); a != http.StatusOK || b != http.StatusOK {
		t.Fatalf("the purchase's other event answered %d, an unpaid one %d: every well-signed event gets 200", a, b)
	}
	if n := e.Events(t, s.Name, ""); n != 3 {
		t.Fatalf("%d events stored, want 3", n)
	}
	if n := e.Fulfilments(t, s.Name, state.Fulfil, ""); n != 1 {
		t.Fatalf("%d fulfilments, want one for the purchase and none for the unpaid event", n)
	}
	if calls := e.Calls(t, s.Name); len(calls) != 1 {
		t.Fatalf("the receiver saw the purchase %d times, want once", len(calls))
	}

	refuses(t, s, e, id, body, h, sent, now)

	// Taken back: the purchase's reversal, delivered twice at once,
	// revokes it once, under a key of its own.
	rid, reversal := s.Reversed("p1")
	var rw sync.WaitGroup
	for range 2 {
		rw.Go(func() {
			if code := post(rid, reversal, now, false); code != http.StatusOK {
				t.Errorf("the reversal answered %d, want 200", code)
			}
		})
	}
	rw.Wait()
	eventually("the payment is taken back", func() bool { return e.Fulfilments(t, s.Name, state.Revoke, state.Fulfilled) == 1 })
	if calls := e.Calls(t, s.Name); len(calls) != 2 || calls[1] != state.Revoke {
		t.Errorf("the receiver saw %v, want one fulfilment and then one revocation", calls)
	}
	if n := e.Fulfilments(t, s.Name, state.Revoke, ""); n != 1 {
		t.Errorf("%d revocations, want 1", n)
	}

	if s.rotates(t) {
		rid, rbody := s.Paid("p2")
		if code := post(rid, rbody, now, true); code != http.StatusOK {
			t.Errorf("signed with the secret being rotated out: %d, want 200", code)
		}
	}
}

// refuses sends what must be refused (unsigned, altered by one byte, and
// where the scheme signs a time, stale and from the future) and checks
// that nothing is stored.
func refuses(t *testing.T, s Sample, e Edge, id string, body []byte, h http.Header, sent []byte, now time.Time) {
	t.Helper()
	alter := s.Alter
	if alter == nil {
		alter = alterMiddle
	}
	if string(alter(sent)) == string(sent) {
		t.Fatal("the sample's Alter changes nothing")
	}
	type refusal struct {
		name   string
		header http.Header
		body   []byte
	}
	refused := []refusal{
		{"Unsigned", http.Header{}, body},
		{"AlteredByOneByte", h, alter(sent)},
	}
	if s.UnsignedTime {
		// Nothing is stale: a delivery replayed an hour on is the event
		// already stored, and fulfils nothing more.
		h, sent := s.Request(t, id, body, now.Add(-time.Hour), false)
		if code := e.Post(t, s.Name, h, sent); code != http.StatusOK {
			t.Errorf("replayed an hour on: %d, want 200 for the event already stored", code)
		}
		if n := e.Fulfilments(t, s.Name, state.Fulfil, ""); n != 1 {
			t.Errorf("replayed an hour on: %d fulfilments, want 1", n)
		}
	} else {
		refused = append(refused,
			refusal{"Stale", s.Sign(t, id, body, now.Add(-time.Hour), false), body},
			refusal{"FromTheFuture", s.Sign(t, id, body, now.Add(time.Hour), false), body})
	}
	for _, r := range refused {
		if code := e.Post(t, s.Name, r.header, r.body); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", r.name, code)
		}
	}
	if n := e.Events(t, s.Name, ""); n != 3 {
		t.Errorf("%d events stored after the refusals, want 3: refused requests change nothing", n)
	}
}

// alterMiddle changes one byte in the middle of body, keeping it JSON.
func alterMiddle(body []byte) []byte {
	out := append([]byte(nil), body...)
	for i := len(out) / 2; i < len(out); i++ {
		if out[i] >= 'a' && out[i] <= 'y' {
			out[i]++
			return out
		}
	}
	return out
}
