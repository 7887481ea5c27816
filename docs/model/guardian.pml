/*
 * Guardian's dispatch protocol for one payment, as a Promela model for spin
 * (`just model`, run by `just test`). The Redis filter is filter.pml.
 *
 * Modelled: intake of the payment's events (other types, replays) as up to
 * NROWS keys; the fulfilment states; River's job lifecycle (fetch, retry,
 * exhaustion, rescue of a job nobody works, cancel and delete in River UI, a
 * fetch whose answer is lost with its connection); dispatchers with a crash
 * or a freeze after the claim and after the call; the call's outcomes (done,
 * unknown, not sent, not delivered, rejected); late success; the sweep;
 * lookups (done, not done, cannot tell); an operator who decides on what
 * they saw (resolve, cancel, reopen, replay). docs/design.md ("The model")
 * says what is abstracted.
 *
 * Every fault (a crash, a freeze, a lost fetch, a job cancelled, deleted or
 * exhausted, an outcome other than done, a lookup that cannot tell) spends
 * one unit of a shared budget, so liveness is checked under finitely many.
 *
 * Two receivers (KEYED): 0, a receiver that honours no key and acts on
 * every call (the worst case, against which Guardian's own rules FIX1-FIX5
 * and FIXC must hold); 1, a receiver that keeps the contract of
 * docs/receivers.md, an idempotency layer (a key in progress answers 409,
 * a finished key replays its answer, another body under a key is refused
 * with 422, a declined key stays declined) whose action may land after the
 * call's answer was lost, against which the receiver's-contract rules
 * (FIXKEY, FIXBODY, FIX409, FIXSIGNED) must hold, also through a database
 * restore that loses fulfilment rows (RESTORE).
 *
 * Each FIX is a rule Guardian enforces; -DFIXn=0 takes it out (just
 * model-holes shows what spin finds then).
 */

#ifndef FIX1
#define FIX1 1 /* cancelled keeps its payment */
#endif
#ifndef FIX2
#define FIX2 1 /* resolutions are fenced on the attempt the operator saw */
#endif
#ifndef FIX3
#define FIX3 1 /* the call's deadline counts from before the claim */
#endif
#ifndef FIX4
#define FIX4 1 /* only an explicit, signed answer means "not done" */
#endif
#ifndef FIX5
#define FIX5 1 /* the sweep gives stranded pending rows a new job */
#endif
#ifndef FIXC
#define FIXC 1 /* a job parks another's claim only once it cannot be live */
#endif
#ifndef FIXP
#define FIXP 1 /* "pending" is refused while the parked call could be in flight */
#endif

#ifndef FIXKEY
#define FIXKEY 1 /* keys derive from the payment and its declines, not the row */
#endif
#ifndef FIXBODY
#define FIXBODY 1 /* every attempt under a key sends the same body */
#endif
#ifndef FIX409
#define FIX409 1 /* 409 (in progress) is unknown, never done */
#endif
#ifndef FIXSIGNED
#define FIXSIGNED 1 /* only the receiver's signed word fails a payment */
#endif
#ifndef KEYED
#define KEYED 1
#endif
#ifndef RESTORE
#define RESTORE KEYED
#endif

#ifndef MAXFAULTS
#define MAXFAULTS 2
#endif
#define NROWS 2
#define MAXATT 4
#define NW 2      /* dispatch workers */
#ifndef MAXOPS
#define MAXOPS 2  /* operator actions */
#endif
#define CAP 2     /* job counters saturate here: more duplicates change nothing */

/* fulfilment states */
#define NONE 0
#define PENDING 1
#define DISPATCHING 2
#define FULFILLED 3
#define PARKED 4
#define FAILED 5
#define CANCELLED 6

/* call outcomes */
#define ODONE 1
#define OUNKNOWN 2
#define ONOTSENT 3
#define ONOTDELIVERED 4
#define OREJECTED 5 /* the receiver's signed decline */
#define OREFUSED 6  /* an unsigned 4xx: no word about the key */
#define OWAIT 7     /* KEYED: the request took the key; the answer is to come */

/* the receiver's record of a key (KEYED) */
#define RNONE 0
#define RPROG 1
#define RDONE 2
#define RDECL 3
#define NKEYS 4

#define IDX(r, a) ((r) * (MAXATT + 1) + (a))

