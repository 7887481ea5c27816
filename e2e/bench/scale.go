package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// The scale run (`just bench-scale`, -only scale) measures what Guardian
// costs as its tables grow: the database is filled in SQL with a merchant's
// history of payments and measured at each size of -sizes, the same run
// giving the baseline at the first.
//
// A payment's history, as Guardian leaves it: two events (the provider's
// payment and checkout events; every third delivered more than once), one
// fulfilment with its transitions, and for one in a hundred a refund taken
// back (a reversal event and a fulfilled revocation). One in 500 failed, one
// in 1,000 cancelled, one in 100,000 parked. Payments are 6 s apart, newest
// first, so a larger size adds older history: bodies older than the default
// payload retention (90 days) are pruned, as the maintenance round leaves
// them, and River keeps the last day's finished jobs (its retention).
var (
	sizesFlag       = flag.String("sizes", "0,1000000,10000000", "payments in the database at each measurement, ascending (-only scale)")
	checkpointFirst = flag.Bool("checkpoint", false, "with -only scale: run a CHECKPOINT before each intake run, Guardian's and the floor's, on the filled database and on the baseline alike, to measure intake where it costs most (each first change of a page after a checkpoint logs the whole page); without it, the runs are measured past a checkpoint cycle's first pass over the indexes keyed at random, with one pair right after a CHECKPOINT beside them")
)

// scaleFloor is the floor the scale run measures beside Guardian: its
// payments are Stripe's, as most of the filled history's are, so at every
// size they land at random among millions in the indexes keyed by payment,
// as Guardian's do.
var scaleFloor = bareFloor.amongProviders("stripe")

const (
	scaleSpacing   = 6 * time.Second // between two payments: 10 million is about two years
	scaleChunk     = 250_000         // payments per fill transaction
	scaleRetention = 90 * 24 * time.Hour
	scaleJobDay    = 24 * time.Hour
	// scaleLeafBase numbers logLeaves' payments (19 years of history
	// back), past any size this machine can fill.
	scaleLeafBase = 100_000_000
)

