/*
 * Several actions of one purchase (docs/actions.md), as a Promela model for
 * spin (`just model`, run by `just test`). guardian.pml models one action's
 * dispatch in depth; this model takes two actions of one purchase through
 * intake at two nodes whose routes differ, dispatch, a decline and its
 * retry, a lost answer and its lookup, and asks that
 *
 *   - neither action is ever performed twice;
 *   - an action recorded fulfilled was performed (under its own key);
 *   - no action is performed that the purchase was not routed to when it
 *     was first recorded as paid;
 *   - once nothing more can happen, every action the purchase pays for is
 *     fulfilled: one declined (its first key) or parked (its first answer
 *     lost) holds the other back from nothing.
 *
 * Action A's receiver declines its first key (signed: nothing was done);
 * action B's receiver performs the action and its answer is lost (the row
 * is parked, then looked up). Node 0 routes the purchase to A only, node 1
 * to A and B (a rollout of a new routes file); each delivers one event of
 * the purchase.
 *
 * Receivers (KEYED): 0 acts on every call (the worst case, against which
 * Guardian's own rules must hold); 1 keeps docs/receivers.md (a finished
 * key replays its answer, a declined key stays declined), one receiver
 * serving both actions, so that keys must differ between actions.
 *
 * Rules, each taken out by -DNAME=0 (check.sh holes):
 *   FIXIDX   one live row per (payment, action): the partial unique index
 *   FIXPER   ... per action: an index per payment alone holds B behind A
 *   FIXONCE  a purchase's actions are decided once, when it is first recorded
 *   FIXAKEY  keys derive from the action too, not the payment alone
 */

#ifndef FIXIDX
#define FIXIDX 1
#endif
#ifndef FIXPER
#define FIXPER 1
#endif
#ifndef FIXONCE
#define FIXONCE 1
#endif
#ifndef FIXAKEY
#define FIXAKEY 1
#endif
#ifndef KEYED
#define KEYED 0
#endif

#define NA 2     /* actions: 0 = A, 1 = B */
#define ROWS 3   /* rows per action: the first, a retry, a duplicate */
#define NKEYS 6

/* row states */
#define NONE 0
#define PENDING 1
#define DISPATCHING 2
#define FULFILLED 3
#define PARKED 4
#define FAILED 5

/* the receiver's record of a key */
#define RNONE 0
#define RDONE 1
#define RDECL 2

byte st[NA * ROWS];
byte key[NA * ROWS];
byte nrows[NA];
byte declines[NA];   /* the action's failed rows: its declined keys */
byte acted[NA];      /* times the action was performed */
byte rec[NKEYS];     /* the receiver's record by key */
byte decided;        /* the purchase's actions, as a bit set; 0: not recorded */
byte routed[2];      /* each node's routes for the purchase */
bool lost;           /* B's first answer was lost */
bool retried[NA * ROWS]; /* a failed row an operator retried */

#define ROW(a, i) ((a) * ROWS + (i))
/* some row is in state X (ROWS is 3: six rows) */
#define ANY(X) (st[0] == X || st[1] == X || st[2] == X || st[3] == X || st[4] == X || st[5] == X)
#define ANYFAILED (st[0] == FAILED && !retried[0] || st[1] == FAILED && !retried[1] || st[2] == FAILED && !retried[2] || \
	st[3] == FAILED && !retried[3] || st[4] == FAILED && !retried[4] || st[5] == FAILED && !retried[5])
#define BIT(a) (1 << (a))
#define KEYOF(a, d) (FIXAKEY -> ((a) * 3 + (d)) : (d))

/* live(a): the action has a row that holds it (every state but failed);
 * without FIXPER, any action's row holds the payment */
inline live(a, yes) {
	yes = false;
	i = 0;
	do
	:: i < NA * ROWS ->
		if
		:: (FIXPER -> i / ROWS == a : true) && i % ROWS < nrows[i / ROWS] && st[i] != NONE && st[i] != FAILED -> yes = true; break
		:: else -> i++
		fi
	:: else -> break
	od
}

