/* SPDX-License-Identifier: MIT */
/* pressure.h - the monitor thread: pressure sources, policy, budget. */
#ifndef VRANGE_PRESSURE_H
#define VRANGE_PRESSURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"

struct vrange_stats;

/* Start the monitor with default options, as at first use; errors are only
 * logged (VRANGE_DEBUG): the library works without it. */
void pressure_autostart(void) VR_HIDDEN;

/* fork(): wait until the monitor thread sleeps, and keep it there until
 * the fork is done (env.c; done runs in the parent and the child). */
void pressure_fork_prepare(void) VR_HIDDEN;
void pressure_fork_done(void) VR_HIDDEN;

/* Set the budget (0 = none) and wake the monitor to enforce it. */
void pressure_set_budget(size_t bytes) VR_HIDDEN;

/* Whether the monitor thread runs (for the record vrangectl reads). */
bool pressure_running(void) VR_HIDDEN;

/*
 * Following the process into another cgroup (no kernel event tells of a
 * move).  pressure_check_cgroup: a slow path of the API (region or cache
 * made, stats, purge) compares /proc/self/cgroup with what the monitor
 * armed for, at most every 10 ms, and wakes it on a change.
 * pressure_note_mark: every volatile mark; set while the monitor sleeps
 * with nothing volatile, it wakes the monitor once, which then checks its
 * cgroup twice a second for as long as volatile memory exists.
 */
void pressure_check_cgroup(void) VR_HIDDEN;
extern _Atomic bool pressure_want_mark VR_HIDDEN;
void pressure_mark_seen(void) VR_HIDDEN;
static inline void pressure_note_mark(void)
{
	if (__builtin_expect(atomic_load_explicit(&pressure_want_mark,
						  memory_order_relaxed), 0))
		pressure_mark_seen();
}

/*
 * Copy the name of the pressure source in use into out->pressure_source:
 *   "memcg-v1"   cgroup v1 memory controller: usage thresholds near a finite
 *                memory.limit_in_bytes (or, without a limit, only
 *                memory.pressure_level events while no PSI is available)
 *   "memcg-v2"   cgroup v2: memory.current polled against memory.high/max,
 *                memory.events changes
 *   "psi-cgroup" PSI trigger on the process's own cgroup v2 memory.pressure
 *   "psi"        PSI trigger on /proc/pressure/memory
 *   "meminfo"    polling /proc/meminfo MemAvailable only
 *   "none"       the monitor is not running
 * Several sources are usually armed at once; the name is the one that reacts
 * first, in the order above.
 */
void pressure_fill_stats(struct vrange_stats *out) VR_HIDDEN;

/*
 * Headroom the monitor keeps below a hard memory limit (cgroup limit, or
 * MemTotal for /proc/meminfo): it starts purging when less than this is
 * left and purges everything volatile when less than a quarter of it is.
 * Sized from what was measured on a memcg without swap: an allocator
 * faulting ~2 MiB/ms is OOM-killed ~0.2 ms after reclaim starts, so the
 * headroom must cover the wake-up (< 1 ms) plus the first purged chunks
 * (2 MiB each at ~5 GiB/s) at a few times that allocation rate: at least
 * 16 MiB (8 ms of lead at 2 MiB/ms), 1/16 of the limit for larger limits,
 * at most 256 MiB.  Inline so benchmarks can compute the same threshold.
 */
static inline uint64_t pressure_headroom(uint64_t limit)
{
	uint64_t h = limit / 16;

	if (h < (16ull << 20))
		h = 16ull << 20;
	if (h > (256ull << 20))
		h = 256ull << 20;
	return h;
}

/*
 * The headroom a purger that observes a wake-up latency of lat_us needs
 * below a cgroup v1 limit, whose usage thresholds give it its only lead:
 * pressure_headroom()'s floor, or, if more, an allocator at 2 MiB/ms
 * during twice that latency plus the first purged chunk (2 MiB), or twice
 * the overshoot seen (usage already past the threshold by that much when
 * the purger read it).  At most a quarter of the limit.  The in-process
 * monitor (pressure.c) and `vrangectl coordinate` size theirs with it.
 */
static inline uint64_t pressure_sized_headroom(uint64_t limit, uint64_t lat_us,
					       uint64_t overshoot)
{
	uint64_t h = pressure_headroom(limit);
	uint64_t by_lat = lat_us * (2ull << 20) / 1000 * 2 + (2ull << 20);

	if (by_lat > h)
		h = by_lat;
	if (2 * overshoot > h)
		h = 2 * overshoot;
	if (h > limit / 4 && limit / 4 >= pressure_headroom(limit))
		h = limit / 4;
	return h;
}

/* A decaying maximum (of latencies, overshoots): a larger sample counts at
 * once, a smaller one by 1/16. */
static inline void pressure_decay_max(uint64_t *m, uint64_t sample)
{
	if (sample >= *m)
		*m = sample;
	else
		*m -= (*m - sample) / 16;
}

#endif