// fillScale adds payments lo to hi-1 (payment g happened g*scaleSpacing ago).
func fillScale(ctx context.Context, pool *pgxpool.Pool, lo, hi int) {
	body := `{"id":"evt","object":"event","type":"checkout.session.completed","data":{"object":{"object":"checkout.session","mode":"payment","payment_status":"paid","amount_total":1900,"currency":"usd","customer_details":{"email":"someone@example.com","name":"Some One","address":{"country":"DE"}}}}}`
	spacing := scaleSpacing.Seconds()
	for a := lo; a < hi; a += scaleChunk {
		b := min(a+scaleChunk, hi)
		start := time.Now()
		tx, err := pool.Begin(ctx)
		check(err)
		steps := []struct {
			sql  string
			args []any
		}{
			{`CREATE TEMP TABLE scale_payment (g int, provider text, pay text COLLATE "C", at timestamptz) ON COMMIT DROP`, nil},
			{`INSERT INTO scale_payment
			 SELECT g, (ARRAY['paddle','adyen','shopify','stripe','stripe','stripe','stripe','stripe','stripe','stripe'])[g % 10 + 1],
			        (ARRAY['txn_','PSP','','pi_','pi_','pi_','pi_','pi_','pi_','pi_'])[g % 10 + 1] || substr(md5(g::text), 1, 24),
			        now() - g * make_interval(secs => $3)
			 FROM generate_series($1::int, $2::int - 1) g`, []any{a, b, spacing}},
			// The payment's two events; bodies past the retention pruned.
			// Their ids are of the runs' form, the prefix and hex, so that
			// the runs' events land among them in the events' key, as a
			// deployment's land among its history (before session 41 they
			// had a letter after the prefix, and most runs' events landed
			// apart, among the runs' own).
			{`INSERT INTO webhook_event (provider, event_id, event_type, payment_id, deliveries, first_seen_at, last_seen_at, body, pruned_at)
			 SELECT provider, 'evt_' || substr(md5(k || g), 1, 24), t, pay, 1 + (g % 3 = 0)::int, at, at,
			        CASE WHEN at > now() - make_interval(secs => $1) THEN convert_to($2, 'UTF8') ELSE '' END,
			        CASE WHEN at > now() - make_interval(secs => $1) THEN NULL ELSE at + make_interval(secs => $1) END
			 FROM scale_payment, (VALUES ('p', 'payment_intent.succeeded'), ('c', 'checkout.session.completed')) v(k, t)
			 ORDER BY g, k`, []any{scaleRetention.Seconds(), body}},
			// Each payment's purchase. Without them the purchases' key held
			// only the runs' own payments, a few hundred thousand, where a
			// deployment's holds every one.
			{fmt.Sprintf(fillPurchases, "pay", "at", "scale_payment ORDER BY g"), nil},
			// One in a hundred refunded in full, a day later (the last day's
			// payments now: nothing of the history is in the future).
			{`INSERT INTO webhook_event (provider, event_id, event_type, payment_id, first_seen_at, last_seen_at, body, pruned_at, reversal, reverses, revokes)
			 SELECT provider, 'evt_' || substr(md5('r' || g), 1, 24), 'charge.refunded', pay, least(at + interval '1 day', now()), least(at + interval '1 day', now()),
			        '', at + make_interval(secs => $1), 'refund', pay, '{fulfil}'
			 FROM scale_payment WHERE g % 100 = 13`, []any{scaleRetention.Seconds()}},
			// Each payment's fulfilment, the refunded ones' revocations, and
			// their transitions.
			{`WITH f AS MATERIALIZED (
				SELECT guardian_uuid7() AS id, e.id AS event_pk, p.provider, p.pay, s.state, p.at AS created_at,
					guardian_idempotency_key(p.provider, p.pay, 0) AS key, 'fulfil' AS action, 'fulfil' AS action_name
				FROM scale_payment p
				JOIN webhook_event e ON e.event_id = 'evt_' || substr(md5('c' || p.g), 1, 24) AND e.provider = p.provider
				CROSS JOIN LATERAL (SELECT CASE WHEN p.g % 100000 = 7 THEN 'needs_reconciliation' WHEN p.g % 500 = 3 THEN 'failed'
					WHEN p.g % 1000 = 5 THEN 'cancelled' ELSE 'fulfilled' END AS state) s
				UNION ALL
				SELECT guardian_uuid7(), e.id, p.provider, p.pay, 'fulfilled', e.first_seen_at, guardian_revoke_key(p.provider, p.pay, 0), 'revoke', 'fulfil'
				FROM scale_payment p
				JOIN webhook_event e ON e.event_id = 'evt_' || substr(md5('r' || p.g), 1, 24) AND e.provider = p.provider
				WHERE p.g % 100 = 13 AND p.g % 500 <> 3 AND p.g % 1000 <> 5 AND p.g % 100000 <> 7
			), identity AS (
				INSERT INTO fulfilment_identity (id, event_pk, provider, payment_id, created_at, idempotency_key, action, action_name, failed)
				SELECT id, event_pk, provider, pay, created_at, key, action, action_name, state = 'failed' FROM f
			), moving AS (
				INSERT INTO fulfilment_move (id, state, attempt, created_at, updated_at, dispatched_at, action, provider, payment_id, action_name)
				SELECT id, state, 1, created_at, created_at, created_at, action, provider, pay, action_name FROM f
			)
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, created_at)
			SELECT f.id, t.from_state, t.to_state, t.attempt, 'scale', 'history', f.created_at + t.n * interval '10 ms'
			FROM f CROSS JOIN LATERAL (VALUES
				(0, NULL, 'pending', 0),
				(1, 'pending', CASE f.state WHEN 'cancelled' THEN 'cancelled' ELSE 'dispatching' END, CASE f.state WHEN 'cancelled' THEN 0 ELSE 1 END),
				(2, 'dispatching', f.state, 1)) t(n, from_state, to_state, attempt)
			WHERE t.n < 2 OR f.state <> 'cancelled'`, nil},
			// River's finished jobs: the last day's, which its retention keeps.
			{`INSERT INTO river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, args, kind, queue, attempted_by)
			 SELECT 'completed', 1, 25, p.at, p.at, p.at, p.at, jsonb_build_object('fulfilment_id', f.id), 'guardian_dispatch', 'dispatch', ARRAY['scale']
			 FROM scale_payment p JOIN fulfilment f ON f.provider = p.provider AND f.payment_id = p.pay AND f.action = 'fulfil'
			 WHERE p.at > now() - make_interval(secs => $1)`, []any{scaleJobDay.Seconds()}},
		}
		for i, st := range steps {
			if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
				log.Fatalf("fill payments %d-%d, step %d: %v", a, b, i, err)
			}
		}
		// The leader folds the counts' changes every few seconds: the
		// history is left folded.
		_, err = db.FoldTally(ctx, tx)
		check(err)
		check(tx.Commit(ctx))
		log.Printf("filled payments %d to %d in %s", a, b, time.Since(start).Round(time.Millisecond))
	}
}

// describeMemory says how the server's buffers are mapped, which moved
// dispatch at ten million payments from 0.59 to 0.76x of a small
// database on 4 kB pages to 0.88 to 1.10x on huge pages
// (docs/performance.md, "Ten million payments on huge pages"). Postgres
// 15 does not say whether it got the huge pages it tries for; this
// machine's /proc/meminfo does, for a server on it, as the bench's is.
func describeMemory(ctx context.Context, pool *pgxpool.Pool) {
	var buffers, huge string
	var bytes int64
	check(pool.QueryRow(ctx, `SELECT current_setting('shared_buffers'), current_setting('huge_pages'), pg_size_bytes(current_setting('shared_buffers'))`).Scan(&buffers, &huge, &bytes))
	used, total := hugePagesInUse()
	log.Printf("the server's buffers: %s, huge_pages = %s; this machine's huge pages: %d of %d in use", buffers, huge, used, total)
	if bytes >= 1<<30 && used == 0 {
		log.Printf("the buffers are mapped in 4 kB pages: at ten million payments dispatch ran at 0.59 to 0.76x of a small database so, 0.88 to 1.10x on huge pages (docs/deployment.md, \"Sizing\")")
	}
}