byte st[NROWS];
byte att[NROWS];
bool expired[NROWS * (MAXATT + 1)];  /* that attempt's deadline and lease passed */
bool acted[NROWS * (MAXATT + 1)];    /* the receiver acted on that attempt */
bool presend[NROWS];                 /* claimed, and the call has not left yet */
bool frozen[NROWS];                  /* ... and its dispatcher is frozen or dead */
byte nrows;
byte acts;                           /* actions the receiver performed for the payment */
byte rkey[NROWS];                    /* each row's Idempotency-Key */
byte rev[NROWS];                     /* the event (and so the body) each row was made from */
bool refusedPark[NROWS];             /* parked by an unsigned refusal */
byte rk[NKEYS];                      /* KEYED: the receiver's record of each key */
byte rbody[NKEYS];                   /* ... and the body it was first sent with */
byte nextKey;                        /* without FIXKEY: a fresh key per row */
bool restored;                       /* the database was restored to an earlier point */

/* River's jobs, per row, as counts: identity does not matter to the
 * protocol (a job retried after a crash finds its own claim expired). */
byte av[NROWS];                      /* available (or retryable) */
byte orphYoung[NROWS];               /* running, nobody works it, younger than the job timeout */
byte orphStale[NROWS];               /* running, nobody works it, older */
bool owns[NW];                       /* worker w runs a job ... */
byte wrow[NW];                       /* ... for this row ... */
bool wstale[NW];                     /* ... and has for longer than the job timeout */

byte faults;
byte ops;

#define inc(x) if :: x < CAP -> x++ :: else -> skip fi
#define holds(r) (st[r] != NONE && st[r] != FAILED && (FIX1 || st[r] != CANCELLED))
#define paymentFree ((nrows < 1 || !holds(0)) && (nrows < 2 || !holds(1)))
#define failedRows ((nrows > 0 && st[0] == FAILED) + (nrows > 1 && st[1] == FAILED))
#define actedAny(r) (acted[IDX(r,1)] || acted[IDX(r,2)] || acted[IDX(r,3)] || acted[IDX(r,4)])
/* A row that used up the model's MAXATT attempts is past its bound, not
 * stuck: with KEYED, 409s cost no fault, so operators and timeouts can spend
 * the attempts before the receiver finishes. */
#define busy(r) ((st[r] == PENDING && att[r] < MAXATT) || st[r] == DISPATCHING)
#define settled (!busy(0) && !busy(1))
#define ownedLive(w, r) (owns[w] && wrow[w] == r && !wstale[w])
#define hasLiveJob(r) (av[r] > 0 || orphYoung[r] > 0 || ownedLive(0, r) || ownedLive(1, r))

/* intake's transaction: a fulfilment for event e and its job, only if the
 * payment is free. Its key: with KEYED, derived from the payment and the
 * number of its failed rows (FIXKEY), or fresh per row; without, the row. */
inline createIfFree(e) {
	if
	:: paymentFree && nrows < NROWS ->
		st[nrows] = PENDING; rev[nrows] = e; inc(av[nrows]);
		if
		:: !KEYED -> rkey[nrows] = nrows
		:: KEYED && FIXKEY -> rkey[nrows] = failedRows
		:: KEYED && !FIXKEY -> rkey[nrows] = nextKey; nextKey++
		fi;
		nrows++
	:: else -> skip
	fi
}

/* The provider delivers the payment's two events (say, a session and its
 * payment intent); each delivery that is not a duplicate runs intake's
 * transaction. After a restore it delivers them again (its retries, or
 * the backfill), to a database that lost the rows. */
active proctype provider() {
	byte n = 0;
end:
	do
	:: n < 2 -> atomic { createIfFree(n); n++ }
	:: n >= 2 && n < 4 && restored -> atomic { createIfFree(n - 2); n++ }
	:: n == 4 -> break
	od
}

/* A restore to an earlier point, with Guardian stopped (the runbook) and
 * quiet: every fulfilment row and job is gone; the receiver remembers what
 * it did. (A move of chaos(), which holds River's faults too.) */
inline restoreDatabase() {
	restored = true; nrows = 0;
	st[0] = NONE; st[1] = NONE; att[0] = 0; att[1] = 0;
	refusedPark[0] = false; refusedPark[1] = false; frozen[0] = false; frozen[1] = false;
	av[0] = 0; av[1] = 0; orphYoung[0] = 0; orphYoung[1] = 0; orphStale[0] = 0; orphStale[1] = 0;
	i = 0;
	do
	:: i < NROWS * (MAXATT + 1) -> expired[i] = false; i++
	:: else -> break
	od;
	i = 0
}

