package connector

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// Step is one check of a conformance run and what the receiver's answers
// showed.
type Step struct {
	// Name says what was sent.
	Name string
	// Status is the receiver's last HTTP status in the step; 0 when no
	// answer came.
	Status int
	// OK is whether the receiver kept the contract, and Verdict says why
	// in a sentence.
	OK      bool
	Verdict string
}

// hold is how long the run keeps a key in progress.
const hold = 1500 * time.Millisecond

// Conform checks the receiver against the contract (docs/receivers.md)
// with test deliveries only (TestEventType, keys under TestKeyPrefix, the
// payment TestPaymentID), so it never gives a receiver that keeps the
// contract a payment to act on:
//
//   - a request signed with a wrong secret, and one with a stale
//     timestamp: refused (401 or 403), and nothing recorded;
//   - a test delivery under a key without the test prefix: refused (400),
//     and nothing recorded, so no test can reach the action by a real key;
//   - a lookup of a key never sent: "not_done", signed;
//   - one key sent twice at once: one act (one receipt), the other 409 or
//     the same stored answer;
//   - a lookup and a resend while a key is in progress: "in_progress" and
//     409, never done;
//   - a finished key again: its stored answer, receipt included, never 409;
//   - a finished key with another body: refused (422), nothing done;
//   - a declined key, sent again (also with a body that would act) and
//     looked up: declined every time, never an act.
//
// It takes a few seconds: some keys are held in progress for 1.5 s.
//
// Every test delivery names provider as its provider, so a receiver that
// routes by provider is checked along that provider's path; "" names none.
func (c *HTTP) Conform(ctx context.Context, provider string) []Step {
	r := run{c: c, ctx: ctx, provider: provider}
	steps := []Step{r.wrongSecret(), r.staleTimestamp(), r.testUnderRealKey(), r.unknownKey()}
	steps = append(steps, r.concurrent()...)
	steps = append(steps, r.inProgress()...)
	steps = append(steps, r.declined()...)
	return steps
}

// run is one conformance run's state.
type run struct {
	c        *HTTP
	ctx      context.Context
	provider string
}

// answer is one answer of the receiver.
type answer struct {
	status int
	st     contract.Statement
	signed string // why the answer holds no signed statement about the key; "" when it does
	err    error
}

func (a answer) receipt() string {
	if a.signed != "" {
		return ""
	}
	return a.st.Receipt
}

func newTestKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return contract.TestKeyPrefix + hex.EncodeToString(b[:])
}

// send POSTs a test delivery for key, signed by signer at at.
func (r *run) send(key string, p contract.TestPayload, signer *standardwebhooks.Webhook, at time.Time) answer {
	payload, _ := json.Marshal(p)
	body, err := EncodeRequest(Request{Key: key, Attempt: 1, Provider: r.provider, PaymentID: contract.TestPaymentID, EventID: key, EventType: contract.TestEventType, Payload: payload})
	if err != nil {
		return answer{err: err}
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.c.timeout+hold)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.c.url, bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	h, err := contract.SignHeaders(signer, key, body, at)
	if err != nil {
		return answer{err: err}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header["idempotency-key"] = []string{key}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(contract.HeaderAttempt, "1")
	resp, err := r.c.client.Do(req)
	if err != nil {
		return answer{err: fmt.Errorf("no answer (%s)", classifyError(err))}
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatement))
	st, why := r.c.statement(out, resp.Header, key)
	return answer{status: resp.StatusCode, st: st, signed: why}
}

func (r *run) post(key string, p contract.TestPayload) answer {
	return r.send(key, p, r.c.signer, r.c.now())
}

// lookup asks the lookup endpoint about key; why says why the answer was
// no signed statement, when it was none.
func (r *run) lookup(key string) (got Answer, why string) {
	if !r.c.CanLookup() {
		return CannotTell, "no lookup URL configured (GUARDIAN_CONNECTOR_LOOKUP_URL): parked payments would wait for an operator"
	}
	a, ev, err := r.c.Lookup(r.ctx, key)
	if err != nil {
		return CannotTell, err.Error()
	}
	if why, ok := ev["lookup_unverified"]; ok {
		return a, fmt.Sprint(why)
	}
	if e, ok := ev["lookup_error"]; ok {
		return a, fmt.Sprintf("no answer (%v)", e)
	}
	if code, ok := ev["lookup_status"]; ok && a == CannotTell {
		return a, fmt.Sprintf("answered %v", code)
	}
	return a, ""
}

func (r *run) refused(name string, a answer, key string) Step {
	s := Step{Name: name, Status: a.status}
	switch {
	case a.err != nil:
		s.Verdict = a.err.Error()
		return s
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
	case a.status/100 == 2:
		s.Verdict = "ACCEPTED: anyone who can reach the receiver can make it act"
		return s
	default:
		s.Verdict = fmt.Sprintf("answered %d: a receiver refuses an unauthenticated request with 401 or 403, which Guardian retries and alerts on", a.status)
		return s
	}
	return r.recordedNothing(s, key)
}