// hugePagesInUse reads this machine's huge pages from /proc/meminfo: those
// mapped or reserved by a process, and all there are. Zeros where it
// cannot be read.
func hugePagesInUse() (used, total int) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	n := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(k, "HugePages_") {
			n[k], _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	// Free counts the reserved ones too: Postgres reserves its pages when
	// it starts and takes them as it touches them.
	return n["HugePages_Total"] - n["HugePages_Free"] + n["HugePages_Rsvd"], n["HugePages_Total"]
}

// fillPurchases makes the fill's purchases, as intake records them: what
// each pays for and the detail its paid event carried. Its arguments are
// the payment id's column, its time's, and the rows to read.
const fillPurchases = `INSERT INTO purchase (provider, payment_id, actions, routes, detail, routed_at)
	SELECT provider, %[1]s, '{fulfil}', '', jsonb_build_object('id', %[1]s, 'kind', 'one_time', 'mode', 'live', 'amount', 1900, 'currency', 'USD', 'provider', provider), %[2]s
	FROM %[3]s`

// purchasesOfFill gives a database filled before the fill made purchases
// (session 40) its payments' purchases, once: until then the purchases'
// key at ten million payments held only the runs' own.
func purchasesOfFill(ctx context.Context, pool *pgxpool.Pool, filled int) {
	if filled == 0 {
		return
	}
	var has bool // the fill's first payment, g = 0, is Paddle's
	check(pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM purchase WHERE provider = 'paddle' AND payment_id = 'txn_' || substr(md5('0'), 1, 24))`).Scan(&has))
	if has {
		return
	}
	start := time.Now()
	tag, err := pool.Exec(ctx, fmt.Sprintf(fillPurchases, "payment_id", "created_at", "fulfilment WHERE action = 'fulfil' ORDER BY created_at")+` ON CONFLICT DO NOTHING`)
	check(err)
	_, err = pool.Exec(ctx, `VACUUM (ANALYZE) purchase`)
	check(err)
	log.Printf("the fill's %d purchases added in %s", tag.RowsAffected(), time.Since(start).Round(time.Second))
}

// parseSizes reads -sizes: payment counts, ascending.
func parseSizes(list string) []int {
	var sizes []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || len(sizes) > 0 && n < sizes[len(sizes)-1] {
			log.Fatalf("-sizes: want ascending payment counts, got %q", list)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// scalePoint is one size's measurements.
type scalePoint struct {
	payments                  int
	intake, dupPG, dispatched stats
	// floorDispatched is the floor's dispatch drained on the same
	// database after each of Guardian's: what the size costs the bare
	// statements, Guardian apart. baseDispatched and baseFloorDispatched
	// are both on the baseline, measured in turn with them.
	floorDispatched, baseDispatched, baseFloorDispatched stats
	// floorIntake is the floor's intake alone on the same database after
	// each of Guardian's intake runs, at Guardian's batch size in it, and
	// baseFloorIntake the same on the baseline: what the size costs the
	// bare statements of intake. floorCost and baseFloorCost are what the
	// server spent per payment in them.
	floorIntake, baseFloorIntake stats
	floorCost, baseFloorCost     []serverCost
	// baseline is intake on a database that stays nearly empty, measured
	// in turn with intake at this size: their ratio does not move with
	// this machine's drift between sizes.
	baseline stats
	// What the server spent per delivery in each intake run, on this
	// size's database and on the baseline's.
	intakeCost, baselineCost []serverCost
	p99ms                    float64
	pages                    []pageTime
	// backlog is how many fulfilments the size's intake runs had left
	// pending, and backlogOverview the overview's median time with them
	// still there; pages is measured once they are dispatched.
	backlog         int
	backlogOverview float64
	// The sweep's reversal catch-all, ms: a round's (the fulfilments
	// settled in its window) and the hourly full one.
	takeBack, takeBackFull stats
	tables                 []tableSize
	// dip is intake right after a checkpoint, one run each, where the runs
	// above were measured past a cycle's first pass; nil with -checkpoint.
	dip *checkpointDip
}

// checkpointDip is one pair of intake runs, each right after a CHECKPOINT,
// with the floor's intake after another.
type checkpointDip struct{ onSize, onBase intakeMeasured }

// intakeMeasured is one intake run on one database: Guardian's rate, what
// the server spent on each delivery, and the floor's intake after it.
type intakeMeasured struct {
	rate  float64
	cost  serverCost
	floor floorResult
}

type pageTime struct {
	name            string
	median, slowest float64 // ms
}

type tableSize struct {
	name  string
	bytes int64
	rows  int64
}

// runScale fills the database to each size in turn and measures there.
// Intake is measured in turn on the filled database and on a baseline one
// beside it that no fill touches.
func runScale(ctx context.Context, bin, dbURL, connURL string, pool *pgxpool.Pool) {
	baselineURL := createDB(ctx, "baseline")
	defer dropDB(ctx, baselineURL)
	basePool, err := pgxpool.New(ctx, baselineURL)
	check(err)
	defer basePool.Close()
	// A new database's first run is slow (empty statistics, cold catalog
	// caches): the baseline is warmed once before anything is measured.
	warm := startGuardian(bin, baselineURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
	bench(bin, warm, 0, 1, 0, false)
	warm.stop()
	describeMemory(ctx, pool)
	sizes := parseSizes(*sizesFlag)
	// A database kept by an earlier run (-scale-db) says how far it was
	// filled, so a size it already holds is measured, not filled again.
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_scale_filled (payments int NOT NULL)`)
	check(err)
	var filled int
	check(pool.QueryRow(ctx, `SELECT coalesce(max(payments), 0) FROM bench_scale_filled`).Scan(&filled))
	purchasesOfFill(ctx, pool, filled)
	var points []scalePoint
	rate := 0.0
	for _, n := range sizes {
		if n < filled {
			log.Fatalf("-sizes: the database already holds %d payments, more than %d", filled, n)
		}
		if n > filled {
			fillStart := time.Now()
			fillScale(ctx, pool, filled, n)
			filled = n
			_, err := pool.Exec(ctx, `WITH gone AS (DELETE FROM bench_scale_filled) INSERT INTO bench_scale_filled VALUES ($1)`, n)
			check(err)
			log.Printf("%d payments filled in %s", n, time.Since(fillStart).Round(time.Second))
			vacuum(ctx, pool)
		}
		// A leader has been at work on both, as on a deployment's
		// database, so no run below holds the hourly round (sweptOnce).
		sweptOnce(ctx, bin, dbURL, connURL)
		sweptOnce(ctx, bin, baselineURL, connURL)
		if !*checkpointFirst {
			logLeaves(ctx, pool, dbURL)
		}
		p := scalePoint{payments: n}
		var intake, baseline, floorIn, baseFloorIn, dup, disp, floorDisp, baseDisp, baseFloorDisp, p99 []float64
		// intakeRun measures intake once on the database at url, with what
		// the server spent on each delivery, then runs then, if any, on the
		// same process; then the floor's intake alone at the batch size
		// Guardian had, on the same database. Each of the two starts right
		// after a CHECKPOINT where afterCheckpoint is set.
		intakeRun := func(url string, on *pgxpool.Pool, afterCheckpoint bool, then func(*guardian)) intakeMeasured {
			g := startGuardian(bin, url, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
			if afterCheckpoint {
				checkpointNow(ctx, pool)
			}
			before := readServerCost(ctx, pool, url)
			r := bench(bin, g, 0, 1, 0, false)
			m := intakeMeasured{rate: r.PerSecond, cost: readServerCost(ctx, pool, url).perDelivery(before, r.Deliveries)}
			b := batchSizes(ctx, g)
			if then != nil {
				then(g)
			}
			g.stop()
			if afterCheckpoint {
				checkpointNow(ctx, pool)
			}
			m.floor = scaleFloor.intakeAlone(ctx, on, url, b)
			return m
		}
		logPair := func(when string, onSize, onBase intakeMeasured) {
			log.Printf("intake at %d payments, %s: %.0f/s, %s", n, when, onSize.rate, onSize.cost)
			log.Printf("  the floor's after it: %.0f/s, %s", onSize.floor.perSecond, onSize.floor.server)
			log.Printf("baseline beside it, %s: %.0f/s, %s", when, onBase.rate, onBase.cost)
			log.Printf("  the floor's after it: %.0f/s, %s", onBase.floor.perSecond, onBase.floor.server)
		}
		measureDuplicates := func(g *guardian) { dup = append(dup, duplicates(bin, g)) }
		var onSize, onBase []intakeMeasured
		for i := range *runs {
			if i%2 == 0 { // which goes first alternates too
				onBase = append(onBase, intakeRun(baselineURL, basePool, *checkpointFirst, nil))
			}
			onSize = append(onSize, intakeRun(dbURL, pool, *checkpointFirst, measureDuplicates))
			if i%2 == 1 {
				onBase = append(onBase, intakeRun(baselineURL, basePool, *checkpointFirst, nil))
			}
			// Dispatch, Guardian's then the floor's, on this size and on
			// the baseline, which goes first as it does for intake.
			dispatchOn := func(url string, on *pgxpool.Pool, rates, floors *[]float64) {
				d := dispatch(ctx, bin, url, connURL, on)
				*rates = append(*rates, d.perSecond)
				*floors = append(*floors, scaleFloor.drainTimed(ctx, on, url, d.batches).perSecond)
			}
			if i%2 == 0 {
				dispatchOn(baselineURL, basePool, &baseDisp, &baseFloorDisp)
			}
			dispatchOn(dbURL, pool, &disp, &floorDisp)
			if i%2 == 1 {
				dispatchOn(baselineURL, basePool, &baseDisp, &baseFloorDisp)
			}
		}
		for i, s := range onSize {
			b := onBase[i]
			logPair(fmt.Sprintf("run %d", i+1), s, b)
			intake, floorIn = append(intake, s.rate), append(floorIn, s.floor.perSecond)
			p.intakeCost, p.floorCost = append(p.intakeCost, s.cost), append(p.floorCost, s.floor.server)
			baseline, baseFloorIn = append(baseline, b.rate), append(baseFloorIn, b.floor.perSecond)
			p.baselineCost, p.baseFloorCost = append(p.baselineCost, b.cost), append(p.baseFloorCost, b.floor.server)
		}
		// The runs above were measured where a checkpoint cycle spends all
		// but its first minutes (logLeaves); one pair more is measured where
		// it costs most, each run right after a CHECKPOINT. Not with
		// -checkpoint: every run above was.
		if !*checkpointFirst {
			b := intakeRun(baselineURL, basePool, true, nil)
			p.dip = &checkpointDip{onSize: intakeRun(dbURL, pool, true, nil), onBase: b}
			logPair("right after a checkpoint", p.dip.onSize, p.dip.onBase)
		}
		p.intake, p.baseline, p.dupPG = summarize(intake), summarize(baseline), summarize(dup)
		p.floorIntake, p.baseFloorIntake = summarize(floorIn), summarize(baseFloorIn)
		p.dispatched, p.floorDispatched = summarize(disp), summarize(floorDisp)
		p.baseDispatched, p.baseFloorDispatched = summarize(baseDisp), summarize(baseFloorDisp)
		if rate == 0 {
			rate = p.intake.median / 2 // the same offered rate at every size
		}
		g := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
		benchC(bin, g, *concurrency, 0, 1, 0, false) // warm up
		for range *runs {
			p99 = append(p99, bench(bin, g, 0, 1, rate, false).P99ms)
		}
		p.p99ms = summarize(p99).median
		// The intake runs left their fulfilments pending, more at every
		// size: a backlog no deployment keeps. The overview is timed with
		// it once, then every page after a worker has dispatched it.
		check(pool.QueryRow(ctx, `SELECT count(*) FROM fulfilment WHERE state = 'pending'`).Scan(&p.backlog))
		p.backlogOverview = measurePages(ctx, g, pool)[0].median
		drain(ctx, bin, dbURL, connURL, pool)
		p.pages = measurePages(ctx, g, pool)
		g.stop()
		p.takeBack, p.takeBackFull = measureTakeBack(ctx, pool)
		p.tables = tableSizes(ctx, pool)
		points = append(points, p)
		printScale(points, rate)
	}
}