/* the safety properties, checked after every step that changes a row */
inline invariants() {
	c = 0;
	do
	:: c < NA * ROWS ->
		assert(acted[c / ROWS] <= 1);
		assert(acted[c / ROWS] == 0 || (decided & BIT(c / ROWS)));
		assert(st[c] != FULFILLED || acted[c / ROWS] > 0);
		c++
	:: else -> break
	od
}

/* make(a): a pending row of a under its next key, unless a live one holds
 * the action (FIXIDX) */
inline make(a) {
	live(a, held);
	if
	:: held && FIXIDX -> skip
	:: else ->
		if
		:: nrows[a] < ROWS ->
			st[ROW(a, nrows[a])] = PENDING;
			key[ROW(a, nrows[a])] = KEYOF(a, declines[a]);
			nrows[a]++
		:: else -> skip
		fi
	fi
}

/* intake of the purchase's event at node n: its actions decided once, in
 * the transaction that makes its rows */
proctype intake(byte n) {
	byte i, c, set;
	bool held;
	atomic {
		if
		:: decided == 0 -> decided = routed[n]
		:: else -> skip
		fi;
		set = (FIXONCE -> decided : routed[n]);
		if
		:: set & BIT(0) -> make(0)
		:: else -> skip
		fi;
		if
		:: set & BIT(1) -> make(1)
		:: else -> skip
		fi;
		invariants()
	}
}

/* call: the receiver of a's action, for the row r */
inline call(a, r, out) {
	atomic {
		if
		:: KEYED && rec[key[r]] == RDONE -> out = FULFILLED
		:: KEYED && rec[key[r]] == RDECL -> out = FAILED
		:: else ->
			if
			:: a == 0 && declines[0] == 0 && rec[key[r]] == RNONE ->
				/* A's receiver declines its first key, signed */
				rec[key[r]] = RDECL; out = FAILED
			:: else ->
				acted[a]++;
				rec[key[r]] = RDONE;
				if
				:: a == 1 && !lost -> lost = true; out = PARKED
				:: else -> out = FULFILLED
				fi
			fi
		fi
	}
}

/* a dispatcher: claims a pending row, calls, records the outcome */
proctype worker() {
	byte r, a, c, out;
end:
	do
	:: atomic {
		ANY(PENDING) ->
		r = 0;
		do
		:: st[r] == PENDING -> break
		:: else -> r++
		od;
		st[r] = DISPATCHING
	   };
	   a = r / ROWS;
	   call(a, r, out);
	   atomic {
		st[r] = out;
		if
		:: out == FAILED -> declines[a]++
		:: else -> skip
		fi;
		invariants()
	   }
	od
}

/* the reconciler: a parked row's key looked up, the receiver's record
 * decides */
proctype reconciler() {
	byte r, c;
end:
	do
	:: atomic {
		ANY(PARKED) ->
		r = 0;
		do
		:: st[r] == PARKED -> break
		:: else -> r++
		od;
		if
		:: rec[key[r]] == RDONE -> st[r] = FULFILLED
		:: rec[key[r]] == RDECL -> st[r] = FAILED; declines[r / ROWS]++
		:: else -> st[r] = PENDING
		fi;
		invariants()
	   }
	od
}

/* an operator retries a failed action: a new row under its next key */
proctype retrier() {
	byte r, i, c;
	bool held;
end:
	do
	:: atomic {
		ANYFAILED ->
		r = 0;
		do
		:: st[r] == FAILED && !retried[r] -> break
		:: else -> r++
		od;
		retried[r] = true;
		make(r / ROWS);
		invariants()
	   }
	od
}

/* once nothing more can happen, every action paid for is fulfilled */
active proctype monitor() {
	byte a, i;
	bool done;
	timeout ->
	a = 0;
	do
	:: a < NA ->
		if
		:: decided & BIT(a) ->
			done = false;
			i = 0;
			do
			:: i < nrows[a] ->
				if
				:: st[ROW(a, i)] == FULFILLED -> done = true; break
				:: else -> i++
				fi
			:: else -> break
			od;
			assert(done)
		:: else -> skip
		fi;
		a++
	:: else -> break
	od
}

init {
	routed[0] = BIT(0);
	routed[1] = BIT(0) | BIT(1);
	atomic {
		run intake(0); run intake(1);
		run worker(); run worker();
		run reconciler(); run retrier()
	}
}
