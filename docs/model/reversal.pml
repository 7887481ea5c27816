/*
 * Taking back what was refunded or disputed, for one payment, as a Promela
 * model for spin (`just model`, run by `just test`). docs/design.md ("The
 * model", "Taking back what was refunded or disputed") says what is
 * abstracted.
 *
 * Each row (the payment's fulfilment, its revocation) goes out through the
 * dispatch protocol guardian.pml checks: at most one act per key, whatever
 * the faults. Here a row's attempt is abstracted to its facts: the call
 * acts or not, and its outcome is done, declined (nothing was done) or
 * unknown (parked, until a lookup or an operator settles it by the fact).
 *
 * Modelled: the payment event's intake (and a replay), the reversal's
 * intake (its transaction cancels a pending fulfilment and creates the
 * revocation of a fulfilled one), the dispatcher's claim of each row, the
 * call's outcomes, the lookups of parked rows, and the sweep (which takes
 * back what settled after the reversal, and cancels pending fulfilments of
 * a reversed payment). Intake of the payment event and of the reversal may
 * interleave with everything: they are separate transactions, each atomic.
 *
 * A restore (RESTORE, on by default) rolls the database back once to before
 * the payment's rows existed: the fulfilment row and the reversal are
 * forgotten, what the receiver did is not, and the provider may deliver
 * both again in any order. The restore point is before any revocation was
 * made (a revocation's key derives from the payment, so the receiver would
 * dedupe a second one: guardian.pml's keyed receiver shows that), before
 * any key was declined (one key is in play), and not while a call is in flight (guardian.pml's restore covers a call that
 * answers into a restored database).
 *
 * Safety, asserted where it could break: the payment is taken back at most
 * once; never a revocation of a payment whose fulfilment the receiver did
 * not perform; never a fulfilment sent after the reversal was recorded. At
 * quiescence: a reversed payment that was fulfilled has been taken back.
 *
 * Each FIXR is a rule Guardian enforces; -DFIXRn=0 takes it out.
 */

#ifndef FIXRCLAIM
#define FIXRCLAIM 1 /* the claim refuses a fulfilment of a reversed payment */
#endif
#ifndef FIXRDONE
#define FIXRDONE 1 /* a revocation is made only for a fulfilment settled done */
#endif
#ifndef FIXRCANCEL
#define FIXRCANCEL 1 /* a pending fulfilment of a reversed payment is cancelled, not left */
#endif
#ifndef FIXRASK
#define FIXRASK 1 /* what Guardian's rows say never went out for a reversed payment is asked, not decided: born parked, or parked from pending */
#endif
#ifndef RESTORE
#define RESTORE 1
#endif
#ifndef FIXRONCE
#define FIXRONCE 1 /* one revocation per payment, ever (the index, and no second after one) */
#endif

#ifndef MAXFAULTS
#define MAXFAULTS 2
#endif

/* row states */
#define NONE 0
#define PENDING 1
#define DISPATCHING 2
#define FULFILLED 3
#define PARKED 4
#define FAILED 5
#define CANCELLED 6

/* where a pending fulfilment of a reversed payment goes: parked, to ask its
 * key (a restore may have forgotten that it went out), or without FIXRASK
 * cancelled on the rows' word */
#define REVERSEDPENDING (FIXRASK -> PARKED : CANCELLED)

byte fst;             /* the fulfilment */
bool facted;          /* the receiver performed it */
byte vst[2];          /* revocations (a second only without FIXRONCE) */
bool vacted[2];
byte nrev;            /* revocations created */
byte revokes;         /* revocations the receiver performed */
bool reversed;        /* the reversal is recorded */
bool sentAfterReversal;
bool restored;
bool declined;        /* a key was declined: the restore point is before it */
byte faults;

/* a revocation of the payment, in the creating transaction: for a
 * fulfilment settled done (without FIXRDONE, for one that may yet fail),
 * and only if the payment has none (without FIXRONCE, a concurrent or
 * later creator makes another). */
#define revocable (FIXRDONE -> fst == FULFILLED : (fst == FULFILLED || fst == DISPATCHING || fst == PARKED))
#define mayCreate (FIXRONCE -> nrev == 0 : nrev < 2)
inline createRevocation() {
	if
	:: reversed && revocable && mayCreate -> vst[nrev] = PENDING; nrev++
	:: else -> skip
	fi
}
inline cancelPending() {
	if
	:: FIXRCANCEL && reversed && fst == PENDING -> fst = REVERSEDPENDING
	:: else -> skip
	fi
}

/* The payment event: the fulfilment, if the payment has none that holds
 * it (a replay runs the same transaction). For a payment already reversed
 * its rows may be younger than what the receiver did (a restore), so the
 * fulfilment is born parked and its key asked (FIXRASK); without the rule
 * intake makes none, as Guardian once did. A payment not (yet) reversed
 * gets a pending row; so may one whose reversal commits beside the intake,
 * and the claim's guard alone keeps the rule whatever order the commits
 * take. Delivered three times: before and after a
 * restore. */
