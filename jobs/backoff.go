package jobs

import (
	"math/rand/v2"
	"time"
)

// MaxBackoff is the longest a failed dispatch or routing job waits before
// its next attempt.
const MaxBackoff = 5 * time.Minute

// maxAttempts bounds a dispatch or routing job's tries: with backoff's
// cap, about seven hours of them. Then River discards the job and the
// sweep gives its fulfilment or purchase a new one (invariant 6;
// fulfilment.Service.RequeueAwaiting for a purchase), so the tries never end;
// each job's errors, kept on its row, stay bounded. At River's default of
// 25, a job would be discarded and replaced every hour of a long outage.
const maxAttempts = 100

// backoff is the wait before a failed job's next attempt: the attempt
// squared, in seconds, at most MaxBackoff, less up to a tenth so that jobs
// that failed together do not all come back together. A receiver or a
// provider's API that comes back is tried again within five minutes,
// however long it was away: River's own backoff (the attempt to the fourth
// power) waits 68 minutes after the eighth failure, so a payment whose
// receiver was down for an hour would wait about another hour once it was
// back.
func backoff(attempt int) time.Duration {
	d := min(time.Duration(attempt)*time.Duration(attempt)*time.Second, MaxBackoff)
	return d - rand.N(d/10+1)
}
