package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The moving state (-only moving) asks, before Guardian's schema is
// changed for it, what a narrow row for the state a dispatch moves would
// save: the floor's work on Guardian's schema against the same work on the
// schema narrow_schema.sql proposes, on databases filled to each of -sizes
// (0 and a million payments unless -sizes says otherwise), in pairs.
//
// Each dispatch moves a fulfilment twice (the claim and the outcome), and
// neither move is HOT on Guardian's schema: the state is indexed, so each
// writes an entry into every index of the wide row, one of them keyed by
// the payment, a random leaf once the table outgrows memory. On the narrow
// schema a move writes only the narrow row's indexes, keyed by its id and
// by time; intake pays a second row for it.

// narrowEdits make the floor's scripts into the narrow row's: intake
// also makes each fulfilment's moving row; the claim and the outcome move
// it, reading the wide row for the payment. Each edit must apply exactly
// once, so a change to the floor's scripts the edits no longer fit stops
// the comparison instead of measuring something else.
var narrowEdits = map[string][][2]string{
	bareFloor.intake: {{
		"), logged AS (\n    INSERT INTO fulfilment_transition",
		"), moving AS (\n    INSERT INTO fulfilment_move (id, action) SELECT id, 'fulfil' FROM created\n), logged AS (\n    INSERT INTO fulfilment_transition",
	}},
	bareFloor.dispatch: {
		{"UPDATE fulfilment f SET state = 'dispatching', attempt = f.attempt + 1,", "UPDATE fulfilment_move m SET state = 'dispatching', attempt = m.attempt + 1,"},
		{"claim_token = md5(f.id::text)", "claim_token = md5(m.id::text)"},
		{"FROM u WHERE f.id = u.id AND f.id = ANY (string_to_array(:ids, ',')::uuid[]) AND (f.state = 'pending') IS TRUE",
			"FROM u JOIN fulfilment f ON f.id = u.id WHERE m.id = u.id AND m.id = ANY (string_to_array(:ids, ',')::uuid[]) AND (m.state = 'pending') IS TRUE"},
		{"RETURNING f.id, f.event_pk, f.provider, f.payment_id, f.attempt, f.idempotency_key",
			"RETURNING m.id, f.event_pk, f.provider, f.payment_id, m.attempt, f.idempotency_key"},
		{"UPDATE fulfilment f SET state = 'fulfilled', call_outcome = 'done'\n    WHERE f.id = ANY (string_to_array(:ids, ',')::uuid[]) AND f.state = 'dispatching' AND f.attempt = 1\n    RETURNING f.id, f.attempt",
			"UPDATE fulfilment_move m SET state = 'fulfilled', call_outcome = 'done'\n    WHERE m.id = ANY (string_to_array(:ids, ',')::uuid[]) AND m.state = 'dispatching' AND m.attempt = 1\n    RETURNING m.id, m.attempt"},
	},
}

// narrowFloor writes the narrow row's floor scripts into dir, made from
// the floor's own by narrowEdits, and returns them.
func narrowFloor(dir string) floorSQL {
	derive := func(name string) string {
		b, err := os.ReadFile(filepath.Join(repoRoot(), "e2e", "bench", name))
		check(err)
		script := string(b)
		for _, e := range narrowEdits[name] {
			if n := strings.Count(script, e[0]); n != 1 {
				log.Fatalf("%s: the narrow row's edit %q applies %d times, want once: mend narrowEdits", name, e[0], n)
			}
			script = strings.Replace(script, e[0], e[1], 1)
		}
		path := filepath.Join(dir, "narrow_"+name)
		check(os.WriteFile(path, []byte(script), 0o600))
		return path
	}
	return floorSQL{intake: derive(bareFloor.intake), dispatch: derive(bareFloor.dispatch), provider: bareFloor.provider}
}

// movingBatches are the batch sizes the comparison runs at: about what
// Guardian's own pipeline makes under load (docs/performance.md).
var movingBatches = batches{intake: 8, claim: 9, outcome: 6}

