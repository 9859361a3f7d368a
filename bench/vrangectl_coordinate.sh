#!/bin/bash
# The coordinator against the processes' own monitors (issue 17's figure):
# 4 processes with 64 MiB volatile each in one memory cgroup, a fifth
# allocating past the headroom.  For each mode: bytes purged / bytes needed
# (needed = what brings usage back to the policy's level, limit - 2 x
# headroom), order inversions across processes (a newer chunk purged while
# an older one was kept), and whether the allocator survived.
#   bench/vrangectl_coordinate.sh BUILD_DIR       (root; cgroup v1 or v2)
set -u
B=${1:-build/plain}
CTL=$B/tools/vrangectl/vrangectl
TGT=$B/tests/vrangectl_target
LIMIT=$((512 << 20))
ALLOC_MIB=256
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for a memory cgroup"; exit 77; }
# The coordinator serves every process of the user that /proc and the
# abstract socket namespace show: the bench runs in a PID namespace with its
# own /proc and a network namespace of its own (as tests/own_ns.h does), so
# it purges nothing and steers no monitor outside itself.
if [ -z "${VRANGE_BENCH_OWN_NS:-}" ]; then
	unshare --pid --fork --mount-proc --net true 2>/dev/null ||
		{ echo "SKIP: unshare --pid --mount-proc --net refused (the coordinator would reach every process of the user)"; exit 77; }
	VRANGE_BENCH_OWN_NS=$$ exec unshare --pid --fork --mount-proc --net -- bash "$0" "$@"
fi
TAG=$VRANGE_BENCH_OWN_NS # the pid outside: $$ is 1 in every run
if [ -d /sys/fs/cgroup/memory ]; then
	CG=/sys/fs/cgroup/memory/vrangectl-bench-$TAG
	mkdir "$CG" && echo $LIMIT >"$CG/memory.limit_in_bytes" || exit 77
else
	CG=/sys/fs/cgroup/vrangectl-bench-$TAG
	mkdir "$CG" && echo $LIMIT >"$CG/memory.max" || exit 77
fi
HEAD=$(( LIMIT / 16 > (16 << 20) ? LIMIT / 16 : 16 << 20 ))
usage() { cat "$CG/memory.usage_in_bytes" 2>/dev/null || cat "$CG/memory.current"; }

run_mode() { # $1 = monitors | coordinate
	local mode=$1 t k i
	declare -a IN OUT PIDS
	for t in 0 1 2 3 4; do
		coproc TG { exec env VRANGE_MONITOR=1 "$TGT"; } 2>/dev/null
		PIDS[$t]=$TG_PID; IN[$t]=${TG[1]}; OUT[$t]=${TG[0]}
		exec {fi}>&"${TG[1]}" {fo}<&"${TG[0]}"
		IN[$t]=$fi; OUT[$t]=$fo
		read -r _ <&"$fo"
		echo "${PIDS[$t]}" >"$CG/cgroup.procs"
	done
	say() { echo "$2" >&"${IN[$1]}"; read -r REPLY <&"${OUT[$1]}"; }
	for t in 0 1 2 3; do say $t "region bench$t 65536 zero"; done
	# Interleaved marks: global order index k*4+t.
	for k in $(seq 0 15); do
		for t in 0 1 2 3; do say $t "mark 0 $((k * 1024)) 1024"; sleep 0.005; done
	done
	local cpid=
	if [ "$mode" = coordinate ]; then
		"$CTL" coordinate --foreground & cpid=$!
		sleep 0.3
	fi
	local base; base=$(usage)
	local needed=$(( base + (ALLOC_MIB << 20) - (LIMIT - 2 * HEAD) ))
	local alive=yes
	say 4 "alloc $ALLOC_MIB"
	[ "$REPLY" = ok ] || alive=no
	sleep 1.5
	local purged=0 p
	for t in 0 1 2 3; do
		say $t stats
		p=$(echo "$REPLY" | awk '{print $5}'); purged=$((purged + p))
	done
	# Which chunks went: unmark each (purged / intact).
	local -a gone
	for k in $(seq 0 15); do
		for t in 0 1 2 3; do
			say $t "unmark 0 $((k * 1024)) 1024"
			[ "$REPLY" = "ok purged" ] && gone[$((k * 4 + t))]=1 || gone[$((k * 4 + t))]=0
		done
	done
	local inv=0
	for i in $(seq 0 63); do
		[ "${gone[$i]}" = 0 ] || continue
		for j in $(seq $((i + 1)) 63); do [ "${gone[$j]}" = 1 ] && inv=$((inv + 1)); done
	done
	[ -n "$cpid" ] && kill "$cpid" && wait "$cpid" 2>/dev/null
	kill -0 "${PIDS[4]}" 2>/dev/null || alive=no
	for t in 0 1 2 3 4; do kill -9 "${PIDS[$t]}" 2>/dev/null; done
	wait 2>/dev/null
	printf '%-10s purged %4d MiB, needed %4d MiB, ratio %.2f, inversions %d, allocator %s\n' \
		"$mode" $((purged >> 20)) $((needed >> 20)) \
		"$(awk -v a=$purged -v b=$needed 'BEGIN { print (b > 0 ? a / b : 0) }')" \
		$inv "$([ $alive = yes ] && echo survived || echo KILLED)"
}

run_mode monitors
sleep 0.5
run_mode coordinate
rmdir "$CG" 2>/dev/null
