/* SPDX-License-Identifier: MIT */
/*
 * cache_hold.c - holding a cache block's pages, and deferring their
 * volatility.
 *
 * A block's word (BS_*) says whether its pages are non-volatile (BS_HOT)
 * and how many holds it has.  While HOT, a hold or release is one CAS on
 * that word: no lock, no mark call (Chromium's discardable memory does the
 * same with its lock word).  Going between HOT and cold takes the block
 * lock: HOT -> cold is a CAS from (HOT, 0 holds) so that no lock-free hold
 * can slip in, then vrange_mark_volatile; cold -> HOT is
 * vrange_mark_nonvolatile, and if that reports VRANGE_PURGED every value on
 * the block is dropped before the word says HOT.  A lock-free hold reads
 * the word with acquire order, so it sees those drops: it never returns a
 * value whose bytes were discarded.  And a page the mark protocol reported
 * INTACT is never discarded afterwards, however purges race.
 *
 * Deferral: the last release does not mark the pages volatile at once; it
 * pushes the block on a bounded FIFO (the ring).  A block used again soon
 * is still HOT: one CAS.  A block pushed out of the ring, and every block
 * on it when anything in the process purges (cache_flush_all, called by
 * the purge engine and by vrange_get_stats), is marked volatile then.  So
 * at most max_pages of released values per cache are non-volatile at any
 * time, and never when a purge looks for volatile memory in this process.
 *
 * Whenever a block is cooled, it takes its place in the purge order at
 * its last release, not at the cooling: the last release stamps the
 * block (rel_seq, the mark clock), and the mark carries that stamp
 * (region_mark_volatile_at).  The ring's order is the order of first
 * pushes (a block used again stays where it was), so cooling in ring
 * order alone would put a value got and released again behind values
 * released long after it (issue 25, item 4).  An earlier stamp is safe
 * for the tree and the page words (they take marks of other threads'
 * clocks, which are not ordered either).  For a purge pass it only
 * matters if the mark lands while the pass runs: every pass flushes the
 * rings before its barrier, so only a block released between that flush
 * and the barrier, then cooled by a ring overflow during the pass, holds
 * a stamp before the barrier that the pass may or may not reach - it
 * was not volatile when the pass began, so either is right.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache.h"
#include "region.h"

int cring_init(struct cring *r, size_t bytes)
{
	r->max_pages = bytes >> vr_page_shift;
	r->cap = r->max_pages ? 64 : 0;
	r->head = r->n = 0;
	r->pages = 0;
	r->q = r->cap ? malloc(r->cap * sizeof(r->q[0])) : NULL;
	if (r->cap && !r->q)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	return 0;
}

void cring_fini(struct cring *r)
{
	free(r->q);
	pthread_mutex_destroy(&r->lock);
}

static size_t bytes_of(const struct cblock *b)
{
	return (size_t)b->npages << vr_page_shift;
}

int chold_take(vrange_cache *c, struct cblock *b)
{
	uint32_t s = atomic_load_explicit(&b->state, memory_order_acquire);
	int ret = 0;

	while (s & BS_HOT)
		if (atomic_compare_exchange_weak_explicit(&b->state, &s, s + BS_HOLD,
				memory_order_acquire, memory_order_acquire))
			return 0;
	pthread_mutex_lock(&b->lock);
	s = atomic_load(&b->state);
	if (s & BS_HOT) { /* another thread warmed it meanwhile */
		atomic_fetch_add(&b->state, BS_HOLD);
		goto out;
	}
	ret = vrange_mark_nonvolatile(b->chunk->r, cblock_off(b), bytes_of(b));
	if (ret < 0)
		goto out;
	if (ret == VRANGE_PURGED)
		cache_block_purged(c, b);
	ret = 0;
	atomic_store_explicit(&b->state, (s & BS_RING) | BS_HOT | BS_HOLD,
			      memory_order_release);
out:
	pthread_mutex_unlock(&b->lock);
	return ret;
}

/* (block lock) Pages of an unheld HOT block go volatile, if no hold came. */
static void cool_locked(struct cblock *b)
{
	uint32_t s = atomic_load(&b->state);

	while (bs_holds(s) == 0 && (s & BS_HOT)) {
		if (atomic_compare_exchange_weak(&b->state, &s, 0)) {
			/* A failed mark leaves them non-volatile: never purged,
			 * never damaged; a later hold marks again harmlessly.
			 * The stamp of the last release: read after the CAS
			 * that saw its hold gone (acquire, seq_cst).  The
			 * cost: the dearest put on it (0: its region's). */
			(void)region_mark_volatile_at(b->chunk->r, cblock_off(b),
					bytes_of(b),
					__atomic_load_n(&b->rel_seq, __ATOMIC_RELAXED),
					atomic_load_explicit(&b->cost,
							     memory_order_relaxed));
			return;
		}
	}
	atomic_fetch_and(&b->state, ~BS_RING);
}