// movingPoint is one size's measurements, each a run per pair.
type movingPoint struct {
	payments                         int
	wideDispatch, narrowDispatch     []floorResult
	wideWhole, narrowWhole           []floorResult
	wideFulfilment, narrowFulfilment int64 // bytes of the fulfilment's tables and indexes
}

func compareMoving(ctx context.Context) string {
	list := "0,1000000"
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "sizes" {
			list = f.Value.String()
		}
	})
	dir, err := os.MkdirTemp("", "guardian-bench-narrow-")
	check(err)
	defer os.RemoveAll(dir)
	narrow := narrowFloor(dir)
	var points []movingPoint
	sizes := parseSizes(list)
	for i, n := range sizes {
		points = append(points, measureMoving(ctx, n, narrow))
		if i < len(sizes)-1 { // so far, in case the larger sizes take too long
			log.Print(printMoving(points))
		}
	}
	return printMoving(points)
}

// measureMoving fills a database to n payments, copies it, gives the copy
// the narrow row, and runs the floor's dispatch and its whole pipeline on
// each in turn, which goes first alternating.
func measureMoving(ctx context.Context, n int, narrowSQL floorSQL) movingPoint {
	suffix := strconv.Itoa(n)
	wideURL := createDB(ctx, "wide_"+suffix)
	pool, err := pgxpool.New(ctx, wideURL)
	check(err)
	if n > 0 {
		fillScale(ctx, pool, 0, n)
		vacuum(ctx, pool)
	}
	pool.Close()
	narrowURL := copyDB(ctx, wideURL, "narrow_"+suffix)
	if !*keep {
		defer dropDB(ctx, wideURL)
		defer dropDB(ctx, narrowURL)
	} else {
		log.Printf("keeping the databases: %s and %s", wideURL, narrowURL)
	}
	schema, err := os.ReadFile(filepath.Join(repoRoot(), "e2e", "bench", "narrow_schema.sql"))
	check(err)
	start := time.Now()
	conn, err := pgx.Connect(ctx, narrowURL)
	check(err)
	_, err = conn.Exec(ctx, string(schema)) // no arguments: one simple query, every statement
	check(err)
	_, err = conn.Exec(ctx, `VACUUM (ANALYZE) fulfilment, fulfilment_move`)
	check(err)
	check(conn.Close(ctx))
	log.Printf("%d payments: the narrow row made in %s", n, time.Since(start).Round(time.Second))

	wide, err := pgxpool.New(ctx, wideURL)
	check(err)
	defer wide.Close()
	narrow, err := pgxpool.New(ctx, narrowURL)
	check(err)
	defer narrow.Close()
	p := movingPoint{payments: n}
	runWide := func() {
		p.wideDispatch = append(p.wideDispatch, bareFloor.drainTimed(ctx, wide, wideURL, movingBatches))
		p.wideWhole = append(p.wideWhole, bareFloor.whole(ctx, wide, wideURL, movingBatches))
	}
	runNarrow := func() {
		p.narrowDispatch = append(p.narrowDispatch, narrowSQL.drainTimed(ctx, narrow, narrowURL, movingBatches))
		p.narrowWhole = append(p.narrowWhole, narrowSQL.whole(ctx, narrow, narrowURL, movingBatches))
	}
	for i := range *runs {
		if i%2 == 0 {
			runWide()
			runNarrow()
		} else {
			runNarrow()
			runWide()
		}
	}
	// Every payment a run counted done was moved to fulfilled on its
	// schema's row: a script that moved nothing would count the same.
	for _, db := range []struct {
		pool  *pgxpool.Pool
		moved string
	}{{wide, `SELECT count(*) FROM fulfilment WHERE provider = 'floor' AND state = 'fulfilled'`},
		{narrow, `SELECT count(*) FROM fulfilment_move m JOIN fulfilment f USING (id) WHERE f.provider = 'floor' AND m.state = 'fulfilled'`}} {
		var moved int
		check(db.pool.QueryRow(ctx, db.moved).Scan(&moved))
		if done := floorDone(ctx, db.pool); moved != done {
			log.Fatalf("%d payments: %d floor payments done but %d fulfilled", n, done, moved)
		}
	}
	const footprint = `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
		WHERE c.relname IN ('fulfilment', 'fulfilment_move') AND c.relkind = 'r'`
	check(wide.QueryRow(ctx, footprint).Scan(&p.wideFulfilment))
	check(narrow.QueryRow(ctx, footprint).Scan(&p.narrowFulfilment))
	return p
}

