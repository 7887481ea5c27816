package lock_test

import (
	"testing"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/lock/locktest"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

func TestPostgresLocker(t *testing.T) {
	t.Parallel()
	locktest.Run(t, func(t *testing.T) locktest.Harness {
		d := dbtest.NewDB(t)
		return locktest.Harness{Locker: lock.Postgres{Store: db.New(d.Pool)}, Pool: d.Pool}
	})
}
