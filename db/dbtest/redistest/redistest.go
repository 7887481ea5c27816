// Package redistest gives tests a Redis client and a key prefix of their
// own on the server at TEST_REDIS_URL, and deletes their keys afterwards.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// URL returns TEST_REDIS_URL, failing the test with a how-to when unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TEST_REDIS_URL")
	if u == "" {
		t.Fatal("TEST_REDIS_URL is unset: point it at a Redis the tests may write to " +
			"(for example redis://127.0.0.1:6379/0, which `just test` sets)")
	}
	return u
}

// Client returns a client on TEST_REDIS_URL and a fresh key prefix. Keys
// under the prefix are deleted when the test ends.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at TEST_REDIS_URL does not answer: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "guardian-test:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		defer client.Close()
		DeletePrefix(t, client, prefix)
	})
	return client, prefix
}

// DeletePrefix deletes every key starting with prefix.
func DeletePrefix(t testing.TB, client *redis.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		if err := client.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("clean redis key: %v", err)
			return
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan redis keys: %v", err)
	}
}
