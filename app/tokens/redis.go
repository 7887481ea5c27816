package tokens

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardian-pay/guardian/db"
)

// Redis keeps token records in Redis keys that expire with the token, and
// records every redemption in Postgres before it counts, so a Redis
// restarted from an older snapshot cannot bring a consumed token back.
//
// A redeem takes the key atomically with GETDEL (Redis 6.2 and later) or a
// GET+DEL Lua script (older servers), chosen by asking the server its
// version. If Postgres cannot record the redemption the token is spent
// without being redeemed: it fails closed.
type Redis struct {
	client redis.UniversalClient
	store  *db.Store
	prefix string
	getdel bool
}

var getDelScript = redis.NewScript(`local v = redis.call('GET', KEYS[1]); if v then redis.call('DEL', KEYS[1]) end; return v`)

// NewRedis returns a Redis token store, probing the server's version.
// prefix starts every key (default "token:").
func NewRedis(ctx context.Context, client redis.UniversalClient, store *db.Store, prefix string) (*Redis, error) {
	if prefix == "" {
		prefix = "token:"
	}
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("probe redis version: %w", err)
	}
	return &Redis{client: client, store: store, prefix: prefix, getdel: SupportsGetDel(info)}, nil
}

// UsesGetDel reports whether redeems use GETDEL (else the Lua script).
func (r *Redis) UsesGetDel() bool { return r.getdel }

// SupportsGetDel reads redis_version from INFO server and reports whether it
// is 6.2 or later.
func SupportsGetDel(info string) bool {
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		parts := strings.SplitN(v, ".", 3)
		if len(parts) < 2 {
			return false
		}
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			return false
		}
		return major > 6 || (major == 6 && minor >= 2)
	}
	return false
}

func (r *Redis) key(hash []byte) string { return r.prefix + hex.EncodeToString(hash) }

// Put stores the record with the token's remaining life as TTL.
func (r *Redis) Put(ctx context.Context, hash []byte, rec Record) error {
	ttl := time.Until(rec.ExpiresAt)
	if ttl <= 0 {
		return errors.New("token already expired")
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ok, err := r.client.SetNX(ctx, r.key(hash), raw, ttl).Result()
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("token collision")
	}
	return nil
}

// Take removes the key atomically, then records the redemption durably.
func (r *Redis) Take(ctx context.Context, hash []byte) (Record, error) {
	var raw string
	var err error
	if r.getdel {
		raw, err = r.client.GetDel(ctx, r.key(hash)).Result()
	} else {
		var v any
		v, err = getDelScript.Run(ctx, r.client, []string{r.key(hash)}).Result()
		raw, _ = v.(string)
	}
	if errors.Is(err, redis.Nil) {
		return Record{}, ErrGone
	}
	if err != nil {
		return Record{}, fmt.Errorf("take token: %w", err)
	}
	var rec Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return Record{}, fmt.Errorf("token record: %w", err)
	}
	if err := db.RecordConsumption(ctx, r.store.Pool(), hash, rec.ExpiresAt); err != nil {
		if errors.Is(err, db.ErrConflict) {
			return Record{}, ErrGone // consumed before: this copy came back from a snapshot
		}
		return Record{}, fmt.Errorf("record redemption: %w", err)
	}
	return rec, nil
}
