/* SPDX-License-Identifier: MIT */
/*
 * cache_pages.c - the pages a purgeable cache keeps its values on.
 *
 * Memory comes from regions ("chunks", 8 MiB or a large value's size) in
 * ZERO mode: the cache never touches a page while it is volatile, so it
 * needs no SIGBUS, and a purge is a plain hole punch in the purge order.
 * Chunks are carved into blocks: a slab page of one size class (powers of
 * two from 16 bytes to half a page) or the first-fit run of pages of one
 * large value.  Block metadata lives in malloc'd memory, never on the
 * volatile pages; metas are recycled, not freed, until the cache goes, so
 * a stale pointer handed to release always finds a valid lock to take.
 *
 * Every free page is in one of three states: fresh (never used, not
 * resident: nothing to give back, left non-volatile), volatile (in the
 * purge order until reused), or pooled (freed while still non-volatile,
 * kept so for the next value: up to pool_max pages, made volatile by
 * cpages_flush_pool before any purge).  A one-page block prefers a fresh
 * or pooled page, which needs no mark call to hold.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "cache.h"
#include "region.h"

#define CHUNK_BYTES (8u << 20)

static uint32_t chunk_pages(void)
{
	size_t n = CHUNK_BYTES >> vr_page_shift;

	return n < 64 ? 64 : (uint32_t)n;
}

/* (allocator lock) Count bytes; stats read them without the lock. */
static void counter_add(_Atomic uint64_t *c, int64_t delta)
{
	uint64_t v = atomic_load_explicit(c, memory_order_relaxed);

	atomic_store_explicit(c, v + (uint64_t)delta, memory_order_relaxed);
}

static void bytes_add(struct cpages *p, int64_t delta)
{
	counter_add(&p->bytes, delta);
}

/* (block lock) Change the count of used slots; release reads it without. */
static uint32_t used_add(struct cblock *b, int d)
{
	uint32_t v = atomic_load_explicit(&b->used, memory_order_relaxed) + (uint32_t)d;

	/* seq_cst: pairs with the release path, which drops its block hold
	 * and then reads this (store-load, see vrange_cache_release). */
	atomic_store(&b->used, v);
	return v;
}

int cpages_init(struct cpages *p, const char *name, int prio, size_t pool_bytes)
{
	size_t half = vr_page_size / 2;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	snprintf(p->name, sizeof(p->name), "vrange-cache:%s", name ? name : "");
	p->prio = prio;
	p->pool_max = pool_bytes >> vr_page_shift;
	while (p->nclasses < CPAGES_MAX_CLASSES &&
	       ((size_t)16 << p->nclasses) <= half)
		p->nclasses++;
	return 0;
}

static void free_block_list(struct cblock *b)
{
	while (b) {
		struct cblock *next = b->next;

		pthread_mutex_destroy(&b->lock);
		free(b);
		b = next;
	}
}

void cpages_fini(struct cpages *p)
{
	struct ctable *t = atomic_load(&p->table);

	for (size_t i = 0; i < p->nchunks; i++) {
		struct cchunk *ch = p->chunks[i];

		for (uint32_t pg = 0; pg < ch->npages; pg++) {
			struct cblock *b = atomic_load(&ch->page_block[pg]);

			if (b) {
				pthread_mutex_destroy(&b->lock);
				free(b);
			}
		}
		/* Uncounted first: the stats may overcount, never underflow. */
		cache_region_note(-1);
		vrange_region_destroy(ch->r);
		free(ch->used);
		free(ch->vol);
		free(ch->pool);
		free(ch->page_block);
		free(ch);
	}
	for (unsigned int i = 0; i <= CPAGES_MAX_CLASSES; i++)
		free_block_list(p->spare[i]);
	while (t) {
		struct ctable *old = t->retired;

		free(t);
		t = old;
	}
	free(p->chunks);
	pthread_mutex_destroy(&p->lock);
}

