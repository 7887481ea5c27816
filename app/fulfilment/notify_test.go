package fulfilment_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/jobs"
)

// TestNewJobsAreAnnouncedOnceCommitted: River's working clients are told
// of a payment's dispatch job once its transaction has committed (its
// statement notifies nobody: db.NotifyJobs), at most once in NotifyEvery.
// Jobs committed within NotifyEvery of a notification are not left to
// River's poll: one notification at its end announces them all. An event
// that fulfils nothing announces nothing.
func TestNewJobsAreAnnouncedOnceCommitted(t *testing.T) {
	t.Parallel()
	const every = 800 * time.Millisecond
	b := setup(t, func(c *fulfilment.Config) { c.Enqueuer.(*enqueuer).notifyEvery = every })
	next := b.listen(t)
	queued := func() int { return b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`) }

	b.pay(t, "evt_first", "pi_first")
	first, ok := next(every / 2)
	require.True(t, ok, "the first job is announced at once")
	require.Equal(t, 1, queued(), "and was committed when it was")

	// Two more within NotifyEvery of the first notification: one
	// notification at its end, after both committed.
	b.pay(t, "evt_second", "pi_second")
	b.pay(t, "evt_third", "pi_third")
	paid := time.Now()
	require.Less(t, paid.Sub(first), every, "the test paid too slowly to be inside NotifyEvery")
	second, ok := next(every + 5*time.Second)
	require.True(t, ok, "jobs committed inside NotifyEvery were never announced")
	require.GreaterOrEqual(t, second.Sub(first), every/2, "the second notification came early: not limited")
	require.Equal(t, 3, queued())
	_, ok = next(every + 200*time.Millisecond)
	require.False(t, ok, "one notification announces every job committed inside NotifyEvery")

	// An event that fulfils nothing makes no job, and announces nothing.
	_, err := b.svc.Accept(b.ctx, providertest.Payment("evt_note", ""))
	require.NoError(t, err)
	_, ok = next(every + 200*time.Millisecond)
	require.False(t, ok, "a delivery that made no job notified")

	// A job made outside intake, by an operator's retry of a declined
	// fulfilment, is announced once its transaction has committed.
	failed := b.fail(t, "evt_declined", "pi_declined")
	_, ok = next(every + 200*time.Millisecond) // the declined payment's own
	require.True(t, ok)
	before := queued()
	out, err := b.svc.Retry(b.ctx, []string{failed}, "alice")
	require.NoError(t, err)
	require.Equal(t, fulfilment.RetryCreated, out[0].Verdict)
	_, ok = next(every + 5*time.Second)
	require.True(t, ok, "the retry's job was never announced")
	require.Equal(t, before+1, queued())
}

// listen listens on River's insert notifications until the test ends;
// next waits up to wait for the next one, checks it names the dispatch
// queue, and says when it came.
func (b *testBundle) listen(t *testing.T) (next func(wait time.Duration) (time.Time, bool)) {
	t.Helper()
	notified := b.db.Listen(t, jobs.DispatchJobs().Topic)
	return func(wait time.Duration) (time.Time, bool) {
		payload, ok := notified(wait)
		if !ok {
			return time.Time{}, false
		}
		require.JSONEq(t, `{"queue": "dispatch"}`, payload)
		return time.Now(), true
	}
}