// copyDB makes a copy of the database at srcURL, named for this process
// and suffix, by copying its files (no connection to it may be open).
func copyDB(ctx context.Context, srcURL, suffix string) string {
	conn, err := pgx.Connect(ctx, *adminURL)
	check(err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("guardian_bench_%d_%s", os.Getpid(), suffix)
	start := time.Now()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+dbName(srcURL)+" STRATEGY FILE_COPY")
	check(err)
	log.Printf("copied %s in %s", dbName(srcURL), time.Since(start).Round(time.Second))
	return strings.Replace(srcURL, "/"+dbName(srcURL), "/"+name, 1)
}

// printMoving is the comparison's table: for each size, each schema's
// dispatch and whole pipeline (median rate, median Postgres CPU per
// payment), the narrow row's against Guardian's, and each against its own
// first size.
func printMoving(points []movingPoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the moving state on the floor: Guardian's row against a narrow row (%d pairs, medians; rate, Postgres CPU per payment)\n", *runs)
	fmt.Fprintf(&b, "%-34s", "payments in the database")
	for _, p := range points {
		fmt.Fprintf(&b, " %22d", p.payments)
	}
	b.WriteString("   last/first\n")
	row := func(name string, runs func(movingPoint) []floorResult) {
		fmt.Fprintf(&b, "%-34s", name)
		var first, last float64
		for i, p := range points {
			rate, cpu := medians(runs(p))
			fmt.Fprintf(&b, " %10.0f/s %7.3f ms", rate, cpu)
			if i == 0 {
				first = rate
			}
			last = rate
		}
		if first > 0 {
			fmt.Fprintf(&b, "   %.2f", last/first)
		}
		b.WriteString("\n")
	}
	ratio := func(name string, narrow, wide func(movingPoint) []floorResult) {
		fmt.Fprintf(&b, "%-34s", name)
		for _, p := range points {
			nr, nc := medians(narrow(p))
			wr, wc := medians(wide(p))
			fmt.Fprintf(&b, " %9.2fx %9.2fx CPU", nr/wr, nc/wc)
		}
		b.WriteString("\n")
	}
	row("dispatch, Guardian's row", func(p movingPoint) []floorResult { return p.wideDispatch })
	row("dispatch, narrow row", func(p movingPoint) []floorResult { return p.narrowDispatch })
	ratio("  narrow against Guardian's", func(p movingPoint) []floorResult { return p.narrowDispatch }, func(p movingPoint) []floorResult { return p.wideDispatch })
	row("end to end, Guardian's row", func(p movingPoint) []floorResult { return p.wideWhole })
	row("end to end, narrow row", func(p movingPoint) []floorResult { return p.narrowWhole })
	ratio("  narrow against Guardian's", func(p movingPoint) []floorResult { return p.narrowWhole }, func(p movingPoint) []floorResult { return p.wideWhole })
	fmt.Fprintf(&b, "%-34s", "size: fulfilment, Guardian's row")
	for _, p := range points {
		fmt.Fprintf(&b, " %20.1fMi", float64(p.wideFulfilment)/(1<<20))
	}
	fmt.Fprintf(&b, "\n%-34s", "size: fulfilment and its move")
	for _, p := range points {
		fmt.Fprintf(&b, " %20.1fMi", float64(p.narrowFulfilment)/(1<<20))
	}
	b.WriteString("\n")
	return b.String()
}

// medians are the median rate and the median CPU per payment of runs.
func medians(runs []floorResult) (rate, cpu float64) {
	var rates, cpus []float64
	for _, r := range runs {
		rates, cpus = append(rates, r.perSecond), append(cpus, r.cpuMs)
	}
	return summarize(rates).median, summarize(cpus).median
}
