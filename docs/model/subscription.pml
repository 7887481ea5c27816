/*
 * A subscription's start and end, for one subscription of one action, as a
 * Promela model for spin (`just model`, run by `just test`). docs/design.md
 * ("Subscriptions", "The model") says what is abstracted.
 *
 * The start is a paid event: its purchase is granted once (the dispatch
 * protocol guardian.pml checks; here a call acts or is parked and settled
 * by the fact). The provider names the subscription by its own id; the
 * purchase is linked to it either by the start itself (Stripe's session,
 * Paddle's transaction) or by another event (Lemon Squeezy's
 * subscription_created, Paddle's subscription.created), in any order. The
 * end names only the subscription: once the link is known it reverses the
 * purchase as a refund does (reversal.pml: pending stopped, done taken
 * back once, in flight or parked waiting for its facts). Every event may
 * come before the others, and is delivered twice.
 *
 * Intake's transactions are a snapshot read and a commit. With FIXSLOCK
 * (an advisory lock per subscription, db.LinkSubscriptions) a link and an
 * end of one subscription do not interleave; without it each reads before
 * the other commits.
 *
 * Safety: no grant is claimed for sending once the end and the link are
 * both recorded (an act after the end); a take-back at most once, and only
 * of a grant that acted. At quiescence: an ended subscription's grant that
 * acted has been taken back.
 *
 * Each FIXS is a rule Guardian enforces; -DFIXSn=0 takes it out.
 */

#ifndef FIXSBEFORE
#define FIXSBEFORE 1 /* recording a link resolves the ends stored before it: the end before the start grants nothing */
#endif
#ifndef FIXSLOCK
#define FIXSLOCK 1 /* a link and an end of one subscription are serialized */
#endif

#ifndef MAXFAULTS
#define MAXFAULTS 1
#endif

#define NONE 0
#define PENDING 1
#define DISPATCHING 2
#define FULFILLED 3
#define PARKED 4
#define CANCELLED 5

byte fst;          /* the start's grant */
bool facted;       /* the receiver performed it */
byte vst;          /* its revocation */
bool vacted;
byte nrev;         /* revocations made: one at most */
byte revokes;      /* revocations the receiver performed */
bool linked;       /* the subscription's link to the start's purchase is recorded */
bool ended;        /* an end of the subscription is stored */
bool reversed;     /* the purchase is reversed: an end resolved to it */
byte faults;

inline takeBack() {
	if
	:: fst == PENDING -> fst = CANCELLED   /* no lookup here: not sent, cancelled */
	:: else -> skip
	fi;
	if
	:: fst == FULFILLED && nrev == 0 -> vst = PENDING; nrev++
	:: else -> skip
	fi
}

/* A transaction that records a link (the start's, or another event's):
 * with FIXSBEFORE, an end stored before it (in its snapshot) resolves to
 * the purchase now, before the start's grant is made. The start's own
 * transaction then makes the grant, unless the purchase is reversed. */
inline link(sawEnd, isStart) {
	linked = true;
	if
	:: FIXSBEFORE && sawEnd -> reversed = true
	:: else -> skip
	fi;
	if
	:: isStart && fst == NONE && !reversed -> fst = PENDING
	:: else -> skip
	fi;
	if
	:: reversed -> takeBack()
	:: else -> skip
	fi
}

/* The start: a paid event. withLink says it names its subscription. */
active [2] proctype start() {
	bool sawEnd;
	bool withLink;
	if :: withLink = true :: withLink = false fi;
	if
	:: FIXSLOCK -> atomic { sawEnd = ended;
		if
		:: withLink -> link(sawEnd, true)
		:: else -> if :: fst == NONE && !reversed -> fst = PENDING :: else -> skip fi
		fi }
	:: !FIXSLOCK -> sawEnd = ended;
		atomic {
		if
		:: withLink -> link(sawEnd, true)
		:: else -> if :: fst == NONE && !reversed -> fst = PENDING :: else -> skip fi
		fi }
	fi
}

/* Another event that links (subscription_created). */
active [2] proctype linker() {
	bool sawEnd;
	if
	:: FIXSLOCK -> atomic { sawEnd = ended; link(sawEnd, false) }
	:: !FIXSLOCK -> sawEnd = ended; atomic { link(sawEnd, false) }
	fi
}

/* The end: resolved at once when the link is in its snapshot; stored for
 * the link to resolve otherwise. */
active [2] proctype ender() {
	bool sawLink;
	if
	:: FIXSLOCK -> atomic { sawLink = linked; ended = true;
		if :: sawLink -> reversed = true; takeBack() :: else -> skip fi }
	:: !FIXSLOCK -> sawLink = linked;
		atomic { ended = true; if :: sawLink -> reversed = true; takeBack() :: else -> skip fi }
	fi
}

/* The grant's dispatcher: the claim refuses a reversed purchase. */
active proctype dispatcher() {
end:
	do
	:: atomic { fst == PENDING && reversed -> fst = CANCELLED }
	:: atomic { fst == PENDING && !reversed -> fst = DISPATCHING;
		assert(!(ended && linked)) /* no grant goes out after the end */ }
		atomic {
			if
			:: facted = true; fst = FULFILLED
			:: faults < MAXFAULTS -> faults++; fst = PARKED
			:: faults < MAXFAULTS -> faults++; facted = true; fst = PARKED
			fi;
			if :: reversed -> takeBack() :: else -> skip fi }
	:: atomic { vst == PENDING -> vst = DISPATCHING; vacted = true; revokes++; vst = FULFILLED;
		assert(revokes <= 1); assert(facted) }
	od
}

/* Lookups settle a parked grant by the fact, and take it back once done
 * if the purchase is reversed; the sweep takes back what settled after. */
active proctype reconciler() {
end:
	do
	:: atomic { fst == PARKED -> if
		:: facted -> fst = FULFILLED
		:: !facted && reversed -> fst = CANCELLED
		:: !facted && !reversed -> fst = PENDING
		fi; if :: reversed -> takeBack() :: else -> skip fi }
	:: atomic { reversed && fst == FULFILLED && nrev == 0 -> takeBack() }
	od
}

init {
	/* Once nothing can move: an ended subscription whose link is known
	 * has its purchase reversed, and a grant that acted is taken back. */
	timeout -> assert(!(ended && linked) || reversed);
	assert(!reversed || !facted || revokes == 1);
	assert(fst != PENDING && fst != DISPATCHING)
}