// drain runs a worker process until no fulfilment is pending.
func drain(ctx context.Context, bin, dbURL, connURL string, pool *pgxpool.Pool) {
	start := time.Now()
	w := startGuardian(bin, dbURL, connURL, nil)
	defer w.stop()
	for {
		var pending int
		check(pool.QueryRow(ctx, `SELECT count(*) FROM fulfilment WHERE state = 'pending'`).Scan(&pending))
		if pending == 0 {
			break
		}
		if time.Since(start) > 30*time.Minute {
			log.Fatalf("drain: %d fulfilments still pending after 30 minutes", pending)
		}
		time.Sleep(time.Second)
	}
	log.Printf("dispatched the intake runs' backlog in %s", time.Since(start).Round(time.Second))
}

// randomLeaves are the indexes a new payment writes where its provider's
// ids fall, not at their end: the event id, the payment id (the events'
// and the purchases'), and the one live row per action.
var randomLeaves = []string{"webhook_event_event_id_key", "webhook_event_payment_idx", "purchase_pkey", "fulfilment_one_per_action"}

// logLeaves begins a checkpoint cycle on the server and takes it past its
// first pass, as a deployment's cycle is for all but its first minutes.
// After a checkpoint, the first write to each leaf of randomLeaves logs
// the whole page: at ten million payments those are some 500,000 pages,
// so for the first minute or two nearly every payment logs two or three,
// and then almost none until the next checkpoint (docs/performance.md,
// "Intake through a checkpoint's cycle"). After a CHECKPOINT it fills
// twice as many payments of history as the largest of them has pages,
// which leaves at most e^-2 (about a seventh) of any of their leaves not
// yet logged: their ids are of the runs' form, so they land where the
// runs' payments will. They are numbered from scaleLeafBase on, older
// than any size's history and never in a size's way; older than a day,
// they make no River job, and like the rest of the history they are
// settled, so nothing is dispatched, left dead or folded while the runs
// are timed. The next timed checkpoint is then checkpoint_timeout away,
// which the runs after it fit inside on a server set up as "Running it"
// says (15 minutes); each run logs the checkpoints it saw.
func logLeaves(ctx context.Context, pool *pgxpool.Pool, dbURL string) {
	start := time.Now()
	var pages, done int
	check(pool.QueryRow(ctx, `SELECT max(pg_relation_size(c)) / current_setting('block_size')::int FROM unnest($1::regclass[]) c`, randomLeaves).Scan(&pages))
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_scale_logged (payments int NOT NULL)`)
	check(err)
	check(pool.QueryRow(ctx, `SELECT coalesce(max(payments), 0) FROM bench_scale_logged`).Scan(&done))
	checkpointNow(ctx, pool)
	before := readServerCost(ctx, pool, dbURL)
	n := 2 * pages
	fillScale(ctx, pool, scaleLeafBase+done, scaleLeafBase+done+n)
	c := readServerCost(ctx, pool, dbURL).perDelivery(before, n)
	_, err = pool.Exec(ctx, `WITH gone AS (DELETE FROM bench_scale_logged) INSERT INTO bench_scale_logged VALUES ($1)`, done+n)
	check(err)
	// What autovacuum does after a fill: the counts' changes it made and
	// folded, which the overview's count would read through.
	_, err = pool.Exec(ctx, `VACUUM fulfilment_change`)
	check(err)
	log.Printf("logged the leaves since a checkpoint: %d payments of history, twice the %d pages of the largest index keyed at random, %.2f full pages and %.1f kB of WAL a payment, in %s",
		n, pages, c.fpi, c.walBytes/1024, time.Since(start).Round(time.Second))
}

// checkpointNow runs a CHECKPOINT on the server: the next first write to
// each page logs the whole page.
func checkpointNow(ctx context.Context, pool *pgxpool.Pool) {
	_, err := pool.Exec(ctx, `CHECKPOINT`)
	check(err)
}

// vacuum does what a deployment's autovacuum does after the fill: the
// statistics, the visibility map, and the BRIN ranges summarized, and the
// dead rows of the counts' changes, which the fill made and folded one
// per payment: left there (autovacuum is off on the development
// machine), they were 60 MB at a million payments that the overview's
// count read through, 66 ms of its 78.
func vacuum(ctx context.Context, pool *pgxpool.Pool) {
	start := time.Now()
	_, err := pool.Exec(ctx, `VACUUM (ANALYZE) webhook_event, fulfilment_identity, fulfilment_move, fulfilment_transition, river_job, fulfilment_change, purchase`)
	check(err)
	log.Printf("vacuumed in %s", time.Since(start).Round(time.Second))
}

// measureTakeBack times the sweep's catch-all for reversals (every
// reversed payment's pending rows, and revocations) in transactions rolled
// back: as a round reads it (the fulfilments settled since the last round,
// 30 s ago, less the 5-minute overlap) and as the hourly full round does.
func measureTakeBack(ctx context.Context, pool *pgxpool.Pool) (round, full stats) {
	measure := func(revocations func(pgx.Tx) error) stats {
		var ms []float64
		for range 5 {
			tx, err := pool.Begin(ctx)
			check(err)
			start := time.Now()
			check(db.Serial(ctx, tx)) // as the sweep plans its round
			_, err = db.MoveReversedPending(ctx, tx, "bench", nil, nil, state.Cancelled, "payment reversed before it went out: never sent")
			check(err)
			check(revocations(tx))
			ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			check(tx.Rollback(ctx))
		}
		return summarize(ms)
	}
	round = measure(func(tx pgx.Tx) error {
		_, err := db.CreateRevocationsSettledSince(ctx, tx, "bench", "a revocation", time.Now().Add(-30*time.Second-5*time.Minute))
		return err
	})
	full = measure(func(tx pgx.Tx) error {
		_, err := db.CreateRevocations(ctx, tx, "bench", "a revocation", nil)
		return err
	})
	return round, full
}

func tableSizes(ctx context.Context, pool *pgxpool.Pool) []tableSize {
	var out []tableSize
	for _, name := range []string{"webhook_event", "fulfilment_identity", "fulfilment_move", "fulfilment_transition", "river_job"} {
		var t tableSize
		t.name = name
		check(pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), (SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass)`, name).Scan(&t.bytes, &t.rows))
		out = append(out, t)
	}
	var total int64
	check(pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&total))
	return append(out, tableSize{name: "database", bytes: total})
}

