/*
 * A subscription's suspensions and resumptions, for one subscription of
 * one action whose policy takes it back while suspended
 * (subscription_suspended), as a Promela model for spin (`just model`, run
 * by `just test`). docs/design.md ("Subscriptions", "The model") says what
 * is abstracted.
 *
 * The provider says, at its own signed times, that the subscription is
 * past due (t=1), active again (t=2, delivered twice) and, maybe, past due
 * again (t=3); it may end. The start links the subscription. Every event
 * may come before the others. Each event's transaction holds the
 * subscription's lock (db.LinkSubscriptions; subscription.pml checks that
 * lock against the end), so each is one atomic step here; dispatch and the
 * sweep interleave with them (the dispatch protocol itself is
 * guardian.pml's and reversal.pml's).
 *
 * A suspension in force reverses the grant in force; a resumption ends it
 * and, where it took something back, grants again: grant n+1, a purchase
 * of its own. The end reverses the start, and with it every grant again.
 *
 * Safety: each grant acts at most once and is taken back at most once,
 * only after it acted; no grant acts once the end is recorded. At
 * quiescence: the latest word decides what is held: nothing when the
 * subscription ended or is suspended, exactly one grant when it is
 * active.
 *
 * Each FIXS is a rule Guardian enforces; -DFIXSn=0 takes it out.
 */

#ifndef FIXSTIME
#define FIXSTIME 1 /* a word older than the latest applied changes nothing */
#endif
#ifndef FIXSONCE
#define FIXSONCE 1 /* only a resumption that ends a suspension in force grants again */
#endif
#ifndef FIXSLINK
#define FIXSLINK 1 /* the start, linked, is reversed by the suspension in force */
#endif

#define NONE 0
#define PENDING 1
#define FULFILLED 2
#define CANCELLED 3
#define G 4 /* grants: the start's, and up to three again */

byte g[G];          /* each grant's row */
bool acted[G];      /* its receiver performed it */
byte v[G];          /* its revocation */
byte nrev[G];       /* revocations made */
byte revokes[G];    /* revocations performed */
bool rev[G];        /* a suspension reversed it */
bool rootRev;       /* the end reversed the start, and so every grant */
bool linked;
bool ended;
bool suspended;     /* a suspension in force */
byte tookFrom;      /* the grant it reversed, G when none */
byte grants;        /* grants again made */
byte standingAt;    /* the latest word applied, by the provider's time */
bool third;         /* the second suspension (t=3) is delivered */

#define reversed(i) (rev[i] || rootRev)

inline takeBack(i) {
	if
	:: g[i] == PENDING -> g[i] = CANCELLED
	:: else -> skip
	fi;
	if
	:: g[i] == FULFILLED && nrev[i] == 0 -> v[i] = PENDING; nrev[i]++
	:: else -> skip
	fi
}

/* A suspension's transaction at time t. */
inline suspend(t) {
	if
	:: FIXSTIME && t < standingAt -> skip
	:: else ->
		if :: t > standingAt -> standingAt = t :: else -> skip fi;
		if
		:: !suspended ->
			suspended = true; tookFrom = G;
			if
			:: linked && !ended -> tookFrom = grants; rev[grants] = true; takeBack(grants)
			:: else -> skip
			fi
		:: else -> skip
		fi
	fi
}

active proctype start() {
	atomic {
		linked = true;
		if :: ended -> rootRev = true :: else -> skip fi; /* an end stored before: subscription.pml's FIXSBEFORE */
		if
		:: FIXSLINK && suspended -> tookFrom = 0; rev[0] = true
		:: else -> skip
		fi;
		if
		:: !reversed(0) -> g[0] = PENDING
		:: else -> g[0] = CANCELLED /* born taken back */
		fi
	}
}

active proctype pastDue() {
	atomic { suspend(1) }
}

active [2] proctype paidUp() {
	atomic {
		if
		:: FIXSTIME && 2 < standingAt -> skip
		:: else ->
			if :: 2 > standingAt -> standingAt = 2 :: else -> skip fi;
			if
			:: suspended || !FIXSONCE ->
				if
				:: (tookFrom < G || !FIXSONCE) && linked && !ended && grants + 1 < G ->
					grants++; g[grants] = PENDING
				:: else -> skip
				fi;
				suspended = false; tookFrom = G
			:: else -> skip
			fi
		fi
	}
}

active proctype pastDueAgain() {
	if
	:: atomic { third = true; suspend(3) }
	:: skip
	fi
}

active proctype ender() {
	if
	:: atomic { ended = true;
		if
		:: linked -> byte i = 0; rootRev = true;
			do
			:: i < G -> takeBack(i); i++
			:: else -> break
			od
		:: else -> skip
		fi }
	:: skip
	fi
}

/* Dispatch of grant i: a pending grant acts unless reversed; its
 * revocation acts once; the sweep takes back what settled fulfilled after
 * its reversal. */
proctype dispatcher(byte i) {
end:
	do
	:: atomic { g[i] == PENDING && reversed(i) -> g[i] = CANCELLED }
	:: atomic { g[i] == PENDING && !reversed(i) -> assert(!(ended && linked)); acted[i] = true; g[i] = FULFILLED }
	:: atomic { v[i] == PENDING -> v[i] = FULFILLED; revokes[i]++; assert(revokes[i] <= 1); assert(acted[i]) }
	:: atomic { reversed(i) && g[i] == FULFILLED && nrev[i] == 0 -> takeBack(i) }
	od
}

init {
	byte i, held;
	atomic { run dispatcher(0); run dispatcher(1); run dispatcher(2); run dispatcher(3) }
	timeout ->
	do
	:: i < G -> if :: acted[i] && revokes[i] == 0 -> held++ :: else -> skip fi; i++
	:: else -> break
	od;
	if
	:: ended || third -> assert(held == 0) /* ended, or past due again last */
	:: else -> assert(held == 1)           /* active again last: one grant held */
	fi
}
