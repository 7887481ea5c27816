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
		a.record(now, o.kind)
	}
	got := a.lastHour(now)[59]
	want := minuteCounts{minute: now.Unix() / 60, New: 1, DupRedis: 1, DupPG: 2, Rejected: 1, Failed: 1}
	if got != want {
		t.Errorf("last minute = %+v, want %+v", got, want)
	}
}
