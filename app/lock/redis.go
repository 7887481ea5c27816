package lock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keeps locks in Redis keys {prefix}{name} holding the holder's token,
// with fencing numbers from a counter key {prefix}{name}:fence. Release and
// extension are Lua scripts that compare the token before acting.
//
// Redis may forget (a flush, a restore): a forgotten counter would hand out
// old fencing numbers, which the guarded write refuses. The lock then fails
// closed until the counter passes the last accepted number; use the
// Postgres locker where that matters.
type Redis struct {
	Client redis.UniversalClient
	// Prefix starts every key. Defaults to "lock:".
	Prefix string
}

var (
	acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
	extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

func (r Redis) keys(name string) []string {
	prefix := r.Prefix
	if prefix == "" {
		prefix = "lock:"
	}
	return []string{prefix + name, prefix + name + ":fence"}
}

// Acquire takes the lock if no one holds it.
func (r Redis) Acquire(ctx context.Context, name string, ttl time.Duration) (Lease, error) {
	if ttl < time.Millisecond {
		return Lease{}, errors.New("lock ttl must be at least 1ms")
	}
	token := newToken()
	fence, err := acquireScript.Run(ctx, r.Client, r.keys(name), token, ttl.Milliseconds()).Int64()
	if err != nil {
		return Lease{}, err
	}
	if fence == 0 {
		return Lease{}, ErrHeld
	}
	return Lease{Name: name, Token: token, Fence: fence}, nil
}

// Extend pushes the expiry out if the lease still holds the lock.
func (r Redis) Extend(ctx context.Context, l Lease, ttl time.Duration) error {
	n, err := extendScript.Run(ctx, r.Client, r.keys(l.Name)[:1], l.Token, ttl.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrLost
	}
	return nil
}

// Release deletes the lock if the lease still holds it.
func (r Redis) Release(ctx context.Context, l Lease) error {
	n, err := releaseScript.Run(ctx, r.Client, r.keys(l.Name)[:1], l.Token).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrLost
	}
	return nil
}
