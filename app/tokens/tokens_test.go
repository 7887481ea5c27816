package tokens_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/tokens"
	"github.com/guardian-pay/guardian/app/tokens/tokenstest"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/redistest"
)

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	tokenstest.Run(t, func(t *testing.T) tokenstest.Harness {
		d := dbtest.NewDB(t)
		pool, err := pgxpool.New(context.Background(), d.URL)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return tokenstest.Harness{
			Store: tokens.Postgres{Store: db.New(pool)},
			// A restart as the database sees one: every session on it is
			// terminated (the first store's pool dies with them) and a new
			// process connects. Only what was committed survives.
			Restart: func(t *testing.T) tokens.Store {
				var n int
				require.NoError(t, d.Pool.QueryRow(context.Background(), `
					SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n))
				require.Positive(t, n, "the first store's sessions were terminated")
				fresh, err := pgxpool.New(context.Background(), d.URL)
				require.NoError(t, err)
				t.Cleanup(fresh.Close)
				return tokens.Postgres{Store: db.New(fresh)}
			},
		}
	})
}

func TestRedisStore(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"GetDel", "LuaScript"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			tokenstest.Run(t, func(t *testing.T) tokenstest.Harness {
				d := dbtest.NewDB(t)
				srv := redistest.StartServer(t)
				newStore := func(t *testing.T) tokens.Store {
					c := srv.Client(t)
					t.Cleanup(func() { _ = c.Close() })
					s, err := tokens.NewRedis(context.Background(), c, db.New(d.Pool), "")
					require.NoError(t, err)
					require.True(t, s.UsesGetDel(), "Redis 7 supports GETDEL")
					if mode == "LuaScript" {
						s.ForceScript()
					}
					return s
				}
				return tokenstest.Harness{
					Store:    newStore(t),
					Snapshot: func(t *testing.T) { srv.Snapshot(t) },
					Restart: func(t *testing.T) tokens.Store {
						srv.RestartFromSnapshot(t)
						return newStore(t)
					},
				}
			})
		})
	}
}

func TestSupportsGetDel(t *testing.T) {
	t.Parallel()
	for info, want := range map[string]bool{
		"# Server\r\nredis_version:7.0.15\r\n": true,
		"redis_version:6.2.0\r\n":              true,
		"redis_version:6.0.9\r\n":              false,
		"redis_version:5.0.7\r\n":              false,
		"no version here":                      false,
	} {
		if got := tokens.SupportsGetDel(info); got != want {
			t.Errorf("SupportsGetDel(%q) = %v, want %v", info, got, want)
		}
	}
}