/* The receiver keeping the contract finishes a key in progress: acts, or
 * declines, or fails in its handler (nothing recorded: the key is free). */
active proctype receiver() {
	byte k;
end:
	do
	:: atomic {
		KEYED && (rk[0] == RPROG || rk[1] == RPROG || rk[2] == RPROG || rk[3] == RPROG) ->
		if
		:: rk[0] == RPROG -> k = 0
		:: rk[1] == RPROG -> k = 1
		:: rk[2] == RPROG -> k = 2
		:: rk[3] == RPROG -> k = 3
		fi;
		if
		:: rk[k] = RDONE; acts++; assert(acts <= 1)
		:: faults < MAXFAULTS -> faults++; rk[k] = RDECL
		:: faults < MAXFAULTS -> faults++; rk[k] = RNONE
		fi;
		k = 0 }
	od
}

/* River's faults: a job cancelled or deleted in River UI or discarded after
 * its last retry, a fetch whose answer was lost with its connection. */
active proctype chaos() {
	byte i;
end:
	do
	:: atomic { RESTORE && !restored && settled && !owns[0] && !owns[1] && nrows > 0 -> restoreDatabase() }
	:: atomic { faults < MAXFAULTS && av[0] > 0 -> faults++; av[0]--;
		if :: skip :: inc(orphYoung[0]) fi }  /* gone, or fetched and lost */
	:: atomic { faults < MAXFAULTS && av[1] > 0 -> faults++; av[1]--;
		if :: skip :: inc(orphYoung[1]) fi }
	:: atomic { faults < MAXFAULTS && orphYoung[0] + orphStale[0] > 0 -> faults++;
		if :: orphYoung[0] > 0 -> orphYoung[0]-- :: else -> orphStale[0]-- fi }  /* cancelled while stuck */
	:: atomic { faults < MAXFAULTS && orphYoung[1] + orphStale[1] > 0 -> faults++;
		if :: orphYoung[1] > 0 -> orphYoung[1]-- :: else -> orphStale[1]-- fi }
	od
}

/* Time, in coarse ticks: every current attempt's deadline and lease pass,
 * every running job ages past its timeout. Time never passes over a live
 * dispatcher between its claim and its call (microseconds), only over a
 * frozen or dead one. River rescues every stale job nobody works. */
#define mayExpire(r) (att[r] > 0 && !expired[IDX(r, att[r])] && (!presend[r] || frozen[r]))
active proctype clock() {
end:
	do
	:: atomic { mayExpire(0) || mayExpire(1) || orphYoung[0] + orphYoung[1] > 0 ||
	            (owns[0] && !wstale[0]) || (owns[1] && !wstale[1]) ->
		if :: mayExpire(0) -> expired[IDX(0, att[0])] = true :: else -> skip fi;
		if :: mayExpire(1) -> expired[IDX(1, att[1])] = true :: else -> skip fi;
		orphStale[0] = orphStale[0] + orphYoung[0]; orphYoung[0] = 0;
		orphStale[1] = orphStale[1] + orphYoung[1]; orphYoung[1] = 0;
		if :: orphStale[0] > CAP -> orphStale[0] = CAP :: else -> skip fi;
		if :: orphStale[1] > CAP -> orphStale[1] = CAP :: else -> skip fi;
		wstale[0] = owns[0]; wstale[1] = owns[1] }
	:: atomic { orphStale[0] + orphStale[1] > 0 ->
		av[0] = av[0] + orphStale[0]; orphStale[0] = 0;
		av[1] = av[1] + orphStale[1]; orphStale[1] = 0;
		if :: av[0] > CAP -> av[0] = CAP :: else -> skip fi;
		if :: av[1] > CAP -> av[1] = CAP :: else -> skip fi }
	od
}