// recordedNothing passes a step whose request was refused when a lookup
// then finds nothing recorded for its key.
func (r *run) recordedNothing(s Step, key string) Step {
	if got, why := r.lookup(key); got != NotPerformed && why == "" {
		s.Verdict = "refused, but the lookup then said " + got.String() + ": a refused request must record nothing"
		return s
	}
	s.OK, s.Verdict = true, fmt.Sprintf("refused with %d", s.Status)
	return s
}

func (r *run) wrongSecret() Step {
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	wrong, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString(secret[:]))
	key := newTestKey()
	return r.refused("request signed with a wrong secret", r.send(key, contract.TestPayload{}, wrong, r.c.now()), key)
}

func (r *run) staleTimestamp() Step {
	key := newTestKey()
	return r.refused("request signed 10 minutes ago (a replay)", r.send(key, contract.TestPayload{}, r.c.signer, r.c.now().Add(-10*time.Minute)), key)
}

// testUnderRealKey sends a test delivery under a key without
// TestKeyPrefix: a receiver keeping the test-key guard refuses it (400)
// and records nothing.
func (r *run) testUnderRealKey() Step {
	key := "conformance_probe_" + strings.TrimPrefix(newTestKey(), contract.TestKeyPrefix)
	a := r.post(key, contract.TestPayload{})
	s := Step{Name: "test delivery under a key without the " + contract.TestKeyPrefix + " prefix", Status: a.status}
	switch {
	case a.err != nil:
		s.Verdict = a.err.Error()
		return s
	case a.status/100 == 2:
		s.Verdict = "ACCEPTED: a test delivery under a real key reaches the action"
		return s
	case a.status/100 != 4 || a.status == http.StatusConflict || a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		s.Verdict = fmt.Sprintf("answered %d: refuse a test event under a real key with 400", a.status)
		return s
	}
	return r.recordedNothing(s, key)
}

func (r *run) unknownKey() Step {
	s := Step{Name: "lookup of a key never sent"}
	got, why := r.lookup(newTestKey())
	switch {
	case got == NotPerformed:
		s.OK, s.Verdict = true, "not_done, signed"
	case why != "":
		s.Verdict = "no signed statement: " + why
	default:
		s.Verdict = "answered " + got.String() + " for a key never sent: the lookup cannot be trusted"
	}
	return s
}

// judgeLookup checks a lookup of key against want.
func (r *run) judgeLookup(name, key string, want Answer, wrong string) Step {
	s := Step{Name: name}
	switch got, why := r.lookup(key); {
	case got == want:
		s.OK, s.Verdict = true, want.String()+", signed"
	case why != "":
		s.Verdict = "no signed statement: " + why
	default:
		s.Verdict = "answered " + got.String() + wrong
	}
	return s
}

// concurrent sends one key twice at once, then again, then with another
// body, and looks it up.
func (r *run) concurrent() []Step {
	key := newTestKey()
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = r.post(key, contract.TestPayload{HoldMillis: int(hold / time.Millisecond)})
		}()
	}
	wg.Wait()
	s := Step{Name: "one key sent twice at once", Status: answers[1].status}
	var receipts []string
	for _, a := range answers {
		switch {
		case a.err != nil:
			s.Verdict = a.err.Error()
			return []Step{s}
		case a.status/100 == 2 && a.signed != "":
			s.Verdict = fmt.Sprintf("answered %d without a signed statement (%s): a done key answers its statement, receipt included", a.status, a.signed)
			return []Step{s}
		case a.status/100 == 2 && a.receipt() == "":
			s.Verdict = fmt.Sprintf("answered %d with a signed statement that names no receipt: a done statement names the act's receipt", a.status)
			return []Step{s}
		case a.status/100 == 2:
			receipts = append(receipts, a.receipt())
		case a.status != http.StatusConflict:
			s.Verdict = fmt.Sprintf("answered %d: a key in progress answers 409", a.status)
			return []Step{s}
		}
	}
	switch {
	case len(receipts) == 0:
		s.Verdict = "both answered 409: nothing acted"
		return []Step{s}
	case len(receipts) == 2 && receipts[0] != receipts[1]:
		s.Verdict = "ACTED TWICE: two acts (two receipts) for one key"
		return []Step{s}
	}
	s.OK, s.Verdict = true, "one act; the other request answered 409 (in progress) or the stored answer"
	receipt := receipts[0]

	again := r.post(key, contract.TestPayload{HoldMillis: int(hold / time.Millisecond)})
	s2 := Step{Name: "a finished key sent again", Status: again.status}
	switch {
	case again.err != nil:
		s2.Verdict = again.err.Error()
	case again.status == http.StatusConflict:
		s2.Verdict = "answered 409 for a finished key: 409 means in progress, and Guardian would never learn it was done"
	case again.status/100 != 2:
		s2.Verdict = fmt.Sprintf("answered %d for a finished key: it replays the stored answer (2xx)", again.status)
	case again.receipt() != receipt:
		s2.Verdict = "ACTED AGAIN: a new receipt for a finished key"
	default:
		s2.OK, s2.Verdict = true, "the stored answer, same receipt: no new act"
	}

	other := r.post(key, contract.TestPayload{Variant: 1})
	s3 := Step{Name: "a finished key with another body", Status: other.status}
	switch {
	case other.err != nil:
		s3.Verdict = other.err.Error()
	case other.status/100 == 2 && other.receipt() != receipt:
		s3.Verdict = "ACTED AGAIN: another body under a finished key made a new act"
	case other.status/100 == 2:
		s3.Verdict = "answered the stored answer for another body: the IETF draft refuses a key reused with another body (422)"
	case other.status/100 == 4 && !notDelivered[other.status] && other.status != http.StatusConflict:
		s3.OK, s3.Verdict = true, fmt.Sprintf("refused with %d", other.status)
	default:
		s3.Verdict = fmt.Sprintf("answered %d: a key reused with another body answers 422", other.status)
	}
	s4 := r.judgeLookup("lookup of a finished key", key, Performed, " for a key that was done: Guardian would send it again or wait forever")
	return []Step{s, s2, s3, s4}
}