bool cpages_busy(struct cpages *p)
{
	bool busy = false;

	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nchunks && !busy; i++) {
		struct cchunk *ch = p->chunks[i];

		for (uint32_t pg = 0; pg < ch->npages && !busy; pg++) {
			struct cblock *b = atomic_load(&ch->page_block[pg]);

			if (b)
				busy = bs_holds(atomic_load(&b->state)) > 0;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return busy;
}

/* Publish a new sorted snapshot with ch added (allocator lock). */
static int table_add(struct cpages *p, struct cchunk *ch)
{
	struct ctable *old = atomic_load(&p->table), *t;
	size_t n = old ? old->n : 0, i = 0, j = 0;

	t = malloc(sizeof(*t) + (n + 1) * sizeof(t->c[0]));
	if (!t)
		return -ENOMEM;
	t->n = n + 1;
	t->retired = old;
	for (; i < n && old->c[i]->base < ch->base; i++)
		t->c[j++] = old->c[i];
	t->c[j++] = ch;
	for (; i < n; i++)
		t->c[j++] = old->c[i];
	bytes_add(p, sizeof(*t) + t->n * sizeof(t->c[0]));
	/* Readers may still scan old: it stays allocated until fini. */
	atomic_store_explicit(&p->table, t, memory_order_release);
	return 0;
}

static int chunk_new(struct cpages *p, uint32_t npages, struct cchunk **out)
{
	struct cchunk *ch = calloc(1, sizeof(*ch));
	size_t words = (npages + 63) / 64;
	int ret = -ENOMEM;

	if (p->nchunks == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 8;
		struct cchunk **a = realloc(p->chunks, cap * sizeof(*a));

		if (!a)
			goto fail;
		p->chunks = a;
		p->cap = cap;
	}
	if (!ch)
		goto fail;
	ch->used = calloc(words, sizeof(uint64_t));
	ch->vol = calloc(words, sizeof(uint64_t));
	ch->pool = calloc(words, sizeof(uint64_t));
	ch->page_block = calloc(npages, sizeof(ch->page_block[0]));
	if (!ch->used || !ch->vol || !ch->pool || !ch->page_block)
		goto fail;
	ret = vrange_region_create(p->name, (size_t)npages << vr_page_shift,
				   VRANGE_ACCESS_ZERO, &ch->r);
	if (ret < 0)
		goto fail;
	vrange_region_set_priority(ch->r, p->prio);
	vrange_region_set_cost(ch->r, p->cost ? p->cost : 1);
	ch->base = vrange_region_base(ch->r);
	ch->npages = ch->free_pages = npages;
	ret = table_add(p, ch);
	if (ret < 0) {
		vrange_region_destroy(ch->r);
		goto fail;
	}
	cache_region_note(1);
	bytes_add(p, sizeof(*ch) + 3 * words * 8 +
			 npages * sizeof(ch->page_block[0]));
	p->chunks[p->nchunks++] = ch;
	*out = ch;
	return 0;
fail:
	if (ch) {
		free(ch->used);
		free(ch->vol);
		free(ch->pool);
		free(ch->page_block);
	}
	free(ch);
	return ret;
}

static bool bit_get(const uint64_t *w, uint32_t i)
{
	return (w[i / 64] >> (i % 64)) & 1;
}

static void bits_set(uint64_t *w, uint32_t i, uint32_t n, bool on)
{
	for (uint32_t k = i; k < i + n; k++) {
		if (on)
			w[k / 64] |= 1ull << (k % 64);
		else
			w[k / 64] &= ~(1ull << (k % 64));
	}
}

/* First run of n free pages in ch, or -1. */
static int64_t chunk_fit(const struct cchunk *ch, uint32_t n)
{
	uint32_t run = 0;

	if (ch->free_pages < n)
		return -1;
	for (uint32_t w = 0; n == 1 && w < (ch->npages + 63) / 64; w++) {
		uint32_t i;

		if (ch->used[w] == UINT64_MAX)
			continue;
		i = w * 64 + (uint32_t)__builtin_ctzll(~ch->used[w]);
		return i < ch->npages ? (int64_t)i : -1;
	}
	for (uint32_t i = 0; i < ch->npages; i++) {
		if (run == 0 && (i % 64) == 0 && ch->used[i / 64] == UINT64_MAX) {
			i += 63;
			continue;
		}
		run = bit_get(ch->used, i) ? 0 : run + 1;
		if (run == n)
			return (int64_t)(i + 1 - n);
	}
	return -1;
}

/* A free page that needs no mark call (fresh or pooled) in ch, or -1. */
static int64_t chunk_hot_page(const struct cchunk *ch)
{
	for (uint32_t w = 0; w < (ch->npages + 63) / 64; w++) {
		uint64_t m = ~(ch->used[w] | ch->vol[w]);
		uint32_t i;

		if (!m)
			continue;
		i = w * 64 + (uint32_t)__builtin_ctzll(m);
		return i < ch->npages ? (int64_t)i : -1;
	}
	return -1;
}

/* Any of the pages [i, i + n) marked volatile (their hold must mark). */
static bool any_bit(const uint64_t *w, uint32_t i, uint32_t n)
{
	for (uint32_t k = i; k < i + n; k++)
		if (bit_get(w, k))
			return true;
	return false;
}

/* n pages somewhere, a new chunk if need be (allocator lock).  *hot: none
 * of them is volatile. */
static int pages_take(struct cpages *p, uint32_t n, struct cchunk **out,
		      uint32_t *first, bool *hot)
{
	struct cchunk *ch = NULL;
	uint32_t cp = chunk_pages();
	int64_t at = -1;
	int ret;

	/* Newest chunks first: they are the likeliest to have room. */
	for (size_t i = p->nchunks; n == 1 && i-- > 0 && at < 0;) {
		ch = p->chunks[i];
		at = ch->free_pages ? chunk_hot_page(ch) : -1;
	}
	for (size_t i = p->nchunks; i-- > 0 && at < 0;) {
		ch = p->chunks[i];
		at = chunk_fit(ch, n);
	}
	if (at < 0) {
		ret = chunk_new(p, n > cp ? n : cp, &ch);
		if (ret < 0)
			return ret;
		at = 0;
	}
	*hot = !any_bit(ch->vol, (uint32_t)at, n);
	for (uint32_t k = (uint32_t)at; k < (uint32_t)at + n; k++)
		p->pool_pages -= bit_get(ch->pool, k);
	bits_set(ch->pool, (uint32_t)at, n, false);
	bits_set(ch->vol, (uint32_t)at, n, false);
	bits_set(ch->used, (uint32_t)at, n, true);
	ch->free_pages -= n;
	*out = ch;
	*first = (uint32_t)at;
	return 0;
}

static struct cblock *meta_get(struct cpages *p, int cls, uint32_t nslots)
{
	unsigned int list = cls < 0 ? CPAGES_MAX_CLASSES : (unsigned int)cls;
	struct cblock *b = p->spare[list];

	if (b) {
		p->spare[list] = b->next;
	} else {
		/* Whole cache lines: the words of blocks used by different
		 * threads must not share one. */
		size_t sz = (sizeof(*b) + nslots * sizeof(b->slot[0]) + 63) & ~(size_t)63;

		b = aligned_alloc(64, sz);
		if (!b)
			return NULL;
		memset(b, 0, sz);
		pthread_mutex_init(&b->lock, NULL);
		bytes_add(p, sz);
	}
	return b;
}

/*
 * A new block of class cls (-1: large, npages pages) with e in its first
 * slot; on pages that need no mark, already held once for e (*held).
 */
static int block_new(struct cpages *p, int cls, uint32_t npages,
		     uint32_t slot_size, struct centry *e, struct cblock **out,
		     bool *held)
{
	uint32_t nslots = cls < 0 ? 1 : (uint32_t)(vr_page_size / slot_size);
	struct cblock *b = meta_get(p, cls, nslots);
	struct cchunk *ch;
	uint32_t first;
	bool hot;
	int ret;

	if (!b)
		return -ENOMEM;
	ret = pages_take(p, npages, &ch, &first, &hot);
	if (ret < 0) {
		unsigned int list = cls < 0 ? CPAGES_MAX_CLASSES : (unsigned int)cls;

		b->next = p->spare[list];
		p->spare[list] = b;
		return ret;
	}
	pthread_mutex_lock(&b->lock);
	b->chunk = ch;
	b->first = first;
	b->npages = npages;
	b->slot_size = slot_size;
	b->nslots = nslots;
	atomic_store_explicit(&b->used, 0, memory_order_relaxed);
	b->cls = cls;
	/* Read unlocked by ring pops (cache_hold.c): a plain store would race. */
	__atomic_store_n(&b->gen, b->gen + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&b->rel_seq, 0, __ATOMIC_RELAXED); /* 0: now */
	/* Pages never marked (or pooled) are held without a mark call. */
	atomic_store(&b->state, hot ? BS_HOT | BS_HOLD : 0);
	*held = hot;
	b->listed = false;
	b->next = b->prev = NULL;
	memset(b->slot, 0, nslots * sizeof(b->slot[0]));
	atomic_store(&b->slot[0], e);
	atomic_store_explicit(&b->used, 1, memory_order_relaxed);
	pthread_mutex_unlock(&b->lock);
	atomic_store_explicit(&ch->page_block[first], b, memory_order_release);
	counter_add(&p->page_bytes, (int64_t)npages << vr_page_shift);
	*out = b;
	return 0;
}

static void list_add(struct cpages *p, struct cblock *b)
{
	b->prev = NULL;
	b->next = p->partial[b->cls];
	if (b->next)
		b->next->prev = b;
	p->partial[b->cls] = b;
	b->listed = true;
}

static void list_del(struct cpages *p, struct cblock *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		p->partial[b->cls] = b->next;
	if (b->next)
		b->next->prev = b->prev;
	b->next = b->prev = NULL;
	b->listed = false;
}

static unsigned int class_of(size_t vlen)
{
	unsigned int c = 0;

	while (((size_t)16 << c) < vlen)
		c++;
	return c;
}

int cpages_alloc(struct cpages *p, size_t vlen, struct centry *e,
		 struct cblock **out, uint32_t *slot, bool *held)
{
	struct cblock *b = NULL;
	uint32_t i = 0;
	int ret = 0;

	*held = false;
	pthread_mutex_lock(&p->lock);
	if (vlen <= vr_page_size / 2) {
		unsigned int cls = class_of(vlen);

		b = p->partial[cls];
		if (!b) {
			ret = block_new(p, (int)cls, 1, 16u << cls, e, &b, held);
			if (ret == 0 && b->nslots > 1)
				list_add(p, b);
			if (ret == 0) {
				*out = b;
				*slot = 0;
			}
			goto out;
		}
	} else {
		size_t n = (vlen + vr_page_size - 1) >> vr_page_shift;

		/* One slot: the pointer must be the start (slot_size 0). */
		ret = n > UINT32_MAX / 2 ? -ENOMEM :
		      block_new(p, -1, (uint32_t)n, 0, e, &b, held);
		if (ret == 0) {
			*out = b;
			*slot = 0;
		}
		goto out;
	}
	{
		bool full;

		pthread_mutex_lock(&b->lock);
		while (b->slot[i])
			i++;
		atomic_store(&b->slot[i], e);
		used_add(b, 1);
		full = atomic_load(&b->used) == b->nslots;
		pthread_mutex_unlock(&b->lock);
		if (b->listed && full)
			list_del(p, b);
		*out = b;
		*slot = i;
	}
out:
	pthread_mutex_unlock(&p->lock);
	return ret;
}

bool cpages_fits(const struct cblock *b, size_t vlen)
{
	if (vlen <= vr_page_size / 2)
		return b->cls >= 0 && class_of(vlen) == (unsigned int)b->cls;
	return b->cls < 0 &&
	       ((vlen + vr_page_size - 1) >> vr_page_shift) == b->npages;
}

bool cpages_clear_slot(struct cblock *b, uint32_t slot)
{
	atomic_store(&b->slot[slot], NULL);
	uint32_t used = used_add(b, -1);

	return used == 0 || (b->cls >= 0 && used == b->nslots - 1);
}

/* Give an empty, unheld block's pages back (allocator and block lock). */
static void block_free(struct cpages *p, struct cblock *b)
{
	struct cchunk *ch = b->chunk;
	unsigned int list = b->cls < 0 ? CPAGES_MAX_CLASSES : (unsigned int)b->cls;

	if (b->listed)
		list_del(p, b);
	atomic_store_explicit(&ch->page_block[b->first], NULL, memory_order_release);
	bits_set(ch->used, b->first, b->npages, false);
	ch->free_pages += b->npages;
	counter_add(&p->page_bytes, -((int64_t)b->npages << vr_page_shift));
	if (!(atomic_load(&b->state) & BS_HOT)) {
		/* Volatile already: they wait in the purge order. */
		bits_set(ch->vol, b->first, b->npages, true);
	} else if (p->pool_pages + b->npages <= p->pool_max) {
		bits_set(ch->pool, b->first, b->npages, true);
		p->pool_pages += b->npages;
	} else {
		/* A failed mark leaves them non-volatile: only never purged. */
		if (vrange_mark_volatile(ch->r, cblock_off(b),
					 (size_t)b->npages << vr_page_shift) == 0)
			bits_set(ch->vol, b->first, b->npages, true);
	}
	atomic_store_explicit(&b->state, 0, memory_order_relaxed);
	atomic_store_explicit(&b->cost, 0, memory_order_relaxed);
	b->chunk = NULL;
	b->next = p->spare[list];
	p->spare[list] = b;
}

void cpages_requeue(struct cpages *p, struct cblock *b)
{
	pthread_mutex_lock(&p->lock);
	pthread_mutex_lock(&b->lock);
	if (b->chunk && atomic_load(&b->used) == 0 &&
	    bs_holds(atomic_load(&b->state)) == 0)
		block_free(p, b);
	else if (b->chunk && b->cls >= 0 && !b->listed &&
		 atomic_load(&b->used) < b->nslots)
		list_add(p, b);
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_unlock(&p->lock);
}

static struct cchunk *chunk_of(struct cpages *p, const char *ptr)
{
	struct ctable *t = atomic_load_explicit(&p->table, memory_order_acquire);
	size_t lo = 0, hi = t ? t->n : 0;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->c[mid]->base <= ptr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	struct cchunk *ch = t->c[lo - 1];

	return (size_t)(ptr - ch->base) < ((size_t)ch->npages << vr_page_shift) ?
	       ch : NULL;
}

/* Does ptr start slot *slot of b, at page pg of ch? */
static bool block_starts(const struct cblock *b, const struct cchunk *ch,
			 uint32_t pg, size_t off, uint32_t *slot)
{
	size_t in = off - cblock_off(b);

	if (b->chunk != ch || b->first != pg)
		return false;
	if (!b->slot_size)
		return in == 0 ? (*slot = 0, true) : false;
	if (in % b->slot_size || in / b->slot_size >= b->nslots)
		return false;
	*slot = (uint32_t)(in / b->slot_size);
	return true;
}

struct cblock *cpages_find(struct cpages *p, const void *ptr, uint32_t *slot)
{
	struct cchunk *ch = chunk_of(p, ptr);
	struct cblock *b;
	size_t off;
	uint32_t pg;

	if (!ch)
		return NULL;
	off = (size_t)((const char *)ptr - ch->base);
	pg = (uint32_t)(off >> vr_page_shift);
	b = atomic_load_explicit(&ch->page_block[pg], memory_order_acquire);
	return b && block_starts(b, ch, pg, off, slot) ? b : NULL;
}

struct cblock *cpages_find_locked(struct cpages *p, const void *ptr,
				  uint32_t *slot)
{
	struct cblock *b = cpages_find(p, ptr, slot);

	if (!b)
		return NULL;
	pthread_mutex_lock(&b->lock);
	/* The meta may have been recycled since it was read: check again. */
	if (cpages_find(p, ptr, slot) != b) {
		pthread_mutex_unlock(&b->lock);
		return NULL;
	}
	return b;
}

void cpages_flush_pool(struct cpages *p)
{
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nchunks && p->pool_pages; i++) {
		struct cchunk *ch = p->chunks[i];

		for (uint32_t pg = 0; pg < ch->npages; pg++) {
			uint32_t n = 0;

			while (pg + n < ch->npages && bit_get(ch->pool, pg + n))
				n++;
			if (!n)
				continue;
			if (vrange_mark_volatile(ch->r, (size_t)pg << vr_page_shift,
						 (size_t)n << vr_page_shift) == 0)
				bits_set(ch->vol, pg, n, true);
			bits_set(ch->pool, pg, n, false);
			p->pool_pages -= n;
			pg += n;
		}
	}
	pthread_mutex_unlock(&p->lock);
}

uint64_t cpages_resident(struct cpages *p)
{
	uint64_t sum = 0;
	struct stat st;

	/* Under the allocator lock: chunks come and go only under it.  One
	 * fstat per 8 MiB chunk; a failure (it has none to give on a live
	 * descriptor) counts the chunk as all in memory. */
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nchunks; i++) {
		struct cchunk *ch = p->chunks[i];

		if (fstat(ch->r->fd, &st) == 0)
			sum += (uint64_t)st.st_blocks * 512;
		else
			sum += (uint64_t)ch->npages << vr_page_shift;
	}
	pthread_mutex_unlock(&p->lock);
	return sum;
}
