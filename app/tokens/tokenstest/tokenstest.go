// Package tokenstest is the conformance suite every token store must pass,
// run against each implementation like testing/slogtest.
package tokenstest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/tokens"
)

// Harness is one store under test.
type Harness struct {
	Store tokens.Store
	// Snapshot records the store's state as a backup would. Nil for a
	// store whose restarts never go back in time (Postgres: a commit is
	// durable; a point-in-time restore is an operator's act, see
	// docs/operations.md).
	Snapshot func(t *testing.T)
	// Restart restarts the store (from its last snapshot, when it has one:
	// a crash and a restore from an older backup) and returns the store as
	// a new process sees it afterwards. It must really drop what the store
	// held in memory and every connection to it.
	Restart func(t *testing.T) tokens.Store
}

// Concurrency is how many redeems of one token race in the suite.
const Concurrency = 1000

// Run runs the suite; newHarness gives each subtest a fresh store.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, c := range []struct {
		name string
		run  func(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness)
	}{
		{"RedeemsOnceWithItsPayload", redeemsOnceWithItsPayload},
		{"ConcurrentRedeemsOneWins", concurrentRedeemsOneWins},
		{"ExpiredIsGone", expiredIsGone},
		{"UnknownIsGone", unknownIsGone},
		{"OtherPurposeBurnsIt", otherPurposeBurnsIt},
		{"InternalTokensAreNotPublic", internalTokensAreNotPublic},
		{"StaysConsumedAfterRestartFromOlderSnapshot", staysConsumedAfterRestartFromOlderSnapshot},
		{"RefusesBadRequests", refusesBadRequests},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(context.Background(), t, newHarness) })
	}
}

// redeemsOnceWithItsPayload is the suite's case RedeemsOnceWithItsPayload.
func redeemsOnceWithItsPayload(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	token, rec, err := svc.Issue(ctx, "claim", json.RawMessage(`{"fulfilment_id":"f-1"}`), time.Hour)
	must(t, err)
	if len(token) < 43 {
		t.Fatalf("token %q carries fewer than 256 bits", token)
	}
	got, err := svc.Redeem(ctx, token)
	must(t, err)
	if got.Purpose != "claim" || !jsonEqual(got.Payload, rec.Payload) || !got.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Fatalf("redeemed %+v, issued %+v", got, rec)
	}
	if _, err := svc.Redeem(ctx, token); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("second redeem: %v, want ErrGone", err)
	}
}

// concurrentRedeemsOneWins is the suite's case ConcurrentRedeemsOneWins.
func concurrentRedeemsOneWins(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	token, _, err := svc.Issue(ctx, "confirm", nil, time.Hour)
	must(t, err)
	var wins, gone atomic.Int32
	var other atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range Concurrency {
		wg.Go(func() {
			<-start
			_, err := svc.Redeem(ctx, token)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, tokens.ErrGone):
				gone.Add(1)
			default:
				other.Store(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if err, _ := other.Load().(error); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if wins.Load() != 1 || gone.Load() != Concurrency-1 {
		t.Fatalf("%d concurrent redeems: %d succeeded, %d gone; want exactly 1", Concurrency, wins.Load(), gone.Load())
	}
}

// expiredIsGone is the suite's case ExpiredIsGone.
func expiredIsGone(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	now := time.Now()
	clock := func() time.Time { return now }
	svc := tokens.New(h.Store, clock)
	token, _, err := svc.Issue(ctx, "claim", nil, time.Minute)
	must(t, err)
	now = now.Add(time.Minute)
	if _, err := svc.Redeem(ctx, token); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("redeem at expiry: %v, want ErrGone", err)
	}
}

// unknownIsGone is the suite's case UnknownIsGone.
func unknownIsGone(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	for _, token := range []string{"never-issued-token-value-0000000000000000000", "", "x"} {
		if _, err := svc.Redeem(ctx, token); !errors.Is(err, tokens.ErrGone) {
			t.Fatalf("redeem %q: %v, want ErrGone", token, err)
		}
	}
}

// otherPurposeBurnsIt is the suite's case OtherPurposeBurnsIt.
func otherPurposeBurnsIt(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	token, _, err := svc.Issue(ctx, "resolve", json.RawMessage(`"f-1"`), time.Hour)
	must(t, err)
	if _, err := svc.RedeemFor(ctx, token, "claim"); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("redeem for another purpose: %v, want ErrGone", err)
	}
	if _, err := svc.RedeemFor(ctx, token, "resolve"); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("a token presented for the wrong purpose must be spent: %v", err)
	}
}

// internalTokensAreNotPublic is the suite's case InternalTokensAreNotPublic.
func internalTokensAreNotPublic(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	internal, _, err := svc.Internal().Issue(ctx, "confirm", nil, time.Hour)
	must(t, err)
	if _, err := svc.Redeem(ctx, internal); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("public redeem of an internal token: %v, want ErrGone", err)
	}
	if _, err := svc.Internal().RedeemFor(ctx, internal, "confirm"); err != nil {
		t.Fatalf("the internal token was consumed by the public attempt: %v", err)
	}
	public, _, err := svc.Issue(ctx, "confirm", nil, time.Hour)
	must(t, err)
	if _, err := svc.Internal().RedeemFor(ctx, public, "confirm"); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("internal redeem of a public token: %v, want ErrGone", err)
	}
	if _, err := svc.Redeem(ctx, public); err != nil {
		t.Fatalf("the public token was consumed by the internal attempt: %v", err)
	}
}

// staysConsumedAfterRestartFromOlderSnapshot is the suite's case StaysConsumedAfterRestartFromOlderSnapshot.
func staysConsumedAfterRestartFromOlderSnapshot(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	token, _, err := svc.Issue(ctx, "claim", nil, time.Hour)
	must(t, err)
	unused, _, err := svc.Issue(ctx, "claim", nil, time.Hour)
	must(t, err)
	if h.Snapshot != nil {
		h.Snapshot(t) // the backup still holds both tokens
	}
	_, err = svc.Redeem(ctx, token)
	must(t, err)
	svc = tokens.New(h.Restart(t), nil)
	if _, err := svc.Redeem(ctx, token); !errors.Is(err, tokens.ErrGone) {
		t.Fatalf("a consumed token came back after a restart: %v", err)
	}
	if _, err := svc.Redeem(ctx, unused); err != nil {
		t.Fatalf("an unused token from before the snapshot must still redeem: %v", err)
	}
}

// refusesBadRequests is the suite's case RefusesBadRequests.
func refusesBadRequests(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	svc := tokens.New(h.Store, nil)
	for _, tc := range []struct {
		purpose string
		payload string
		ttl     time.Duration
	}{{"", "", time.Hour}, {"p", "", 0}, {"p", "", tokens.MaxTTL + time.Second}, {"p", "{nope", time.Hour}} {
		if _, _, err := svc.Issue(ctx, tc.purpose, json.RawMessage(tc.payload), tc.ttl); !errors.Is(err, tokens.ErrInvalid) {
			t.Fatalf("Issue(%q, %q, %s) = %v, want ErrInvalid", tc.purpose, tc.payload, tc.ttl, err)
		}
	}
}

// jsonEqual compares JSON by value: stores may normalise spacing and key order.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