/* A block leaves the ring: cool it unless held (or freed, or reused since
 * it was pushed: then the entry is stale). */
static void ring_pop_one(struct cring_slot o)
{
	/* A generation other than the one pushed is final (it only grows):
	 * the block was freed or reused meanwhile, nothing to cool - and no
	 * lock to take on its cold meta.  Equal, it is checked again locked. */
	if (__atomic_load_n(&o.b->gen, __ATOMIC_RELAXED) != o.gen)
		return;
	pthread_mutex_lock(&o.b->lock);
	if (o.b->chunk && o.b->gen == o.gen)
		cool_locked(o.b);
	pthread_mutex_unlock(&o.b->lock);
}

static void ring_push(vrange_cache *c, struct cblock *b, uint32_t npages,
		      uint32_t gen)
{
	struct cring *r = cache_ring(c);
	struct cring_slot out[16];
	size_t nout = 0;

	pthread_mutex_lock(&r->lock);
	if (r->n == r->cap) {
		size_t cap = r->cap * 2;
		struct cring_slot *q = malloc(cap * sizeof(*q));

		if (q) {
			for (size_t i = 0; i < r->n; i++)
				q[i] = r->q[(r->head + i) % r->cap];
			free(r->q);
			r->q = q;
			r->cap = cap;
			r->head = 0;
		}
	}
	while (r->n && (r->n == r->cap || r->pages + npages > r->max_pages) &&
	       nout < 16) {
		struct cring_slot *o = &r->q[r->head];

		out[nout++] = *o;
		r->pages -= o->npages;
		r->head = (r->head + 1) % r->cap;
		r->n--;
	}
	if (r->n < r->cap) {
		r->q[(r->head + r->n) % r->cap] = (struct cring_slot){ b, npages, gen };
		r->n++;
		r->pages += npages;
	} else { /* no room (no memory to grow): cool it now */
		out[nout++] = (struct cring_slot){ b, npages, gen };
	}
	pthread_mutex_unlock(&r->lock);
	for (size_t i = 0; i < nout; i++)
		ring_pop_one(out[i]);
}

/* Drop a hold: -EINVAL none to drop (check only), 1 the last hold of a
 * removed one-value block (nothing else done: the caller frees), else 0. */
static int drop(vrange_cache *c, struct cblock *b, bool check)
{
	bool defer = cache_ring(c)->max_pages > 0;
	/* Read while this hold keeps the block from being freed and reused. */
	uint32_t npages = b->npages, gen = b->gen;
	uint32_t s = atomic_load_explicit(&b->state, memory_order_relaxed), n;

	for (;;) {
		if (check && bs_holds(s) == 0)
			return -EINVAL;
		n = s - BS_HOLD;
		/* Probably the last hold: the block's place in the purge
		 * order is now, whenever it is cooled.  Written before the
		 * CAS that publishes the count; a hold that comes between
		 * only means a later last release stamps again. */
		if (bs_holds(n) == 0 && !(n & BS_GONE))
			__atomic_store_n(&b->rel_seq, vr_next_seq(), __ATOMIC_RELAXED);
		if (bs_holds(n) == 0 && !defer && !(n & BS_GONE))
			break; /* eager: the last hold cools the block */
		/* The last hold pushes the block on the ring, once: the flag
		 * goes with the count in one word, so only one pusher wins. */
		if (bs_holds(n) == 0 && !(n & BS_GONE))
			n |= BS_RING;
		/* seq_cst, not just release: a remover that emptied the block
		 * meanwhile must see this hold gone, or this caller its empty
		 * count (vrange_cache_release); free on x86, a locked op. */
		if (atomic_compare_exchange_weak_explicit(&b->state, &s, n,
				memory_order_seq_cst, memory_order_relaxed)) {
			if (bs_holds(n) == 0 && (n & BS_GONE))
				return 1;
			if (bs_holds(n) == 0 && !(s & BS_RING))
				ring_push(c, b, npages, gen);
			return 0;
		}
	}
	pthread_mutex_lock(&b->lock);
	atomic_fetch_sub(&b->state, BS_HOLD);
	cool_locked(b);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

void chold_drop(vrange_cache *c, struct cblock *b)
{
	(void)drop(c, b, false);
}

int chold_release_value(vrange_cache *c, struct cblock *b)
{
	return drop(c, b, true);
}

void cring_flush(vrange_cache *c)
{
	struct cring *r = cache_ring(c);

	for (;;) {
		struct cring_slot batch[64];
		size_t k = 0;

		pthread_mutex_lock(&r->lock);
		while (r->n && k < 64) {
			batch[k++] = r->q[r->head];
			r->pages -= r->q[r->head].npages;
			r->head = (r->head + 1) % r->cap;
			r->n--;
		}
		pthread_mutex_unlock(&r->lock);
		if (!k)
			return;
		for (size_t i = 0; i < k; i++)
			ring_pop_one(batch[i]);
	}
}