/* A River worker running dispatch jobs; w is its index. */
proctype worker(byte w) {
	byte r, a, out, k, body;
end:
	do
	:: atomic {
		if
		:: av[0] > 0 -> r = 0
		:: av[1] > 0 -> r = 1
		fi;
		av[r]--; owns[w] = true; wrow[w] = r; wstale[w] = false;

		/* the claim, committed before the call */
		if
		:: st[r] == PENDING && att[r] < MAXATT ->
			att[r]++; a = att[r]; st[r] = DISPATCHING; presend[r] = true; frozen[r] = false
		:: else ->
			if
			:: st[r] == DISPATCHING && (!FIXC || expired[IDX(r, att[r])]) -> st[r] = PARKED
			:: else -> skip  /* settled, or another job's live claim: leave it */
			fi;
			owns[w] = false; wstale[w] = false; r = 0; a = 0
		fi }
		if
		:: a == 0 -> goto next
		:: else -> skip
		fi;

		/* after the claim: a crash (its job is left running with nobody),
		 * a freeze (it wakes later), or on at once */
		if
		:: atomic { faults < MAXFAULTS -> faults++; frozen[r] = true;
			owns[w] = false; wstale[w] = false; inc(orphYoung[r]) }; goto next
		:: atomic { faults < MAXFAULTS -> faults++; frozen[r] = true }
		:: true -> skip
		fi;

		/* the call: with FIX3 only before the claim's deadline; without
		 * it, a dispatcher frozen after its claim gets a fresh deadline */
		atomic {
			if
			:: !FIX3 || !expired[IDX(r, a)] ->
				if
				:: !KEYED ->
					if
					:: out = ODONE; acted[IDX(r, a)] = true; acts++
					:: faults < MAXFAULTS -> faults++; out = OUNKNOWN;
						if :: acted[IDX(r, a)] = true; acts++ :: skip fi
					:: faults < MAXFAULTS -> faults++; out = ONOTSENT
					:: faults < MAXFAULTS -> faults++; out = ONOTDELIVERED
					:: faults < MAXFAULTS -> faults++; out = OREJECTED
					fi
				:: KEYED ->
					/* the body: the event's, or (without FIXBODY) one per attempt */
					if
					:: FIXBODY -> body = rev[r]
					:: else -> body = rev[r] + 2 * a
					fi;
					k = rkey[r];
					if
					:: faults < MAXFAULTS -> faults++; out = ONOTSENT
					:: faults < MAXFAULTS -> faults++; out = ONOTDELIVERED
					:: rk[k] == RNONE -> rk[k] = RPROG; rbody[k] = body; out = OWAIT
					:: rk[k] == RPROG ->  /* 409: in progress */
						if :: FIX409 -> out = OUNKNOWN :: else -> out = ODONE fi
					:: rk[k] != RNONE && rk[k] != RPROG && rbody[k] != body ->  /* 422: another body */
						if :: FIXSIGNED -> out = OREFUSED :: else -> out = OREJECTED fi
					:: rk[k] == RDONE && rbody[k] == body -> out = ODONE       /* the stored answer */
					:: rk[k] == RDECL && rbody[k] == body -> out = OREJECTED   /* the stored decline, signed */
					fi
				fi
			:: else -> out = ONOTSENT  /* the deadline passed before a byte left */
			fi;
			if :: att[r] == a -> presend[r] = false :: else -> skip fi;
			assert(acts <= 1)
		}
		/* KEYED: this request took the key; its answer comes when the
		 * receiver finishes, or is lost (a timeout: the action may land
		 * later) */
		if
		:: out == OWAIT ->
			atomic {
				if
				:: faults < MAXFAULTS -> faults++; out = OUNKNOWN  /* the answer is lost */
				:: expired[IDX(r, a)] -> out = OUNKNOWN            /* the call timed out */
				:: rk[k] != RPROG ->
					if
					:: rk[k] == RDONE -> out = ODONE
					:: rk[k] == RDECL -> out = OREJECTED
					:: rk[k] == RNONE -> out = OUNKNOWN  /* a 500 */
					fi
				fi }
		:: else -> skip
		fi;

		/* a crash before the outcome is recorded */
		if
		:: atomic { faults < MAXFAULTS -> faults++; owns[w] = false; wstale[w] = false; inc(orphYoung[r]) }; goto next
		:: true -> skip
		fi;

		/* the record: conditional on state and attempt; a late success
		 * settles the parked row; not sent and not delivered are retried */
		atomic {
			if
			:: st[r] == DISPATCHING && att[r] == a ->
				if
				:: out == ODONE -> st[r] = FULFILLED
				:: out == OUNKNOWN -> st[r] = PARKED
				:: out == OREFUSED -> st[r] = PARKED; refusedPark[r] = true
				:: out == ONOTSENT || out == ONOTDELIVERED -> st[r] = PENDING
				:: out == OREJECTED -> st[r] = FAILED
				fi
			:: out == ODONE && st[r] == PARKED && att[r] == a -> st[r] = FULFILLED
			:: else -> skip
			fi;
			if :: out == ONOTSENT || out == ONOTDELIVERED -> inc(av[r]) :: else -> skip fi;
			owns[w] = false; wstale[w] = false
		}
next:
		atomic { r = 0; a = 0; out = 0; k = 0; body = 0 }
	od
}