byte pays;            /* deliveries of the payment event */
active proctype payment() {
end:
	do
	:: pays < 3 -> atomic {
		if
		:: (fst == NONE || fst == FAILED) && reversed && FIXRASK -> fst = PARKED
		:: (fst == NONE || fst == FAILED) && reversed && !FIXRASK -> skip
		:: (fst == NONE || fst == FAILED) && !reversed -> fst = PENDING
		/* a transaction whose snapshot missed the reversal committing
		 * beside it: only the claim's guard stands in the way */
		:: (fst == NONE || fst == FAILED) && reversed -> fst = PENDING
		:: else -> skip
		fi; pays++ }
	od
}

/* The restore: once, the database goes back to before the payment's rows
 * and its reversal; the receiver keeps what it did. What the database lost
 * comes again: the payment event at least once more (the provider's
 * redelivery, or the backfill from its events API); a payment whose event
 * never comes again is one Guardian cannot know of. */
active proctype restore() {
	if
	:: atomic { RESTORE && nrev == 0 && !declined && fst != DISPATCHING -> fst = NONE; reversed = false; restored = true;
		if :: pays == 3 -> pays = 2 :: else -> skip fi }
	:: skip
	fi
}

/* The reversal (the policy takes the payment back for it), delivered
 * twice: its transaction records it, cancels a fulfilment not sent, and
 * takes back one done. */
active proctype reversal() {
	byte n = 0;
end:
	do
	:: n < 3 -> atomic { reversed = true; cancelPending(); createRevocation(); n++ }
	:: n == 3 -> break
	od
}

/* The fulfilment's dispatcher: the claim, then the call and its record.
 * A job whose claim was refused for the reversal cancels the row. */
active proctype fulfiller() {
end:
	do
	:: atomic { FIXRCLAIM && FIXRCANCEL && reversed && fst == PENDING -> fst = REVERSEDPENDING }
	:: atomic { fst == PENDING && (!FIXRCLAIM || !reversed) -> fst = DISPATCHING;
		sentAfterReversal = sentAfterReversal || reversed; assert(!sentAfterReversal) }
		atomic {
			if
			:: facted = true; fst = FULFILLED
			/* declined: nothing done (after a restore, a receiver that
			 * acted keeps its answer for the key: done, never declined) */
			:: faults < MAXFAULTS && !(restored && facted) -> faults++; declined = true; fst = FAILED
			:: faults < MAXFAULTS -> faults++; fst = PARKED             /* unknown: not done */
			:: faults < MAXFAULTS -> faults++; facted = true; fst = PARKED /* unknown: done */
			fi }
	od
}

/* A revocation's dispatcher: the receiver takes back what it granted, at
 * most once per payment. */
inline revoke(i) {
	vst[i] = DISPATCHING;
	if
	:: vacted[i] = true; revokes++; vst[i] = FULFILLED;
		assert(revokes <= 1);   /* taken back once */
		assert(facted)          /* and only what was done */
	:: faults < MAXFAULTS -> faults++; vst[i] = FAILED
	:: faults < MAXFAULTS -> faults++; vst[i] = PARKED
	:: faults < MAXFAULTS -> faults++; vacted[i] = true; revokes++; vst[i] = PARKED;
		assert(revokes <= 1); assert(facted)
	fi
}
active proctype revoker() {
end:
	do
	:: atomic { vst[0] == PENDING -> revoke(0) }
	:: atomic { vst[1] == PENDING -> revoke(1) }
	od
}

/* Lookups settle parked rows by the fact: done (and taken back if the
 * payment is reversed), or not done: sent again, or cancelled for a
 * reversed payment. */
active proctype reconciler() {
end:
	do
	:: atomic { fst == PARKED -> if
		:: facted -> fst = FULFILLED; createRevocation()
		:: !facted && reversed -> fst = CANCELLED
		:: !facted && !reversed -> fst = PENDING
		fi }
	:: atomic { vst[0] == PARKED -> if :: vacted[0] -> vst[0] = FULFILLED :: else -> vst[0] = PENDING fi }
	:: atomic { vst[1] == PARKED -> if :: vacted[1] -> vst[1] = FULFILLED :: else -> vst[1] = PENDING fi }
	od
}

/* The sweep: what settled after the reversal is taken back; a pending
 * fulfilment of a reversed payment is cancelled. */
active proctype sweep() {
end:
	do
	:: atomic { reversed && revocable && mayCreate -> createRevocation() }
	:: atomic { FIXRCANCEL && reversed && fst == PENDING -> cancelPending() }
	od
}

init {
	/* Once nothing can move: a reversed payment that was done is taken
	 * back (a revocation made; the receiver may still decline it). */
	timeout -> assert(!reversed || !facted || nrev > 0);
	/* ... and nothing is left pending or in flight */
	assert(fst != PENDING && fst != DISPATCHING && vst[0] != PENDING && vst[0] != DISPATCHING &&
	       vst[1] != PENDING && vst[1] != DISPATCHING)
}
