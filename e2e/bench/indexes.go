package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// indexCosts measures what each index on the tables a payment writes costs
// it, on the floor (intake and dispatch together, at batch sizes b): for
// each index of Guardian's that no constraint or uniqueness needs and the
// floor's own statements do not read, a run with it and a run without it,
// side by side, -runs times. An index's cost is the share of the Postgres
// CPU per payment its absence saves, the median of the pairs: the machine
// drifts as the tables grow, a pair does not. The index is put back after
// each run.
func indexCosts(ctx context.Context, pool *pgxpool.Pool, dbURL string, b batches) string {
	type index struct {
		table, name, def string
		written          bool
	}
	var indexes []index
	scans := func() map[string]int64 {
		rows, err := pool.Query(ctx, `SELECT indexrelname, idx_scan FROM pg_stat_user_indexes`)
		check(err)
		out := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			check(rows.Scan(&name, &n))
			out[name] = n
		}
		check(rows.Err())
		return out
	}
	measure := func() floorResult {
		analyze(dbURL)
		return bareFloor.whole(ctx, pool, dbURL, b)
	}
	before := scans()
	measure() // warm, and learn which indexes the floor reads
	after := scans()

	rows, err := pool.Query(ctx, `
		SELECT c.relname, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), coalesce(pg_get_expr(i.indpred, i.indrelid), '')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		WHERE c.relname IN ('webhook_event', 'fulfilment_identity', 'fulfilment_move', 'fulfilment_transition', 'purchase')
		  AND NOT i.indisunique AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
		ORDER BY c.relname, 2`)
	check(err)
	var read []string
	preds := map[string]string{}
	for rows.Next() {
		var ix index
		var pred string
		check(rows.Scan(&ix.table, &ix.name, &ix.def, &pred))
		if after[ix.name] > before[ix.name] {
			read = append(read, ix.name)
			continue
		}
		indexes, preds[ix.name] = append(indexes, ix), pred
	}
	check(rows.Err())
	// A partial index none of the floor's rows falls in is never written
	// by a payment: its figures are the control, the machine's noise.
	for i, ix := range indexes {
		ix.written = true
		if p := preds[ix.name]; p != "" && ix.table != "fulfilment_transition" {
			var n int
			check(pool.QueryRow(ctx, "SELECT count(*) FROM "+ix.table+" WHERE provider = 'floor' AND ("+p+")").Scan(&n))
			ix.written = n > 0
		}
		indexes[i] = ix
	}
	slices.SortStableFunc(indexes, func(a, b index) int {
		if a.written == b.written {
			return 0
		}
		if a.written {
			return -1
		}
		return 1
	})

	var out strings.Builder
	fmt.Fprintf(&out, "what each index costs a payment: the floor (intake %d, dispatch %d a batch) with it and without it, side by side, %d pairs each, medians\n", size(b.intake), size(b.claim), *runs)
	fmt.Fprintf(&out, "  %-40s %10s %10s %10s\n", "index", "CPU ms", "without", "saved")
	control := false
	for _, ix := range indexes {
		if !ix.written && !control {
			control = true
			fmt.Fprintf(&out, "  partial indexes no payment of the floor is written to (the control: their figures are the noise):\n")
		}
		var with, without, saved []float64
		for range *runs {
			w := measure()
			_, err := pool.Exec(ctx, "DROP INDEX "+ix.name)
			check(err)
			wo := measure()
			_, err = pool.Exec(ctx, ix.def)
			check(err)
			with, without = append(with, w.cpuMs), append(without, wo.cpuMs)
			saved = append(saved, 100*(w.cpuMs-wo.cpuMs)/w.cpuMs)
		}
		fmt.Fprintf(&out, "  %-40s %10.3f %10.3f %9.1f%%\n", ix.name, summarize(with).median, summarize(without).median, summarize(saved).median)
	}
	fmt.Fprintf(&out, "  read by the floor's own statements, kept: %s\n", strings.Join(read, ", "))
	return out.String()
}