// measurePages signs in to the dashboard as an operator does and times
// every page and API listing an operator uses, 20 times each after two
// warm-up requests.
func measurePages(ctx context.Context, g *guardian, pool *pgxpool.Pool) []pageTime {
	var fulfilmentID, eventID, payment string
	check(pool.QueryRow(ctx, `SELECT f.id::text, e.event_id, f.payment_id FROM fulfilment f JOIN webhook_event e ON e.id = f.event_pk
		WHERE f.provider = 'stripe' ORDER BY f.created_at DESC LIMIT 1`).Scan(&fulfilmentID, &eventID, &payment))
	prefix := payment[:min(len(payment), 7)] // "pi_" and four characters of the id
	hourAgo := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	dashboard := signIn(g)
	api := &http.Client{Timeout: 30 * time.Second}
	type page struct {
		name, path string
		api        bool
	}
	pages := []page{
		{"overview", "/", false},
		{"queue (parked, oldest first)", "/queue", false},
		{"search by payment prefix", "/search?q=" + prefix, false},
		{"fulfilments: fulfilled, stripe", "/fulfilments?state=fulfilled&provider=stripe", false},
		{"fulfilments: parked", "/fulfilments?state=needs_reconciliation", false},
		{"fulfilments: last hour", "/fulfilments?since=" + hourAgo, false},
		{"fulfilments CSV, first page", "/fulfilments.csv?state=fulfilled", false},
		{"events: refunds", "/events?provider=stripe&type=charge.refunded", false},
		{"events: a type with none", "/events?type=customer.created", false},
		{"fulfilments: a provider with none", "/fulfilments?provider=paypal", false},
		{"events CSV, first page", "/events.csv?provider=stripe", false},
		{"fulfilment page", "/fulfilments/" + fulfilmentID, false},
		{"event page", "/events/stripe/" + eventID, false},
		{"refused deliveries", "/refused", false},
		{"API fulfilments: failed", "/api/v1/fulfilments?state=failed&limit=100", true},
		{"API fulfilments: payment prefix", "/api/v1/fulfilments?payment_prefix=" + prefix, true},
		{"API events: payment prefix", "/api/v1/events?payment_prefix=" + prefix, true},
		{"API events: unmapped", "/api/v1/events?unmapped=true", true},
		{"API fulfilments CSV", "/api/v1/fulfilments?format=csv&state=fulfilled&limit=500", true},
		{"API fulfilment", "/api/v1/fulfilments/" + fulfilmentID, true},
		{"API stats", "/api/v1/stats", true},
	}
	var out []pageTime
	for _, p := range pages {
		client := dashboard
		if p.api {
			client = api
		}
		var ms []float64
		for i := range 22 {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+p.path, nil)
			check(err)
			if p.api {
				req.Header.Set("Authorization", "Bearer "+benchAdminToken)
			}
			start := time.Now()
			resp, err := client.Do(req)
			check(err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				log.Fatalf("%s (%s): %d %s", p.name, p.path, resp.StatusCode, body)
			}
			if i >= 2 {
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
		}
		s := summarize(ms)
		out = append(out, pageTime{name: p.name, median: s.median, slowest: s.max})
	}
	return out
}

