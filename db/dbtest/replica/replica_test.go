package replica_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db/dbtest/replica"
)

// exec runs one statement on url.
func exec(t *testing.T, url, sql string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func count(t *testing.T, url, sql string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}

// A synchronous pair keeps every acknowledged commit through the primary's
// crash; an asynchronous pair whose standby stopped receiving loses what
// the primary acknowledged since. The multi-host URL finds whichever
// server takes writes.
func TestPair(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode replica.Replication
		want int
	}{{"sync", replica.Sync, 2}, {"async, standby paused", replica.Async, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := replica.Start(t, tc.mode)
			url := p.URL("postgres")
			require.NoError(t, exec(t, url, `CREATE TABLE acked (n int)`))
			require.NoError(t, exec(t, url, `INSERT INTO acked VALUES (1)`))
			require.Error(t, exec(t, p.Standby.URL("postgres"), `INSERT INTO acked VALUES (0)`), "the standby takes no writes")
			if tc.mode == replica.Async {
				p.WaitReplayed() // failing, it shows the standby's log
				require.Equal(t, 1, count(t, p.Standby.URL("postgres"), `SELECT count(*) FROM acked`), "replayed, and the standby at Standby.URL has it")
				p.Standby.Stop()
			}
			require.NoError(t, exec(t, url, `INSERT INTO acked VALUES (2)`))
			p.Primary.Crash()
			if tc.mode == replica.Async {
				p.Standby.Start()
			}
			require.Error(t, exec(t, url, `INSERT INTO acked VALUES (0)`), "before promotion nothing takes writes")
			p.Standby.Promote()
			require.Equal(t, tc.want, count(t, url, `SELECT count(*) FROM acked`))
			require.NoError(t, exec(t, url, `INSERT INTO acked VALUES (3)`), "the promoted standby takes writes through the same URL")
		})
	}
}
