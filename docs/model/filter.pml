/*
 * Intake and the Redis duplicate filter, for one event: no 2xx is ever sent
 * for an event Postgres does not hold (invariant 4, asserted where the
 * filter answers), whatever Redis and a database restore do. Compile with -DFIX7=0 to take the epoch out of the
 * marks, or -DMARKFIRST=1 to write the mark before the commit.
 */
#ifndef FIX7
#define FIX7 1 /* Redis marks are scoped to the database's epoch */
#endif
#ifndef MARKFIRST
#define MARKFIRST 0
#endif
#define MAXFAULTS 3

bool committed;   /* the event is in Postgres */
bool marked;      /* Redis holds its mark ... */
byte markEpoch;   /* ... written under this epoch */
byte epoch;       /* the database's epoch */
byte faults;

/* A Guardian process: it reads the epoch at start; the restore runbook
 * stops every process before a restore and rotates the epoch before they
 * start again. */
proctype guardian(byte deliveries) {
	byte e = epoch;
	byte n = 0;
	do
	:: n < deliveries ->
		if
		:: atomic { marked && (!FIX7 || markEpoch == e) -> assert(committed) }  /* 200 duplicate from Redis: Postgres must hold it */
		:: atomic { !(marked && (!FIX7 || markEpoch == e)) && committed -> skip }  /* 200 duplicate from Postgres */
		:: atomic { !(marked && (!FIX7 || markEpoch == e)) && !committed ->
			if
			:: MARKFIRST -> marked = true; markEpoch = e
			:: else -> skip
			fi }
			if
			:: atomic { faults < MAXFAULTS -> faults++ }  /* crash before the commit: no 2xx */
			:: atomic { committed = true };
				if
				:: atomic { faults < MAXFAULTS -> faults++ }  /* crash before the mark; the 2xx may be lost too */
				:: atomic { marked = true; markEpoch = e }  /* the mark, after the commit, then 200 */
				fi
			fi
		fi;
		n++
	:: else -> break
	od
}

init {
	/* A process delivers; Redis may be flushed; the database is restored
	 * (losing the event) and, by the runbook, its epoch rotated before a new
	 * process starts. */
	run guardian(2);
	if
	:: atomic { faults < MAXFAULTS && marked -> faults++; marked = false }
	:: skip
	fi;
	(_nr_pr == 1);
	if
	:: atomic { faults < MAXFAULTS -> faults++; committed = false; epoch++ }
	:: skip
	fi;
	run guardian(2)
}