// signIn returns a client holding a dashboard session, got through the
// sign-in form as a browser on the server's origin gets it.
func signIn(g *guardian) *http.Client {
	jar, err := cookiejar.New(nil)
	check(err)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(g.url + "/login")
	check(err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		log.Fatalf("sign-in page without a form token")
	}
	req, err := http.NewRequest(http.MethodPost, g.url+"/login", strings.NewReader(url.Values{"_csrf": {string(m[1])}, "token": {benchAdminToken}}.Encode()))
	check(err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", g.url)
	resp, err = c.Do(req)
	check(err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		log.Fatalf("sign-in: %d", resp.StatusCode)
	}
	return c
}

// slowestAnswer is the page whose slowest single answer was the slowest.
func slowestAnswer(pages []pageTime) pageTime {
	var out pageTime
	for _, p := range pages {
		if p.slowest > out.slowest {
			out = p
		}
	}
	return out
}

func printScale(points []scalePoint, rate float64) {
	base := points[0]
	header := fmt.Sprintf("%-36s", "payments in the database")
	for _, p := range points {
		header += fmt.Sprintf(" %14d", p.payments)
	}
	fmt.Println()
	fmt.Println(header + "   last/first")
	row := func(name string, f func(scalePoint) float64, unit string) {
		line := fmt.Sprintf("%-36s", name)
		for _, p := range points {
			line += fmt.Sprintf(" %12.1f%-2s", f(p), unit)
		}
		if b := f(base); b > 0 {
			line += fmt.Sprintf("   %.2f", f(points[len(points)-1])/b)
		}
		fmt.Println(line)
	}
	row("intake, new events", func(p scalePoint) float64 { return p.intake.median }, "/s")
	row("intake, baseline beside it", func(p scalePoint) float64 { return p.baseline.median }, "/s")
	row("intake against the baseline", func(p scalePoint) float64 { return p.intake.median / p.baseline.median }, "x")
	// The server's cost per delivery, median of the runs, on this size's
	// database or (baseline) on the one beside it.
	medianOf := func(costs []serverCost, f func(serverCost) float64) float64 {
		var xs []float64
		for _, c := range costs {
			xs = append(xs, f(c))
		}
		return summarize(xs).median
	}
	cost := func(baseline bool, f func(serverCost) float64) func(scalePoint) float64 {
		return func(p scalePoint) float64 {
			if baseline {
				return medianOf(p.baselineCost, f)
			}
			return medianOf(p.intakeCost, f)
		}
	}
	fpi := func(c serverCost) float64 { return c.fpi }
	for _, b := range []bool{false, true} {
		of := ""
		if b {
			of = ", baseline"
		}
		row("  WAL per delivery"+of, cost(b, func(c serverCost) float64 { return c.walBytes / 1024 }), "kB")
		row("  full-page images per delivery"+of, cost(b, fpi), "")
		row("  blocks read per delivery"+of, cost(b, func(c serverCost) float64 { return c.blocksRead }), "")
		row("  backend writes per delivery"+of, cost(b, func(c serverCost) float64 { return c.backendWrites }), "")
	}
	row("  the floor's intake", func(p scalePoint) float64 { return p.floorIntake.median }, "/s")
	row("  the floor's, on the baseline", func(p scalePoint) float64 { return p.baseFloorIntake.median }, "/s")
	row("  the floor's against its baseline", func(p scalePoint) float64 { return p.floorIntake.median / p.baseFloorIntake.median }, "x")
	row("  the floor's full-page images per payment", func(p scalePoint) float64 { return medianOf(p.floorCost, fpi) }, "")
	row("  the floor's, on the baseline", func(p scalePoint) float64 { return medianOf(p.baseFloorCost, fpi) }, "")
	if base.dip != nil {
		dip := func(f func(d *checkpointDip) float64) func(scalePoint) float64 {
			return func(p scalePoint) float64 { return f(p.dip) }
		}
		row("intake right after a checkpoint", dip(func(d *checkpointDip) float64 { return d.onSize.rate }), "/s")
		row("  baseline beside it", dip(func(d *checkpointDip) float64 { return d.onBase.rate }), "/s")
		row("  against the baseline", dip(func(d *checkpointDip) float64 { return d.onSize.rate / d.onBase.rate }), "x")
		row("  full-page images per delivery", dip(func(d *checkpointDip) float64 { return d.onSize.cost.fpi }), "")
		row("  full-page images per delivery, baseline", dip(func(d *checkpointDip) float64 { return d.onBase.cost.fpi }), "")
		row("  the floor's against its baseline", dip(func(d *checkpointDip) float64 { return d.onSize.floor.perSecond / d.onBase.floor.perSecond }), "x")
	}
	row(fmt.Sprintf("p99 at %.0f/s", rate), func(p scalePoint) float64 { return p.p99ms }, "ms")
	row("duplicates, no Redis", func(p scalePoint) float64 { return p.dupPG.median }, "/s")
	row("dispatch", func(p scalePoint) float64 { return p.dispatched.median }, "/s")
	row("dispatch, baseline beside it", func(p scalePoint) float64 { return p.baseDispatched.median }, "/s")
	row("dispatch against the baseline", func(p scalePoint) float64 { return p.dispatched.median / p.baseDispatched.median }, "x")
	row("  the floor's dispatch", func(p scalePoint) float64 { return p.floorDispatched.median }, "/s")
	row("  the floor's, on the baseline", func(p scalePoint) float64 { return p.baseFloorDispatched.median }, "/s")
	row("  the floor's against its baseline", func(p scalePoint) float64 { return p.floorDispatched.median / p.baseFloorDispatched.median }, "x")
	row("sweep's reversal catch-all, a round", func(p scalePoint) float64 { return p.takeBack.median }, "ms")
	row("sweep's reversal catch-all, hourly", func(p scalePoint) float64 { return p.takeBackFull.median }, "ms")
	row("pending left by the intake runs", func(p scalePoint) float64 { return float64(p.backlog) }, "")
	row("overview with them pending", func(p scalePoint) float64 { return p.backlogOverview }, "ms")
	for i := range base.pages {
		row(base.pages[i].name, func(p scalePoint) float64 { return p.pages[i].median }, "ms")
	}
	row("any page or answer, slowest of 20", func(p scalePoint) float64 { return slowestAnswer(p.pages).slowest }, "ms")
	for i := range base.tables {
		row("size: "+base.tables[i].name, func(p scalePoint) float64 { return float64(p.tables[i].bytes) / (1 << 20) }, "Mi")
	}
	last := points[len(points)-1]
	slowest, slowestOnce := pageTime{}, slowestAnswer(last.pages)
	for _, p := range last.pages {
		if p.median > slowest.median {
			slowest = p
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	ratio, floorIn := last.intake.median/last.baseline.median, last.floorIntake.median/last.baseFloorIntake.median
	disp, floorDisp := last.dispatched.median/last.baseDispatched.median, last.floorDispatched.median/last.baseFloorDispatched.median
	// Where the intake runs fell in a checkpoint's cycle: past its first
	// pass (logLeaves), with one pair right after a checkpoint beside
	// them; or, with -checkpoint, each right after one.
	phase, dip := "past a checkpoint's first pass", ""
	if *checkpointFirst {
		phase = "each right after a checkpoint"
	} else if last.dip != nil {
		d := last.dip
		dip = fmt.Sprintf("; right after a checkpoint intake %.2fx, the floor's %.2fx its own", d.onSize.rate/d.onBase.rate, d.onSize.floor.perSecond/d.onBase.floor.perSecond)
	}
	fmt.Printf("at %d payments: intake %s %.2fx the baseline measured in turn with it, %.2fx the first size's (target ≥ 0.8: %s), the floor's %.2fx its own%s; dispatch %.2fx the baseline measured in turn with it (target ≥ 0.8: %s), the floor's %.2fx its own; slowest page %s, median %.1f ms, slowest of 20 %.1f ms; slowest single answer %s, %.1f ms (target < 100 ms: %s)\n",
		last.payments, phase, ratio, last.intake.median/base.intake.median, verdict(ratio >= 0.8), floorIn, dip, disp, verdict(disp >= 0.8), floorDisp,
		slowest.name, slowest.median, slowest.slowest, slowestOnce.name, slowestOnce.slowest, verdict(slowestOnce.slowest < 100))
}
