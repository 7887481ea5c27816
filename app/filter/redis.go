package filter

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
}

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
	return &Redis{
		client:  cfg.Client,
		prefix:  cmp.Or(cfg.Prefix, "idem:") + cfg.Epoch + ":",
		ttl:     cmp.Or(cfg.TTL, 24*time.Hour),
		timeout: cmp.Or(cfg.Timeout, 100*time.Millisecond),
		backoff: cmp.Or(cfg.Backoff, time.Second),
	}, nil
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
	if r.paused() {
		return false, ErrPaused
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	n, err := r.client.Exists(ctx, r.key(provider, eventID)).Result()
	if err != nil {
		r.pause()
		return false, err
	}
	return n == 1, nil
}

// MarkCommitted writes the event's mark with the filter's TTL.
func (r *Redis) MarkCommitted(ctx context.Context, provider, eventID string) error {
	if r.paused() {
		return ErrPaused
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.client.Set(ctx, r.key(provider, eventID), "committed", r.ttl).Err(); err != nil {
		r.pause()
		return err
	}
	return nil
}

func (r *Redis) paused() bool {
	return time.Now().UnixNano() < r.pausedUntil.Load()
}

func (r *Redis) pause() {
	r.pausedUntil.Store(time.Now().Add(r.backoff).UnixNano())
}
