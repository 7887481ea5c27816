#!/usr/bin/env bash
# Model-checks Guardian's protocol with spin (docs/design.md, "The model").
#
#   check.sh              every rule in: no violation, safety and liveness
#   check.sh holes        each rule out in turn: spin must find the hole it closes
#   check.sh trail X...   the counterexample with rules X... out (FIX1, FIXRONCE, or
#                         KEYED=1 FIXBODY FIXSIGNED: NAME=VALUE sets a value)
#
# The dispatch model runs against two receivers: one that honours no key
# (KEYED=0, the worst case: Guardian's own rules FIX1-FIX5 and FIXC), and one
# that keeps docs/receivers.md (KEYED=1: the receiver's-contract rules FIXKEY,
# FIX409, FIXSIGNED, through a restore that loses fulfilment rows).
#
# actions.pml takes two actions of one purchase through intake at two nodes
# whose routes differ, a decline and its retry, a lost answer and its lookup
# (FIXIDX, FIXPER, FIXONCE, FIXAKEY).
#
# subscription.pml takes a subscription's start, the event that links it
# and its end through every order, each delivered twice (FIXSBEFORE,
# FIXSLOCK).
#
# standing.pml takes a subscription's suspension, its resumption (twice)
# and maybe a second suspension and its end, by the provider's times,
# through every order (FIXSTIME, FIXSONCE, FIXSLINK).
#
# Needs spin and a C compiler (`apt-get install -y spin`); .ci/run installs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v spin >/dev/null || { echo "spin is not installed: apt-get install -y spin" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/*.pml "$work"/
cd "$work"

# build MODEL ARGS...: generate and compile a verifier for MODEL; NAME=VALUE
# sets a model rule, -FLAG goes to the C compiler. Only the dispatch model's
# full searches (millions of states) repay gcc's optimiser: for the small
# models, and for a hole (pan stops at its first violation), -O2's compile
# costs seconds more than the search it would speed up.
build() {
	local model=$1; shift
	local defs=() cflags=()
	for f in "$@"; do case $f in -*) cflags+=("$f") ;; *) defs+=("-D$f") ;; esac; done
	spin "${defs[@]}" -a "$model" >/dev/null
	gcc "${OPT:--O0}" -w "${cflags[@]}" -o pan pan.c
}

# run LABEL ARGS...: run pan, print one line, fail on errors
# (awk reads to the end: one that exits at its first match leaves printf
# writing into a closed pipe, and pipefail makes that SIGPIPE a failure.)
run() {
	local label=$1; shift
	local out
	out=$(./pan "$@" 2>&1)
	local states errors
	states=$(printf '%s\n' "$out" | awk '/states, stored/ && !seen {print $1; seen = 1}')
	errors=$(printf '%s\n' "$out" | awk '/errors:/ && !seen {print $NF; seen = 1}')
	printf '%-44s %10s states  errors %s\n' "$label" "$states" "$errors"
	[ "$errors" = 0 ]
}

# Keyed runs take one operator action: with two, the state space grows
# fivefold (45 s for safety alone) and finds nothing more.
KEYED="KEYED=1 MAXOPS=1"