/* The leader's sweep: park claims whose lease passed; give every pending
 * row with no live job a new one. */
active proctype sweep() {
end:
	do
	:: atomic { st[0] == DISPATCHING && expired[IDX(0, att[0])] -> st[0] = PARKED }
	:: atomic { st[1] == DISPATCHING && expired[IDX(1, att[1])] -> st[1] = PARKED }
	:: atomic { FIX5 && nrows > 0 && st[0] == PENDING && !hasLiveJob(0) -> inc(av[0]) }
	:: atomic { FIX5 && nrows > 1 && st[1] == PENDING && !hasLiveJob(1) -> inc(av[1]) }
	od
}

/* The reconciler's lookups, after the grace (at least the connector
 * timeout, so the parked attempt has expired). */
inline lookup(r) {
	if
	:: !KEYED && actedAny(r) -> st[r] = FULFILLED                 /* a signed "done" */
	:: !KEYED && !actedAny(r) -> st[r] = PENDING; inc(av[r])      /* a signed "not done" */
	:: KEYED && rk[rkey[r]] == RDONE -> st[r] = FULFILLED
	:: KEYED && rk[rkey[r]] == RDECL -> st[r] = FAILED            /* a signed "declined" */
	:: KEYED && rk[rkey[r]] == RPROG -> skip                      /* "in progress": ask later */
	:: KEYED && rk[rkey[r]] == RNONE && refusedPark[r] -> st[r] = FAILED  /* refused, and nothing done */
	:: KEYED && rk[rkey[r]] == RNONE && !refusedPark[r] -> st[r] = PENDING; inc(av[r])
	:: faults < MAXFAULTS -> faults++                   /* cannot tell */
	:: !FIX4 && faults < MAXFAULTS -> faults++; st[r] = PENDING; inc(av[r])  /* a bare 404 */
	fi
}
active proctype reconciler() {
end:
	do
	:: atomic { st[0] == PARKED && expired[IDX(0, att[0])] -> lookup(0) }
	:: atomic { st[1] == PARKED && expired[IDX(1, att[1])] -> lookup(1) }
	od
}

/* An operator who looks at a parked row, finds evidence about the attempt
 * shown (true for that attempt), and decides later, on that attempt; who
 * replays the event; and who reopens a cancel. */
active proctype operator() {
	byte r, a;
	bool sawActed;
end:
	do
	:: atomic {
			if
			:: ops < MAXOPS && st[0] == PARKED -> r = 0
			:: ops < MAXOPS && st[1] == PARKED -> r = 1
			fi;
			a = att[r]; ops++;
			if
			:: KEYED -> sawActed = (rk[rkey[r]] == RDONE)
			:: else -> sawActed = acted[IDX(r, a)]
			fi }
		atomic {
			if
			:: st[r] == PARKED && (!FIX2 || att[r] == a) ->
				if
				:: sawActed -> st[r] = FULFILLED
				:: !sawActed && (!FIXP || expired[IDX(r, att[r])]) -> st[r] = PENDING; inc(av[r])
				:: st[r] = CANCELLED
				fi
			:: else -> skip  /* 409: it moved */
			fi;
			r = 0; a = 0; sawActed = false }
	:: atomic { ops < MAXOPS -> ops++; createIfFree(0) }  /* replay */
	:: atomic { ops < MAXOPS && st[0] == CANCELLED -> ops++; st[0] = PARKED }  /* reopen: same key */
	:: atomic { ops < MAXOPS && st[1] == CANCELLED -> ops++; st[1] = PARKED }
	od
}

init {
	atomic { run worker(0); run worker(1) };
	/* Once nothing else can move (the faults are spent and every process
	 * waits), no fulfilment may be left pending or dispatching. */
	timeout -> assert(settled);
	/* ... and no fulfilment is recorded done that the receiver did not do */
	assert(!KEYED || ((nrows < 1 || st[0] != FULFILLED || rk[rkey[0]] == RDONE) &&
	                  (nrows < 2 || st[1] != FULFILLED || rk[rkey[1]] == RDONE)))
}

/* Liveness, under weak fairness: every fulfilment leaves pending and
 * dispatching for good (fulfilled, failed, parked or cancelled), also in
 * runs that never fall quiet. Safety is asserted at every call: the
 * receiver acts at most once for the payment. */
ltl live { <> [] settled }
