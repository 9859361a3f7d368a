/* SPDX-License-Identifier: MIT */
/*
 * shared_lock.h - a lock that lives in memory shared between processes and
 * survives both a holder that dies and a lock word that was scribbled on
 * (internal).
 *
 * The word holds the owner's thread id (0 = free), a waiters bit, and in
 * its upper half a tag of the owner thread's start time.  A waiter sleeps
 * on the futex (the lower half) in short slices and, between them, asks
 * the kernel whether the owner is still running: a thread id that no
 * longer exists, that names a zombie (dead, not yet reaped), or that names
 * a thread started at another time (the id was reused) is a dead owner.
 * A dead owner's lock is taken over and the taker is told so (the data it
 * guards may be torn).  Any value in the word is just a thread that is not
 * running, or one that is: the first is taken over, the second times out.
 * Nothing can crash.  Acquiring uncontended is one compare-and-swap;
 * releasing, one exchange; neither makes a system call.
 */
#ifndef VRANGE_SHARED_LOCK_H
#define VRANGE_SHARED_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "env.h"

struct shared_lock {
	/* bits 0-29 owner tid, 31 waiters (the futex word is this half);
	 * bits 32-63 the owner's start-time tag, 0 = unknown. */
	_Atomic uint64_t word;
};

#define SHARED_LOCK_WAITERS 0x80000000u

/*
 * This thread's lock word value (tid | tag << 32), cached per thread
 * (reset in a fork child); 0 until first computed on a slow path.
 */
extern __thread uint64_t shared_lock_me __attribute__((tls_model("initial-exec"))) VR_HIDDEN;

int shared_lock_acquire_slow(struct shared_lock *l, unsigned int timeout_ms) VR_HIDDEN;
void shared_lock_wake(struct shared_lock *l) VR_HIDDEN;

/*
 * 0: acquired; 1: acquired from an owner that died (check what it guards);
 * -EIO: not acquired within timeout_ms (a live owner that does not let go).
 * Async-signal-safe.  The uncontended case is inline: one compare-and-swap.
 */
static inline int shared_lock_acquire(struct shared_lock *l, unsigned int timeout_ms)
{
	uint64_t cur = 0, me = shared_lock_me;

	if (me && atomic_compare_exchange_strong_explicit(&l->word, &cur, me,
							  memory_order_acquire,
							  memory_order_relaxed))
		return 0;
	return shared_lock_acquire_slow(l, timeout_ms);
}

/* Release; true if somebody may be waiting for it. */
static inline bool shared_lock_release(struct shared_lock *l)
{
	uint64_t old = atomic_exchange_explicit(&l->word, 0, memory_order_release);

	if (old & SHARED_LOCK_WAITERS)
		shared_lock_wake(l);
	return old & SHARED_LOCK_WAITERS;
}

#endif
