/* SPDX-License-Identifier: MIT */
/* fd_hint.c - the file layer's per-thread hint (see fd_hint.h). */
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd_hint.h"

#define HINT_SLOTS 64

/* A line each: every call writes its thread's slot twice. */
static struct {
	_Atomic(struct vfile *) f;
	char pad[64 - sizeof(void *)];
} hazard[HINT_SLOTS] __attribute__((aligned(64)));

static _Atomic uint64_t slots_busy;  /* hazard slots of live threads */
static _Atomic uint64_t generation;  /* forgets begun */
static bool membarrier_ok;           /* set once, before any hint exists */
static pthread_key_t slot_key;
static bool slot_key_ok;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static __thread struct {
	struct vfile *f;
	dev_t dev;
	ino_t ino;
	uint64_t gen;
	int slot; /* hazard slot + 1; 0: none yet; -1: none to be had */
} hint __attribute__((tls_model("initial-exec")));

void (*fd_hint_test_pinned)(void);

/* At thread exit: its slot goes back (the key's value is slot + 1; the
 * slot is clear: no call is under way). */
static void slot_put(void *v)
{
	atomic_fetch_and(&slots_busy, ~(1ull << ((uintptr_t)v - 1)));
}

static void init(void)
{
	/* Registered, and answering: a later call cannot fail then. */
	membarrier_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
				0, 0) == 0 &&
			syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
	slot_key_ok = pthread_key_create(&slot_key, slot_put) == 0;
	if (!slot_key_ok)
		atomic_store(&slots_busy, UINT64_MAX); /* no slot is ever given */
}

/* A library unloaded: no thread's exit may call into it any more. */
__attribute__((destructor)) static void fini(void)
{
	if (slot_key_ok)
		pthread_key_delete(slot_key);
	slot_key_ok = false;
}

void fd_hint_init(void)
{
	pthread_once(&init_once, init);
}

/* This thread's slot + 1, claiming one: -1 if none is free. */
static int my_slot(void)
{
	uint64_t busy = atomic_load(&slots_busy);
	unsigned int s;

	if (hint.slot)
		return hint.slot;
	do {
		if (busy == UINT64_MAX)
			return hint.slot = -1;
		s = (unsigned int)__builtin_ctzll(~busy);
	} while (!atomic_compare_exchange_weak(&slots_busy, &busy, busy | 1ull << s));
	if (pthread_setspecific(slot_key, (void *)(uintptr_t)(s + 1)) != 0) {
		atomic_fetch_and(&slots_busy, ~(1ull << s));
		return hint.slot = -1;
	}
	return hint.slot = (int)s + 1;
}

struct vfile *fd_hint_pin(dev_t dev, ino_t ino)
{
	struct vfile *f = hint.f;
	_Atomic(struct vfile *) *s;

	if (!f || hint.dev != dev || hint.ino != ino || hint.slot <= 0)
		return NULL;
	s = &hazard[hint.slot - 1].f;
	atomic_store_explicit(s, f, memory_order_relaxed);
	if (membarrier_ok)
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&generation, memory_order_relaxed) != hint.gen) {
		atomic_store_explicit(s, NULL, memory_order_release);
		hint.f = NULL;
		return NULL;
	}
	if (fd_hint_test_pinned)
		fd_hint_test_pinned();
	return f;
}

void fd_hint_unpin(void)
{
	/* Release: what the call did with the file comes before a forget
	 * that sees the slot clear. */
	atomic_store_explicit(&hazard[hint.slot - 1].f, NULL, memory_order_release);
}

uint64_t fd_hint_gen(void)
{
	return atomic_load_explicit(&generation, memory_order_acquire);
}

void fd_hint_note(struct vfile *f, dev_t dev, ino_t ino, uint64_t gen)
{
	if (my_slot() <= 0)
		return;
	hint.f = f;
	hint.dev = dev;
	hint.ino = ino;
	hint.gen = gen;
}

void fd_hint_forgotten(struct vfile *f)
{
	fd_hint_init(); /* membarrier_ok as every user saw it */
	atomic_fetch_add(&generation, 1);
	/* Every thread's store to its slot before its read of the
	 * generation is now seen here, or that read sees the bump. */
	if (membarrier_ok &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
		usleep(1000); /* never seen: a store buffer drains far sooner */
	for (unsigned int i = 0; i < HINT_SLOTS; i++)
		while (atomic_load_explicit(&hazard[i].f, memory_order_acquire) == f)
			sched_yield();
}

void fd_hint_fork_child(void)
{
	/* The child's one thread keeps its slot (its key's value is copied);
	 * the parent's other threads are not here: their slots are free, and
	 * a file one of them had pinned is not waited for. */
	for (unsigned int i = 0; i < HINT_SLOTS; i++)
		atomic_store(&hazard[i].f, NULL);
	atomic_store(&slots_busy, hint.slot > 0 ? 1ull << (hint.slot - 1) : 0);
	atomic_fetch_add(&generation, 1);
	hint.f = NULL;
}
