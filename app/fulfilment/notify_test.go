package fulfilment_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/logtest"
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

	b.pay(t, "evt_first", "pi_first")
	first, ok := next(every / 2)
	require.True(t, ok, "the first job is announced at once")
	require.Equal(t, 1, b.queued(t), "and was committed when it was")

	// Two more within NotifyEvery of the first notification: one
	// notification at its end, after both committed.
	b.pay(t, "evt_second", "pi_second")
	b.pay(t, "evt_third", "pi_third")
	paid := time.Now()
	require.Less(t, paid.Sub(first), every, "the test paid too slowly to be inside NotifyEvery")
	second, ok := next(every + 5*time.Second)
	require.True(t, ok, "jobs committed inside NotifyEvery were never announced")
	require.GreaterOrEqual(t, second.Sub(first), every/2, "the second notification came early: not limited")
	require.Equal(t, 3, b.queued(t))
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
	before := b.queued(t)
	out, err := b.svc.Retry(b.ctx, []string{failed}, "alice")
	require.NoError(t, err)
	require.Equal(t, fulfilment.RetryCreated, out[0].Verdict)
	_, ok = next(every + 5*time.Second)
	require.True(t, ok, "the retry's job was never announced")
	require.Equal(t, before+1, b.queued(t))
}

// TestALostTurnIsOwedAgain: a batch that took the turn to notify and then
// failed sent no notification, and jobs other batches committed since the
// last one counted on it. Their notification is owed again, at the end of
// NotifyEvery, not left to River's poll. The batch fails in Postgres: a
// trigger refuses its event.
func TestALostTurnIsOwedAgain(t *testing.T) {
	t.Parallel()
	const every = 800 * time.Millisecond
	b := setup(t, func(c *fulfilment.Config) { c.Enqueuer.(*enqueuer).notifyEvery = every })
	_, err := b.db.Pool.Exec(b.ctx, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_id = 'evt_poison' THEN RAISE EXCEPTION 'refused by the test'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON webhook_event FOR EACH ROW EXECUTE FUNCTION refuse_poison()`)
	require.NoError(t, err)
	next := b.listen(t)

	b.pay(t, "evt_first", "pi_first") // takes the turn
	first, ok := next(every / 2)
	require.True(t, ok, "the first job is announced at once")

	// Half a NotifyEvery later, a job owes a notification, due a whole
	// NotifyEvery later still.
	time.Sleep(every / 2)
	b.pay(t, "evt_owed", "pi_owed")
	owed := time.Now()

	// The turn comes round before the owed notification is due, and goes
	// to a batch that fails.
	time.Sleep(time.Until(first.Add(every + every/8)))
	require.Less(t, time.Since(owed), every*3/4, "the test was too slow to take the turn before the owed notification")
	_, err = b.svc.Accept(b.ctx, providertest.Payment("evt_poison", "pi_poison"))
	require.ErrorContains(t, err, "refused by the test")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_poison'`))

	_, ok = next(every + 5*time.Second)
	require.True(t, ok, "the job owed a notification was never announced: a failed batch kept the turn")
	require.Equal(t, 2, b.queued(t))
}

// TestAnOwedNotificationKeepsItsDistance: a notification owed before a
// turn was taken, for jobs committed after it, is not sent when first
// due, inside that turn's NotifyEvery: it waits for the turn's
// NotifyEvery to pass, as River's insert would, and still comes.
func TestAnOwedNotificationKeepsItsDistance(t *testing.T) {
	t.Parallel()
	const every = 800 * time.Millisecond
	b := setup(t, func(c *fulfilment.Config) { c.Enqueuer.(*enqueuer).notifyEvery = every })
	next := b.listen(t)

	b.pay(t, "evt_first", "pi_first") // takes the turn
	first, ok := next(every / 2)
	require.True(t, ok, "the first job is announced at once")

	// Three eighths of a NotifyEvery later, a job owes a notification,
	// first due at eleven eighths.
	time.Sleep(time.Until(first.Add(every * 3 / 8)))
	b.pay(t, "evt_owed", "pi_owed")

	// The turn comes round before that, and jobs are owed after it.
	time.Sleep(time.Until(first.Add(every + every/64)))
	b.pay(t, "evt_turn", "pi_turn")
	b.pay(t, "evt_after", "pi_after")
	require.Less(t, time.Since(first), every*11/8, "the test was too slow to owe a job before the owed notification was due")
	turn, ok := next(every / 2)
	require.True(t, ok, "the turn's batch announced its job")

	owed, ok := next(every + 5*time.Second)
	require.True(t, ok, "the jobs owed after the turn were never announced")
	require.GreaterOrEqual(t, owed.Sub(turn), every*3/4, "the owed notification followed the turn's inside NotifyEvery")
	require.Equal(t, 4, b.queued(t))
	_, ok = next(every + 200*time.Millisecond)
	require.False(t, ok, "one notification announces every job owed")
}

// TestAFailedNotificationFailsNoDelivery: the notification an intake
// batch sends after its COMMIT cannot undo the commit, so its failure is
// not the delivery's: the delivery is answered as recorded, and the
// failure is logged and the notification owed again. Postgres refuses a
// channel name longer than 63 bytes.
func TestAFailedNotificationFailsNoDelivery(t *testing.T) {
	t.Parallel()
	var logged logtest.Buffer
	b := setup(t, func(c *fulfilment.Config) {
		c.Enqueuer.(*enqueuer).notifyEvery = 100 * time.Millisecond
		c.Enqueuer.(*enqueuer).topic = strings.Repeat("x", 64)
		c.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	})
	b.pay(t, "evt_paid", "pi_paid")
	require.Equal(t, 1, b.queued(t))
	require.Eventually(t, func() bool {
		out := logged.String()
		return strings.Contains(out, "the notification of an intake batch's new jobs failed") &&
			strings.Contains(out, "channel name too long") && // told why
			strings.Contains(out, "new dispatch jobs wait for River's next poll") // and sent again
	}, 5*time.Second, 20*time.Millisecond, "logged: %s", &logged)
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

// queued counts the dispatch jobs in River's table.
func (b *testBundle) queued(t *testing.T) int {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`)
}
