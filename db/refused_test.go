package db_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

func TestRefusalsStayBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	old, recent := time.Now().Add(-8*24*time.Hour), time.Now()
	var rs []db.Refusal
	for i := range 30 {
		at := recent
		if i < 10 {
			at = old
		}
		rs = append(rs, db.Refusal{At: at, Provider: "stripe", Reason: "signature", Detail: strings.Repeat("é", 499) + "\x00", Client: "203.0.113.1"})
	}
	require.NoError(t, db.InsertRefusals(ctx, d.Pool, rs))
	require.Equal(t, 300, d.Count(t, `SELECT max(length(detail)) FROM refused_delivery`), "the answer is cut to 300 characters")

	n, err := db.New(d.Pool).PruneRefusals(ctx, time.Now().Add(-7*24*time.Hour), 15)
	require.NoError(t, err)
	require.EqualValues(t, 15, n, "ten too old, five beyond the newest fifteen")
	require.Equal(t, 15, d.Count(t, `SELECT count(*) FROM refused_delivery`))
	require.Zero(t, d.Count(t, `SELECT count(*) FROM refused_delivery WHERE at < now() - interval '7 days'`))

	list, err := db.Refusals(ctx, d.Pool, 0, 10)
	require.NoError(t, err)
	require.Len(t, list, 10)
	next, err := db.Refusals(ctx, d.Pool, list[9].ID, 10)
	require.NoError(t, err)
	require.Len(t, next, 5)
	require.Less(t, next[0].ID, list[9].ID, "newest first, continued by id")
}

// TestRefusalReasonsAreOneList: the constraint on refused_delivery admits
// exactly db.RefusalReasons, and each of them can be recorded.
func TestRefusalReasonsAreOneList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	var def string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'refused_delivery_reason_check'`).Scan(&def))
	var inConstraint []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(def, -1) {
		inConstraint = append(inConstraint, m[1])
	}
	var inGo []string
	for _, r := range db.RefusalReasons {
		inGo = append(inGo, string(r))
		require.NoError(t, db.InsertRefusals(ctx, d.Pool, []db.Refusal{{At: time.Now(), Provider: "stripe", Reason: r, Detail: "d", Client: "203.0.113.1"}}), "reason %s", r)
	}
	require.ElementsMatch(t, inGo, inConstraint, "the constraint and db.RefusalReasons differ")
}
