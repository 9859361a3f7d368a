#!/bin/bash
# Survival under CPU contention (issue 25 item 10): the demos' patterns -
# examples/survival --volatile (256 MiB memory cgroup, 192 MiB volatile
# cache, 128 MiB allocated at full speed) and, if built,
# integrations/sqlite sqlite-survival --vrange --warm - run RUNS times each
# while one CPU-bound process per core competes with the monitor thread,
# then the same without the hogs.  Prints the survival rate of each.
#
#   bench/survival_under_load.sh [BUILD_DIR [RUNS [BASELINE_BUILD_DIR]]]
#
# With a baseline build (a copy of an older build directory), its runs are
# interleaved with this build's under the same load, so the two rates are
# comparable on a machine whose other load changes.  Beside the rate, the
# MiB that were left below the limit when the monitor first purged (from
# its VRANGE_DEBUG log), the smallest and the median.  Root and a memory
# cgroup; exit 77 otherwise.  HOGS_PER_CORE=n (default 1), SQLITE=0 skips
# SQLite, LOADS="loaded quiet" (default both) picks the phases, KEEP_DIR=dir
# keeps the monitor's log of every run that did not survive.
set -u
B=${1:-build/plain}
RUNS=${2:-20}
BASE=${3:-}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for a memory cgroup"; exit 77; }
[ -x "$B/examples/survival" ] || { echo "SKIP: $B/examples/survival not built"; exit 77; }
NHOGS=$(( $(nproc) * ${HOGS_PER_CORE:-1} ))
HOGS=()
hogs_on() { for _ in $(seq "$NHOGS"); do (while :; do :; done) & HOGS+=($!); done; }
hogs_off() {
	[ ${#HOGS[@]} -gt 0 ] || return 0
	kill "${HOGS[@]}" 2>/dev/null
	wait "${HOGS[@]}" 2>/dev/null
	HOGS=()
}
trap hogs_off EXIT
trap 'exit 130' INT TERM

# One run of BUILD/PROGRAM ARGS with VRANGE_DEBUG=1: sets RC, and MARGIN to
# the MiB left below the limit when the monitor first purged ("-" if never).
one() {
	local out
	RC=0
	out=$(VRANGE_DEBUG=1 "$@" 2>&1 >/dev/null) || RC=$?
	if [ $RC -ne 0 ] && [ $RC -ne 77 ] && [ -n "${KEEP_DIR:-}" ]; then
		echo "$out" >"$KEEP_DIR/failed-$(basename "$1")-$$-$RANDOM.log"
	fi
	MARGIN=$(echo "$out" | awk '/usage [0-9]+ limit [0-9]+: purged/ {
		for (i = 1; i < NF; i++) if ($i == "usage") u = $(i + 1); else if ($i == "limit") l = $(i + 1)
		sub(":", "", l); printf "%d", (l - u) / 1048576; exit }')
	[ -n "$MARGIN" ] || MARGIN=-
}

# min/median of the numbers in $@ ("-" counts as 0: never purged).
stats() {
	printf '%s\n' "$@" | sed 's/^-$/0/' | sort -n |
		awk '{ v[NR] = $1 } END { if (NR) printf "margin at first purge min %d, median %d MiB", v[1], v[int((NR + 1) / 2)] }'
}

# rate LABEL PROGRAM ARGS...: RUNS runs of PROGRAM from this build (and the
# baseline's, interleaved); prints survivals and the margins.
rate() {
	local label=$1 prog=$2 ok=0 okb=0 i; shift 2
	local -a m mb
	[ -x "$B/$prog" ] || return 0
	for i in $(seq "$RUNS"); do
		one "$B/$prog" "$@"
		[ $RC -eq 77 ] && { echo "$label: skipped (no memory cgroup)"; return; }
		[ $RC -eq 0 ] && ok=$((ok + 1))
		m+=("$MARGIN")
		if [ -n "$BASE" ]; then
			one "$BASE/$prog" "$@"
			[ $RC -eq 0 ] && okb=$((okb + 1))
			mb+=("$MARGIN")
		fi
	done
	printf '%-44s survived %2d of %2d, %s\n' "$label" $ok "$RUNS" "$(stats "${m[@]}")"
	[ -z "$BASE" ] ||
		printf '%-44s survived %2d of %2d, %s\n' "  baseline" $okb "$RUNS" "$(stats "${mb[@]}")"
}

for load in ${LOADS:-loaded quiet}; do
	label=quiet
	if [ "$load" = loaded ]; then
		hogs_on
		label="$NHOGS CPU hogs"
	fi
	rate "survival --volatile, $label" examples/survival --volatile
	[ "${SQLITE:-1}" = 0 ] ||
		rate "sqlite-survival --vrange --warm, $label" integrations/sqlite/sqlite-survival --vrange --warm
	hogs_off
done
exit 0
