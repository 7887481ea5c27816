package filter

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardian-pay/guardian/app/batch"
)

// RedisConfig configures the Redis filter.
type RedisConfig struct {
	// Client talks to Redis. Required. Give it short dial, read and write
	// timeouts (see NewRedisClient).
	Client redis.UniversalClient
	// Prefix starts every key. Defaults to "idem:".
	Prefix string
	// Epoch names the database the marks vouch for (db.Epoch). Required:
	// it is part of every key, so a restored or failed-over database (after
	// `guardian epoch rotate`), or another deployment sharing the Redis,
	// never inherits marks for events it does not hold.
	Epoch string
	// TTL is how long a mark lives. Defaults to 24 hours.
	TTL time.Duration
	// Timeout bounds each call. Defaults to 100 milliseconds.
	Timeout time.Duration
	// Backoff is how long the filter stays out of the way after an error, so
	// a hanging Redis costs one timeout per Backoff rather than one per
	// delivery. Defaults to 1 second.
	Backoff time.Duration
}

// Redis is a Filter on Redis keys {prefix}{epoch}:{provider}:{event id}.
type Redis struct {
	client  redis.UniversalClient
	prefix  string
	ttl     time.Duration
	timeout time.Duration
	backoff time.Duration

	// pausedUntil is a Unix-nano time before which the filter answers
	// ErrPaused without calling Redis.
	pausedUntil atomic.Int64

	// checks and marks pipeline concurrent calls: one write and one read
	// for as many as are waiting, instead of a round trip each.
	checks *batch.Gatherer[*redisCall]
	marks  *batch.Gatherer[*redisCall]
}

// redisCall is one check or mark waiting for its pipeline.
type redisCall struct {
	key  string
	seen bool
	err  error
}

// pipelineSize caps one pipeline; pipelineWriters is how many may be in
// flight at once (connections in use).
const (
	pipelineSize    = 256
	pipelineWriters = 4
)

// ErrPaused means the filter skipped Redis because a recent call failed.
var ErrPaused = errors.New("redis filter paused after an error")

// NewRedis returns a Redis filter.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("redis filter: client is required")
	}
	if cfg.Epoch == "" {
		return nil, errors.New("redis filter: the database's epoch is required")
	}
	r := &Redis{
		client:  cfg.Client,
		prefix:  cmp.Or(cfg.Prefix, "idem:") + cfg.Epoch + ":",
		ttl:     cmp.Or(cfg.TTL, 24*time.Hour),
		timeout: cmp.Or(cfg.Timeout, 100*time.Millisecond),
		backoff: cmp.Or(cfg.Backoff, time.Second),
	}
	r.checks = &batch.Gatherer[*redisCall]{MaxBatch: pipelineSize, MaxWriters: pipelineWriters, Timeout: r.timeout, Write: r.writeChecks}
	r.marks = &batch.Gatherer[*redisCall]{MaxBatch: pipelineSize, MaxWriters: pipelineWriters, Timeout: r.timeout, Write: r.writeMarks}
	return r, nil
}

// NewRedisClient returns a go-redis client for url with the short timeouts a
// fail-open filter needs: it must give up long before a provider would.
func NewRedisClient(url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, errors.New("REDIS_URL is not a redis:// URL")
	}
	opts.DialTimeout = 100 * time.Millisecond
	opts.ReadTimeout = 100 * time.Millisecond
	opts.WriteTimeout = 100 * time.Millisecond
	opts.PoolTimeout = 100 * time.Millisecond
	opts.MaxRetries = -1 // one try: falling through to Postgres is the retry
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), nil
}

func (r *Redis) key(provider, eventID string) string {
	return r.prefix + provider + ":" + eventID
}

// Committed reports whether the event's mark exists.
func (r *Redis) Committed(ctx context.Context, provider, eventID string) (bool, error) {
	c, err := r.call(ctx, r.checks, provider, eventID)
	return err == nil && c.seen, err
}

// MarkCommitted writes the event's mark with the filter's TTL.
func (r *Redis) MarkCommitted(ctx context.Context, provider, eventID string) error {
	_, err := r.call(ctx, r.marks, provider, eventID)
	return err
}

// call submits one call to its pipeline and waits at most the filter's
// timeout for it. Any failure pauses the filter. The call's fields belong
// to the pipeline's writer until its batch is done: a caller that stops
// waiting never touches them (the writer may still be filling them in).
func (r *Redis) call(ctx context.Context, g *batch.Gatherer[*redisCall], provider, eventID string) (*redisCall, error) {
	if r.paused() {
		return nil, ErrPaused
	}
	c := &redisCall{key: r.key(provider, eventID)}
	wait := time.NewTimer(r.timeout)
	defer wait.Stop()
	var err error
	select {
	case <-g.Submit(c):
		err = c.err
	case <-wait.C:
		err = context.DeadlineExceeded
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		r.pause()
		return nil, err
	}
	return c, nil
}

// writeChecks sends one EXISTS per call in one pipeline.
func (r *Redis) writeChecks(ctx context.Context, calls []*redisCall) {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.Exists(ctx, c.key)
	}
	_, err := pipe.Exec(ctx)
	for i, c := range calls {
		n, cerr := cmds[i].Result()
		c.seen, c.err = n == 1, cmp.Or(cerr, err)
	}
}

// writeMarks sends one SET per call in one pipeline.
func (r *Redis) writeMarks(ctx context.Context, calls []*redisCall) {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.StatusCmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.Set(ctx, c.key, "committed", r.ttl)
	}
	_, err := pipe.Exec(ctx)
	for i, c := range calls {
		c.err = cmp.Or(cmds[i].Err(), err)
	}
}

func (r *Redis) paused() bool {
	return time.Now().UnixNano() < r.pausedUntil.Load()
}

func (r *Redis) pause() {
	r.pausedUntil.Store(time.Now().Add(r.backoff).UnixNano())
}
