/* SPDX-License-Identifier: MIT */
/*
 * mark_clock.h - the age of a volatile mark (internal): a stamp per mark,
 * strictly increasing in each thread; the barrier a purge pass orders
 * against; and the tick that spares a marking thread its clock read while
 * a ticker (the monitor's thread) runs.  mark_clock.c says how stamps
 * order and why the tick keeps that order.
 */
#ifndef VRANGE_MARK_CLOCK_H
#define VRANGE_MARK_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#ifndef VR_HIDDEN
#define VR_HIDDEN __attribute__((visibility("hidden")))
#endif

/* The tick's states; the header's VRANGE_INLINE_TICK_* are the same. */
enum {
	VR_TICK_SELF = 0,   /* no ticker: every stamp reads the clock */
	VR_TICK_IDLE = 1,   /* a ticker, asleep: a stamp reads the clock and
			     * wakes it (the inline mark takes the call) */
	VR_TICK_MARKED = 2, /* ticking, a stamp since its last tick: stamps
			     * take the tick's time */
	VR_TICK_ARMED = 3,  /* ticking, no stamp since: the next says MARKED */
};

/* What every marking thread reads, on a line pair of its own (written by
 * barriers, by the ticker once a tick and by one stamp a tick). */
struct vr_clock {
	_Atomic uint64_t floor; /* every stamp is above it: the last barrier's */
	_Atomic uint64_t now;   /* the coarse clock as the ticker last read it */
	_Atomic uint32_t state; /* VR_TICK_* */
};
extern struct vr_clock vr_clock VR_HIDDEN;

/* The vDSO's clock_gettime where it answers the coarse clock, else NULL. */
extern int (*vr_vdso_gettime)(clockid_t, struct timespec *) VR_HIDDEN;
/* The calling thread's last stamp. */
extern __thread uint64_t vr_seq_last __attribute__((tls_model("initial-exec"))) VR_HIDDEN;

/* Start-up (vr_init_basic): the vDSO's clock, the tick's length. */
void vr_mark_clock_init(void) VR_HIDDEN;

/* CLOCK_MONOTONIC_COARSE in nanoseconds, through the vDSO where found. */
static inline uint64_t vr_coarse_ns(void)
{
	struct timespec ts;
	int (*get)(clockid_t, struct timespec *) = vr_vdso_gettime;

	if (!get || get(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* now made a stamp: above the floor and the thread's last stamp. */
static inline uint64_t vr_stamp_after(uint64_t now)
{
	uint64_t floor = atomic_load_explicit(&vr_clock.floor, memory_order_acquire);

	if (now <= floor)
		now = floor + 1;
	vr_seq_last = now > vr_seq_last ? now : vr_seq_last + 1;
	return vr_seq_last;
}

/* The ticker is asleep and a stamp read now: say MARKED and wake it. */
void vr_tick_wake(uint64_t now) VR_HIDDEN;

/*
 * A stamp for "when was this marked", inline for the lock-free mark (the
 * header's inline mark does the same): the tick's time while the ticker
 * runs, else the coarse clock; the clock all the same on every 256th
 * stamp of a thread, so a ticker kept from running leaves no busy
 * thread's stamps behind for long.
 */
static inline uint64_t vr_next_seq_inline(void)
{
	uint32_t st = atomic_load_explicit(&vr_clock.state, memory_order_relaxed);
	uint64_t now;

	if (st == VR_TICK_ARMED &&
	    atomic_compare_exchange_strong_explicit(&vr_clock.state, &st, VR_TICK_MARKED,
						    memory_order_relaxed,
						    memory_order_relaxed))
		st = VR_TICK_MARKED;
	if (st == VR_TICK_MARKED && (vr_seq_last & 255) != 255)
		return vr_stamp_after(atomic_load_explicit(&vr_clock.now, memory_order_relaxed));
	now = vr_coarse_ns();
	if (st == VR_TICK_IDLE)
		vr_tick_wake(now);
	return vr_stamp_after(now);
}

/* The same, out of line. */
uint64_t vr_next_seq(void) VR_HIDDEN;

/* A stamp later than every stamp any thread had taken before the call, and
 * after which the calling thread's stamps keep growing (a purge pass's
 * start: "marked after the pass began" is "seq > this"). */
uint64_t vr_seq_barrier(void) VR_HIDDEN;

/*
 * The ticker.  vr_tick_attach(waker): a ticker runs from now on, and a
 * stamp that finds it asleep calls waker (async-signal-safe: a stamp may
 * be taken in a signal handler); NULL: it runs no more.  vr_tick_step():
 * the ticker's turn, at each of its wake-ups: refresh the time while
 * stamps are taken; the milliseconds until its next turn, or -1 (asleep
 * until a stamp wakes it).
 */
void vr_tick_attach(void (*waker)(void)) VR_HIDDEN;
int vr_tick_step(void) VR_HIDDEN;

#endif