# A search is one thread: the checks run as many at a time as there are
# cores, each in a directory of its own, and print their lines in order.
lanes=$(nproc 2>/dev/null || echo 1)
tasks=0
# task COMMAND ARGS...: runs the command in the background, in a copy of
# the models, keeping its output and exit status.
task() {
	while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n || true; done
	local dir="$work/task$tasks"
	mkdir "$dir"
	cp "$work"/*.pml "$dir"/
	(
		cd "$dir"
		set +e
		(
			set -e
			"$@"
		)
		echo $? >"$dir.rc"
	) >"$dir.out" 2>&1 &
	tasks=$((tasks + 1))
}
# finish: waits for every task, prints their output in order, and fails
# when any did.
finish() {
	wait
	local i status=0
	for ((i = 0; i < tasks; i++)); do
		cat "$work/task$i.out"
		[ "$(cat "$work/task$i.rc" 2>/dev/null)" = 0 ] || status=1
	done
	return $status
}
# check LABEL DEPTH MODEL ARGS...: build MODEL with ARGS and search it
# with pan's flags (-mDEPTH and PAN's); OPT as build takes it.
check() {
	local label=$1 depth=$2 model=$3; shift 3
	build "$model" "$@"
	# shellcheck disable=SC2086 # PAN is flags
	run "$label" "-m$depth" ${PAN:-}
}

case ${1:-} in
"")
	# shellcheck disable=SC2086 # KEYED is two rules
	{
		OPT=-O2 task check "dispatch, keyed receiver, restore: safety" 400000 guardian.pml -DSAFETY -DNOCLAIM $KEYED
		OPT=-O2 task check "dispatch, keyless receiver: safety" 400000 guardian.pml -DSAFETY -DNOCLAIM KEYED=0
		OPT=-O2 PAN="-a -f" task check "dispatch: liveness (weak fairness)" 400000 guardian.pml -DNFAIR=4 $KEYED RESTORE=0
	}
	task check "filter: no 2xx for an event not in Postgres" 100000 filter.pml -DSAFETY
	task check "reversal: taken back once, only if done" 100000 reversal.pml -DSAFETY -DNOCLAIM
	task check "two actions, keyless receiver" 100000 actions.pml -DSAFETY -DNOCLAIM KEYED=0
	task check "two actions, one keyed receiver for both" 100000 actions.pml -DSAFETY -DNOCLAIM KEYED=1
	task check "subscription: no access outlives its end" 100000 subscription.pml -DSAFETY -DNOCLAIM
	task check "standing: the latest word decides what is held" 100000 standing.pml -DSAFETY -DNOCLAIM
	finish
	;;
holes)
	# hole MODEL DEPTH LABEL ARGS...: with the rules ARGS set, spin must find
	# a violation in MODEL
	hole() {
		local model=$1 depth=$2 label=$3; shift 3
		build "$model" -DSAFETY "$@"
		if run "$label" "-m$depth" >/dev/null; then
			echo "$label: spin found nothing, but the rule is there to close a hole"
			return 1
		fi
		echo "$label: violation found, as it must be"
	}
	for fix in FIX1 FIX2 FIX3 FIX4 FIXC FIX5; do
		task hole guardian.pml 400000 "dispatch (keyless receiver) without $fix" -DNOCLAIM KEYED=0 $fix=0
	done
	for fix in FIXKEY FIX409 FIXSIGNED; do
		# shellcheck disable=SC2086 # KEYED is two rules
		task hole guardian.pml 400000 "dispatch (keyed receiver) without $fix" -DNOCLAIM $KEYED $fix=0
	done
	for fix in FIXRCLAIM FIXRDONE FIXRONCE FIXRCANCEL FIXRASK; do
		task hole reversal.pml 100000 "reversal without $fix" -DNOCLAIM $fix=0
	done
	for fix in "KEYED=0 FIXIDX=0" "KEYED=0 FIXPER=0" "KEYED=0 FIXONCE=0" "KEYED=1 FIXAKEY=0"; do
		# shellcheck disable=SC2086 # two rules on purpose
		task hole actions.pml 100000 "two actions with $fix" -DNOCLAIM $fix
	done
	for fix in FIXSBEFORE FIXSLOCK; do
		task hole subscription.pml 100000 "subscription without $fix" -DNOCLAIM $fix=0
	done
	for fix in FIXSTIME FIXSONCE FIXSLINK; do
		task hole standing.pml 100000 "standing without $fix" -DNOCLAIM $fix=0
	done
	for fix in FIX7=0 MARKFIRST=1; do
		task hole filter.pml 100000 "filter with $fix" $fix
	done
	finish
	;;
trail)
	shift
	[ $# -gt 0 ] || { echo "name a rule, e.g. FIX1, or KEYED=1 FIXKEY" >&2; exit 2; }
	model=guardian.pml defs=()
	for a in "$@"; do
		case $a in
		FIX7) model=filter.pml; defs+=(FIX7=0) ;;
		FIXR*) model=reversal.pml; defs+=("$a=0") ;;
		FIXIDX | FIXPER | FIXONCE | FIXAKEY) model=actions.pml; defs+=("$a=0") ;;
		FIXSTIME | FIXSONCE | FIXSLINK) model=standing.pml; defs+=("$a=0") ;;
		FIXS*) model=subscription.pml; defs+=("$a=0") ;;
		MARKFIRST) model=filter.pml; defs+=(MARKFIRST=1) ;;
		*=*) defs+=("$a") ;;
		*) defs+=("$a=0") ;;
		esac
	done
	case " ${defs[*]} " in *" KEYED="*) ;; *) [ $model = guardian.pml ] || [ $model = actions.pml ] && defs+=(KEYED=0) ;; esac
	build "$model" -DSAFETY -DNOCLAIM "${defs[@]}"
	./pan -m400000 >/dev/null 2>&1 || true
	dflags=(); for d in "${defs[@]}"; do dflags+=("-D$d"); done
	spin "${dflags[@]}" -t -p "$model" | grep -E 'proc +[0-9]+ \((provider|worker|sweep|reconciler|operator|chaos|clock|receiver|payment|reversal|fulfiller|revoker|restore|intake|retrier|monitor|start|linker|ender|dispatcher|pastDue|paidUp|pastDueAgain)' \
		| grep -vE '\[(\(1\)|else|skip)\]|\[(r|a|out|n|k|body|i) = ' | sed -E 's/^ *[0-9]+:\s+proc +[0-9]+ //; s/ \(state [0-9]+\)//'
	spin "${dflags[@]}" -t "$model" | grep -E 'assertion violated|spin: trail ends' || true
	;;
*)
	echo "usage: check.sh [holes | trail RULE...]" >&2
	exit 2
	;;
esac
