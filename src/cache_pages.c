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
 * Fresh chunk pages are left non-volatile (they are not resident, nothing
 * to give back); a block freed with no holders has volatile pages, which
 * stay in the purge order until the pages are reused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"

#define CHUNK_BYTES (8u << 20)

static uint32_t chunk_pages(void)
{
	size_t n = CHUNK_BYTES >> vr_page_shift;

	return n < 64 ? 64 : (uint32_t)n;
}

int cpages_init(struct cpages *p, const char *name, int prio)
{
	size_t half = vr_page_size / 2;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	snprintf(p->name, sizeof(p->name), "vrange-cache:%s", name ? name : "");
	p->prio = prio;
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

			if (b) {
				pthread_mutex_lock(&b->lock);
				busy = b->holds > 0;
				pthread_mutex_unlock(&b->lock);
			}
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
	atomic_fetch_add(&p->bytes, sizeof(*t) + t->n * sizeof(t->c[0]));
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
	ch->page_block = calloc(npages, sizeof(ch->page_block[0]));
	if (!ch->used || !ch->page_block)
		goto fail;
	ret = vrange_region_create(p->name, (size_t)npages << vr_page_shift,
				   VRANGE_ACCESS_ZERO, &ch->r);
	if (ret < 0)
		goto fail;
	vrange_region_set_priority(ch->r, p->prio);
	ch->base = vrange_region_base(ch->r);
	ch->npages = ch->free_pages = npages;
	ret = table_add(p, ch);
	if (ret < 0) {
		vrange_region_destroy(ch->r);
		goto fail;
	}
	cache_region_note(1);
	atomic_fetch_add(&p->bytes, sizeof(*ch) + words * 8 +
			 npages * sizeof(ch->page_block[0]));
	p->chunks[p->nchunks++] = ch;
	*out = ch;
	return 0;
fail:
	if (ch) {
		free(ch->used);
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

/* n pages somewhere, a new chunk if need be (allocator lock). */
static int pages_take(struct cpages *p, uint32_t n, struct cchunk **out,
		      uint32_t *first)
{
	struct cchunk *ch;
	uint32_t cp = chunk_pages();
	int64_t at = -1;
	int ret;

	/* Newest chunks first: they are the likeliest to have room. */
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
		size_t sz = sizeof(*b) + nslots * sizeof(b->slot[0]);

		b = calloc(1, sz);
		if (!b)
			return NULL;
		pthread_mutex_init(&b->lock, NULL);
		atomic_fetch_add(&p->bytes, sz);
	}
	return b;
}

/* A new block of class cls (-1: large, npages pages), listed if slab. */
static int block_new(struct cpages *p, int cls, uint32_t npages,
		     uint32_t slot_size, struct cblock **out)
{
	uint32_t nslots = cls < 0 ? 1 : (uint32_t)(vr_page_size / slot_size);
	struct cblock *b = meta_get(p, cls, nslots);
	struct cchunk *ch;
	uint32_t first;
	int ret;

	if (!b)
		return -ENOMEM;
	ret = pages_take(p, npages, &ch, &first);
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
	b->used = 0;
	b->cls = cls;
	b->holds = 0;
	b->listed = false;
	b->next = b->prev = NULL;
	memset(b->slot, 0, nslots * sizeof(b->slot[0]));
	pthread_mutex_unlock(&b->lock);
	atomic_store_explicit(&ch->page_block[first], b, memory_order_release);
	atomic_fetch_add(&p->bytes, (uint64_t)npages << vr_page_shift);
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
		 struct cblock **out, uint32_t *slot)
{
	struct cblock *b = NULL;
	uint32_t i = 0;
	int ret = 0;

	pthread_mutex_lock(&p->lock);
	if (vlen <= vr_page_size / 2) {
		unsigned int cls = class_of(vlen);

		b = p->partial[cls];
		if (!b) {
			ret = block_new(p, (int)cls, 1, 16u << cls, &b);
			if (ret == 0)
				list_add(p, b);
		}
	} else {
		size_t n = (vlen + vr_page_size - 1) >> vr_page_shift;

		ret = n > UINT32_MAX / 2 ? -ENOMEM :
		      block_new(p, -1, (uint32_t)n, (uint32_t)0, &b);
		if (ret == 0)
			b->slot_size = 0; /* one slot: the pointer must be the start */
	}
	if (ret == 0) {
		bool full;

		pthread_mutex_lock(&b->lock);
		while (b->slot[i])
			i++;
		b->slot[i] = e;
		b->used++;
		full = b->used == b->nslots;
		pthread_mutex_unlock(&b->lock);
		if (b->listed && full)
			list_del(p, b);
		*out = b;
		*slot = i;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

bool cpages_clear_slot(struct cblock *b, uint32_t slot)
{
	b->slot[slot] = NULL;
	b->used--;
	return b->used == 0 || (b->cls >= 0 && b->used == b->nslots - 1);
}

/* Give an empty, unheld block's pages back (allocator and block lock). */
static void block_free(struct cpages *p, struct cblock *b)
{
	struct cchunk *ch = b->chunk;
	unsigned int list = b->cls < 0 ? CPAGES_MAX_CLASSES : (unsigned int)b->cls;

	if (b->listed)
		list_del(p, b);
	atomic_store(&ch->page_block[b->first], NULL);
	bits_set(ch->used, b->first, b->npages, false);
	ch->free_pages += b->npages;
	atomic_fetch_sub(&p->bytes, (uint64_t)b->npages << vr_page_shift);
	/* Its pages are volatile (no holder): they wait in the purge order. */
	b->chunk = NULL;
	b->next = p->spare[list];
	p->spare[list] = b;
}

void cpages_requeue(struct cpages *p, struct cblock *b)
{
	pthread_mutex_lock(&p->lock);
	pthread_mutex_lock(&b->lock);
	if (b->chunk && b->used == 0 && b->holds == 0)
		block_free(p, b);
	else if (b->chunk && b->cls >= 0 && !b->listed && b->used < b->nslots)
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

struct cblock *cpages_find_locked(struct cpages *p, const void *ptr,
				  uint32_t *slot)
{
	struct cchunk *ch = chunk_of(p, ptr);
	size_t off, in;
	uint32_t pg;
	struct cblock *b;

	if (!ch)
		return NULL;
	off = (size_t)((const char *)ptr - ch->base);
	pg = (uint32_t)(off >> vr_page_shift);
	b = atomic_load_explicit(&ch->page_block[pg], memory_order_acquire);
	if (!b)
		return NULL;
	pthread_mutex_lock(&b->lock);
	/* The meta may have been recycled since it was read: check it. */
	in = off - cblock_off(b);
	if (b->chunk != ch || b->first != pg ||
	    (b->slot_size ? in % b->slot_size != 0 || in / b->slot_size >= b->nslots :
			    in != 0)) {
		pthread_mutex_unlock(&b->lock);
		return NULL;
	}
	*slot = b->slot_size ? (uint32_t)(in / b->slot_size) : 0;
	return b;
}
