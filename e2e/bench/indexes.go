package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// indexCosts measures what each index on the tables a payment writes costs
// it: the floor (intake and dispatch together, at batch sizes b) with
// every index in place, then with each index of Guardian's that no
// constraint or uniqueness needs dropped in turn, each pair run -runs times alternately. An index's cost
// is the Postgres CPU per payment and the rate it takes. The indexes are
// put back as they were after each run.
func indexCosts(ctx context.Context, pool *pgxpool.Pool, dbURL string, b batches) string {
	rows, err := pool.Query(ctx, `
		SELECT c.relname, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		WHERE c.relname IN ('webhook_event', 'fulfilment', 'fulfilment_transition', 'purchase')
		  AND NOT i.indisunique AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
		ORDER BY c.relname, 2`)
	check(err)
	type index struct{ table, name, def string }
	var indexes []index
	for rows.Next() {
		var ix index
		check(rows.Scan(&ix.table, &ix.name, &ix.def))
		indexes = append(indexes, ix)
	}
	check(rows.Err())

	var out strings.Builder
	fmt.Fprintf(&out, "what each index costs a payment: the floor (intake %d, dispatch %d a batch) with it and without it, %d runs each, medians\n", size(b.intake), size(b.claim), *runs)
	fmt.Fprintf(&out, "  %-48s %12s %12s %14s\n", "index dropped", "payments/s", "CPU ms", "CPU saved")
	var baseRate, baseCPU []float64
	measure := func() floorResult {
		analyze(dbURL)
		return floorWhole(ctx, pool, dbURL, b)
	}
	for range *runs {
		r := measure()
		baseRate, baseCPU = append(baseRate, r.perSecond), append(baseCPU, r.cpuMs)
	}
	base := summarize(baseCPU).median
	fmt.Fprintf(&out, "  %-48s %12.0f %12.3f %14s\n", "(none)", summarize(baseRate).median, base, "")
	for _, ix := range indexes {
		var rate, cpu []float64
		for range *runs {
			_, err := pool.Exec(ctx, "DROP INDEX "+ix.name)
			check(err)
			r := measure()
			_, err = pool.Exec(ctx, ix.def)
			check(err)
			rate, cpu = append(rate, r.perSecond), append(cpu, r.cpuMs)
		}
		c := summarize(cpu).median
		fmt.Fprintf(&out, "  %-48s %12.0f %12.3f %13.0f%%\n", ix.name, summarize(rate).median, c, 100*(base-c)/base)
	}
	return out.String()
}
