/* SPDX-License-Identifier: MIT */
/*
 * shared_lock.h - a lock that lives in memory shared between processes and
 * survives both a holder that dies and a lock word that was scribbled on
 * (internal).
 *
 * The word holds the owner's thread id (0 = free) and a waiters bit.  A
 * waiter sleeps on the futex in short slices and, between them, asks the
 * kernel whether the owner still exists; a dead owner's lock is taken over
 * and the taker is told so (the data it guards may be torn).  Any value in
 * the word is just a thread id that does not exist, or one that does: the
 * first is taken over, the second times out.  Nothing can crash.
 * Acquiring uncontended is one compare-and-swap; releasing, one exchange.
 */
#ifndef VRANGE_SHARED_LOCK_H
#define VRANGE_SHARED_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "env.h"

struct shared_lock {
	_Atomic uint32_t word;
};

#define SHARED_LOCK_WAITERS 0x80000000u

/* This thread's id, cached (reset in a fork child); 0 until first asked. */
extern __thread uint32_t shared_lock_tid __attribute__((tls_model("initial-exec"))) VR_HIDDEN;

int shared_lock_acquire_slow(struct shared_lock *l, unsigned int timeout_ms) VR_HIDDEN;
void shared_lock_wake(struct shared_lock *l) VR_HIDDEN;

/*
 * 0: acquired; 1: acquired from an owner that died (check what it guards);
 * -EIO: not acquired within timeout_ms (a live owner that does not let go).
 * Async-signal-safe.  The uncontended case is inline: one compare-and-swap.
 */
static inline int shared_lock_acquire(struct shared_lock *l, unsigned int timeout_ms)
{
	uint32_t cur = 0, me = shared_lock_tid;

	if (me && atomic_compare_exchange_strong_explicit(&l->word, &cur, me,
							  memory_order_acquire,
							  memory_order_relaxed))
		return 0;
	return shared_lock_acquire_slow(l, timeout_ms);
}

/* Release; true if somebody may be waiting for it. */
static inline bool shared_lock_release(struct shared_lock *l)
{
	uint32_t old = atomic_exchange_explicit(&l->word, 0, memory_order_release);

	if (old & SHARED_LOCK_WAITERS)
		shared_lock_wake(l);
	return old & SHARED_LOCK_WAITERS;
}

#endif
