package web

import (
	"testing"
	"time"
)

// TestActivityCountsEachOutcomeOnce: the chart's buckets read the outcome's
// kind; a sender that left before the answer (it retries) is not a
// refusal.
func TestActivityCountsEachOutcomeOnce(t *testing.T) {
	t.Parallel()
	var a activity
	now := time.Now()
	for _, o := range []deliveryOutcome{
		accepted(0), {kind: kindDuplicateFilter}, {kind: kindDuplicatePostgres}, {kind: kindDuplicatePostgres},
		refused("signature", "bad signature", ""), {kind: kindUnavailable}, {kind: kindClientGone},
	} {
		a.record(now, "stripe", o.kind)
	}
	got := a.lastHour(now)[59]
	want := minuteCounts{minute: now.Unix() / 60, New: 1, DupRedis: 1, DupPG: 2, Rejected: 1, Failed: 1}
	if got != want {
		t.Errorf("last minute = %+v, want %+v", got, want)
	}
}

// TestActivityPerProvider: each served provider's last hour is its own; a
// provider nothing was delivered to reads zero; an hour-old delivery is
// out of the window.
func TestActivityPerProvider(t *testing.T) {
	t.Parallel()
	var a activity
	now := time.Now()
	a.record(now, "shopify", kindStored)
	a.record(now.Add(-10*time.Minute), "shopify", kindDuplicatePostgres)
	a.record(now, "shopify", kindDuplicateFilter)
	a.record(now, "paddle", kindRefused)
	a.record(now.Add(-61*time.Minute), "paddle", kindStored)
	got := a.providerTotals(now, []string{"lemonsqueezy", "paddle", "shopify"})
	want := []providerActivity{
		{Provider: "lemonsqueezy"},
		{Provider: "paddle", Counts: minuteCounts{Rejected: 1}},
		{Provider: "shopify", Counts: minuteCounts{New: 1, DupPG: 1, DupRedis: 1}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if all := a.lastHour(now); all[59].New != 1 || all[59].Rejected != 1 || all[49].DupPG != 1 {
		t.Errorf("the whole hour lost a provider's deliveries: %+v", all[49:])
	}
}
