/* SPDX-License-Identifier: MIT */
/* shared_lock.c - see shared_lock.h. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shared_lock.h"

#define WAITERS SHARED_LOCK_WAITERS
#define TID_MASK 0x3fffffffu /* pid_max is at most 2^22 */
#define SLICE_MS 10u

/* This thread's id, cached: the uncontended path makes no system call. */
__thread uint32_t shared_lock_tid __attribute__((tls_model("initial-exec")));

/* fork() copies the cache into a child whose thread has another id. */
static void forget_tid(void)
{
	shared_lock_tid = 0;
}

__attribute__((constructor)) static void shared_lock_init(void)
{
	pthread_atfork(NULL, NULL, forget_tid);
}

static uint32_t self(void)
{
	if (!shared_lock_tid)
		shared_lock_tid = (uint32_t)syscall(SYS_gettid);
	return shared_lock_tid;
}

static void futex_wait_ms(_Atomic uint32_t *w, uint32_t val, unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* Does the thread that owns word still exist? */
static int owner_alive(uint32_t word)
{
	pid_t tid = (pid_t)(word & TID_MASK);

	if (tid <= 0)
		return 0;
	return kill(tid, 0) == 0 || errno == EPERM;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int shared_lock_acquire_slow(struct shared_lock *l, unsigned int timeout_ms)
{
	uint32_t me = self(), cur = 0;
	uint64_t deadline = 0;

	if (atomic_compare_exchange_strong_explicit(&l->word, &cur, me,
						    memory_order_acquire,
						    memory_order_relaxed))
		return 0;
	for (;;) {
		if (cur == 0) {
			/* Free again: take it, keeping others' wake-ups coming. */
			if (atomic_compare_exchange_strong_explicit(
				    &l->word, &cur, me | WAITERS,
				    memory_order_acquire, memory_order_relaxed))
				return 0;
			continue;
		}
		/* We never lock twice, so our own id there is a scribble. */
		if ((cur & TID_MASK) == me || !owner_alive(cur)) {
			if (atomic_compare_exchange_strong_explicit(
				    &l->word, &cur, me | WAITERS,
				    memory_order_acquire, memory_order_relaxed))
				return 1;
			continue;
		}
		/* Real time, not slices: every release wakes us early. */
		if (!deadline)
			deadline = now_ms() + timeout_ms;
		else if (now_ms() > deadline)
			return -EIO;
		if (!(cur & WAITERS) &&
		    !atomic_compare_exchange_strong_explicit(
			    &l->word, &cur, cur | WAITERS,
			    memory_order_relaxed, memory_order_relaxed))
			continue;
		futex_wait_ms(&l->word, cur | WAITERS, SLICE_MS);
		cur = atomic_load_explicit(&l->word, memory_order_relaxed);
	}
}

void shared_lock_wake(struct shared_lock *l)
{
	syscall(SYS_futex, &l->word, FUTEX_WAKE, 1, NULL, NULL, 0);
}
