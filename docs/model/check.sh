#!/usr/bin/env bash
# Model-checks Guardian's protocol with spin (docs/design.md, "The model").
#
#   check.sh           every rule in: no violation, safety and liveness
#   check.sh holes     each rule out in turn: spin must find the hole it closes
#   check.sh trail X   the counterexample spin prints with rule X out (FIX1 ...)
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
# sets a model rule, -FLAG goes to the C compiler
build() {
	local model=$1; shift
	local defs=() cflags=()
	for f in "$@"; do case $f in -*) cflags+=("$f") ;; *) defs+=("-D$f") ;; esac; done
	spin "${defs[@]}" -a "$model" >/dev/null
	gcc -O2 -w "${cflags[@]}" -o pan pan.c
}

# run LABEL ARGS...: run pan, print one line, fail on errors
run() {
	local label=$1; shift
	local out
	out=$(./pan "$@" 2>&1)
	local states errors
	states=$(printf '%s\n' "$out" | awk '/states, stored/ {print $1; exit}')
	errors=$(printf '%s\n' "$out" | awk '/errors:/ {print $NF; exit}')
	printf '%-44s %10s states  errors %s\n' "$label" "$states" "$errors"
	[ "$errors" = 0 ]
}

case ${1:-} in
"")
	build guardian.pml -DSAFETY -DNOCLAIM
	run "dispatch: safety, quiescence" -m400000
	build guardian.pml -DNFAIR=3
	run "dispatch: liveness (weak fairness)" -a -f -m400000
	build filter.pml -DSAFETY
	run "filter: no 2xx for an event not in Postgres" -m100000
	;;
holes)
	status=0
	for fix in FIX1 FIX2 FIX3 FIX4 FIXC FIX5; do
		build guardian.pml -DSAFETY -DNOCLAIM $fix=0
		if run "dispatch without $fix" -m400000 >/dev/null; then
			echo "dispatch without $fix: spin found nothing, but the rule is there to close a hole" >&2
			status=1
		else
			echo "dispatch without $fix: violation found, as it must be"
		fi
	done
	for fix in FIX7=0 MARKFIRST=1; do
		build filter.pml -DSAFETY $fix
		if run "filter with $fix" -m100000 >/dev/null; then
			echo "filter with $fix: spin found nothing" >&2
			status=1
		else
			echo "filter with $fix: violation found, as it must be"
		fi
	done
	exit $status
	;;
trail)
	model=guardian.pml
	case ${2:?name a rule, e.g. FIX1} in FIX7|MARKFIRST) model=filter.pml ;; esac
	val=0; [ "$2" = MARKFIRST ] && val=1
	build "$model" -DSAFETY -DNOCLAIM "$2=$val"
	./pan -m400000 >/dev/null 2>&1 || true
	spin "-D$2=$val" -t -p "$model" | grep -E 'proc +[0-9]+ \((provider|worker|sweep|reconciler|operator|chaos|clock)' \
		| grep -vE '\[(\(1\)|else|skip)\]|\[(r|a|out|n) = ' | sed -E 's/^ *[0-9]+:\s+proc +[0-9]+ //; s/ \(state [0-9]+\)//'
	spin "-D$2=$val" -t "$model" | grep -E 'assertion violated|spin: trail ends' || true
	;;
*)
	echo "usage: check.sh [holes | trail FIXn]" >&2
	exit 2
	;;
esac
