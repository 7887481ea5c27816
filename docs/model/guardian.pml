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

#ifndef MAXFAULTS
#define MAXFAULTS 2
#endif
#define NROWS 2
#define MAXATT 4
#define NW 2      /* dispatch workers */
#define MAXOPS 2  /* operator actions */
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
#define OREJECTED 5

#define IDX(r, a) ((r) * (MAXATT + 1) + (a))

byte st[NROWS];
byte att[NROWS];
bool expired[NROWS * (MAXATT + 1)];  /* that attempt's deadline and lease passed */
bool acted[NROWS * (MAXATT + 1)];    /* the receiver acted on that attempt */
bool presend[NROWS];                 /* claimed, and the call has not left yet */
bool frozen[NROWS];                  /* ... and its dispatcher is frozen or dead */
byte nrows;
byte acts;                           /* actions the receiver performed for the payment */

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
#define actedAny(r) (acted[IDX(r,1)] || acted[IDX(r,2)] || acted[IDX(r,3)] || acted[IDX(r,4)])
#define busy(r) (st[r] == PENDING || st[r] == DISPATCHING)
#define settled (!busy(0) && !busy(1))
#define ownedLive(w, r) (owns[w] && wrow[w] == r && !wstale[w])
#define hasLiveJob(r) (av[r] > 0 || orphYoung[r] > 0 || ownedLive(0, r) || ownedLive(1, r))

/* intake's transaction: a fulfilment and its job, only if the payment is free */
inline createIfFree() {
	if
	:: paymentFree && nrows < NROWS -> st[nrows] = PENDING; inc(av[nrows]); nrows++
	:: else -> skip
	fi
}

/* The provider delivers the payment's events; each delivery that is not a
 * duplicate runs intake's transaction. */
active proctype provider() {
	byte n = 0;
	do
	:: n < 2 -> atomic { createIfFree(); n++ }
	:: else -> break
	od
}

/* River's faults: a job cancelled or deleted in River UI or discarded after
 * its last retry, a fetch whose answer was lost with its connection. */
active proctype chaos() {
end:
	do
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
	byte r, a, out;
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
				:: out = ODONE; acted[IDX(r, a)] = true; acts++
				:: faults < MAXFAULTS -> faults++; out = OUNKNOWN;
					if :: acted[IDX(r, a)] = true; acts++ :: skip fi
				:: faults < MAXFAULTS -> faults++; out = ONOTSENT
				:: faults < MAXFAULTS -> faults++; out = ONOTDELIVERED
				:: faults < MAXFAULTS -> faults++; out = OREJECTED
				fi
			:: else -> out = ONOTSENT  /* the deadline passed before a byte left */
			fi;
			if :: att[r] == a -> presend[r] = false :: else -> skip fi;
			assert(acts <= 1)
		}

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
		atomic { r = 0; a = 0; out = 0 }
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
	:: actedAny(r) -> st[r] = FULFILLED                 /* a signed "done" */
	:: !actedAny(r) -> st[r] = PENDING; inc(av[r])      /* a signed "not done" */
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
			a = att[r]; sawActed = acted[IDX(r, a)]; ops++ }
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
	:: atomic { ops < MAXOPS -> ops++; createIfFree() }  /* replay */
	:: atomic { ops < MAXOPS && st[0] == CANCELLED -> ops++; st[0] = PARKED }  /* reopen: same key */
	:: atomic { ops < MAXOPS && st[1] == CANCELLED -> ops++; st[1] = PARKED }
	od
}

init {
	atomic { run worker(0); run worker(1) };
	/* Once nothing else can move (the faults are spent and every process
	 * waits), no fulfilment may be left pending or dispatching. */
	timeout -> assert(settled)
}

/* Liveness, under weak fairness: every fulfilment leaves pending and
 * dispatching for good (fulfilled, failed, parked or cancelled), also in
 * runs that never fall quiet. Safety is asserted at every call: the
 * receiver acts at most once for the payment. */
ltl live { <> [] settled }