// inProgress holds a key in progress and asks about it meanwhile.
func (r *run) inProgress() []Step {
	key := newTestKey()
	first := make(chan answer, 1)
	go func() { first <- r.post(key, contract.TestPayload{HoldMillis: int(hold / time.Millisecond)}) }()

	// Let the first request take the key: a receiver that has not seen it
	// yet would rightly say "not done".
	select {
	case <-time.After(hold / 3):
	case <-r.ctx.Done():
	}
	s1 := r.judgeLookup("lookup of a key in progress", key, InProgress, " while the key was in progress: \"not_done\" would send it again while the first request still runs, \"done\" would record an act that may fail")
	dup := r.post(key, contract.TestPayload{HoldMillis: int(hold / time.Millisecond)})
	s2 := Step{Name: "a key sent again while in progress", Status: dup.status}
	a := <-first
	switch {
	case dup.err != nil:
		s2.Verdict = dup.err.Error()
	case dup.status == http.StatusConflict:
		s2.OK, s2.Verdict = true, "409: in progress"
	case dup.status/100 == 2 && a.receipt() != "" && a.receipt() == dup.receipt():
		s2.OK, s2.Verdict = true, "waited for the first request and replayed its answer"
	case dup.status/100 == 2:
		s2.Verdict = "ACTED TWICE: a second act while the first was in progress"
	default:
		s2.Verdict = fmt.Sprintf("answered %d: a key in progress answers 409", dup.status)
	}
	return []Step{s1, s2}
}

// declined has a key declined, sends it again and looks it up.
func (r *run) declined() []Step {
	key := newTestKey()
	judge := func(name string, a answer) Step {
		s := Step{Name: name, Status: a.status}
		switch {
		case a.err != nil:
			s.Verdict = a.err.Error()
		case a.status/100 == 2:
			s.Verdict = fmt.Sprintf("answered %d: the key was declined, and a declined key stays declined", a.status)
		case a.signed != "":
			s.Verdict = fmt.Sprintf("answered %d without a signed statement (%s): Guardian would park the payment instead of freeing it", a.status, a.signed)
		case a.st.Status != contract.StatusDeclined:
			s.Verdict = fmt.Sprintf("answered %d, %q: want a signed \"declined\"", a.status, a.st.Status)
		case a.status/100 != 4 || notDelivered[a.status] || a.status == http.StatusConflict:
			s.Verdict = fmt.Sprintf("a decline answered %d: send it with a 4xx such as 422", a.status)
		default:
			s.OK, s.Verdict = true, fmt.Sprintf("%d, declined, signed", a.status)
		}
		return s
	}
	steps := []Step{
		judge("a key the receiver declines", r.post(key, contract.TestPayload{Decline: true})),
		judge("a declined key sent again", r.post(key, contract.TestPayload{Decline: true})),
	}
	// The same key with a body that would act: a receiver that forgot the
	// decline acts now, under a key Guardian counts as declined, and
	// Guardian's next key for the payment would act a second time.
	acting := r.post(key, contract.TestPayload{})
	s := Step{Name: "a declined key sent with a body that would act", Status: acting.status}
	switch {
	case acting.err != nil:
		s.Verdict = acting.err.Error()
	case acting.status/100 == 2:
		s.Verdict = "ACTED on a declined key: a declined key stays declined for good"
	case acting.status/100 == 4 && !notDelivered[acting.status] && acting.status != http.StatusConflict:
		s.OK, s.Verdict = true, fmt.Sprintf("refused with %d", acting.status)
	default:
		s.Verdict = fmt.Sprintf("answered %d: a declined key answers its decline, or 422 for another body", acting.status)
	}
	return append(steps, s, r.judgeLookup("lookup of a declined key", key, Declined, " for a declined key"))
}
