/* SPDX-License-Identifier: MIT */
/*
 * seqlock.h - lookups that take no lock (internal).
 *
 * The address tables (regions, known mappings) are read on every vrange()
 * call, also from SIGBUS handlers, and changed rarely.  Readers take a
 * snapshot of the sequence, read, and retry if a writer ran meanwhile: no
 * atomic read-modify-write, nothing a handler could deadlock on.  Writers
 * serialise among themselves with a mutex.  Arrays a reader may still be
 * scanning are never freed while the process runs (growth retires them),
 * and readers copy entries by value, so a retried read never touches freed
 * memory.
 */
#ifndef VRANGE_SEQLOCK_H
#define VRANGE_SEQLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"

struct seqlock {
	_Atomic uint32_t seq;
};

static inline uint32_t seq_read_begin(struct seqlock *s)
{
	uint32_t v;

	while ((v = atomic_load_explicit(&s->seq, memory_order_acquire)) & 1)
		;
	return v;
}

static inline bool seq_read_retry(struct seqlock *s, uint32_t v)
{
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&s->seq, memory_order_relaxed) != v;
}

static inline void seq_write_begin(struct seqlock *s)
{
	atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static inline void seq_write_end(struct seqlock *s)
{
	atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
			      memory_order_release);
}

/*
 * A sorted array read under a seqlock: readers index it as an array of
 * their entry type (SEQ_ARRAY_AT); writers, holding their own mutex, insert
 * and remove through the functions below, which bump the sequence around
 * the change.  An array that must grow is replaced by a bigger copy and the
 * old one retired, never freed: a reader may still be scanning it.
 */
struct seq_array {
	size_t n, cap;
	struct seq_array *retired;
	max_align_t e[];
};

#define SEQ_ARRAY_AT(a, type) ((type *)(void *)(a)->e)

/* Put the size-byte entry at index i of *cur (grown if need be): 0 or -ENOMEM. */
int seq_array_insert(struct seq_array *_Atomic *cur, struct seqlock *seq,
		     size_t i, const void *entry, size_t size) VR_HIDDEN;
/* Remove the entry at index i of a. */
void seq_array_remove(struct seq_array *a, struct seqlock *seq, size_t i,
		      size_t size) VR_HIDDEN;

#endif
