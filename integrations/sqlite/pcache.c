/* SPDX-License-Identifier: MIT */
/*
 * pcache.c - SQLite's page cache (sqlite3_pcache_methods2) on libvrange
 * regions.  What it promises is in vrange-sqlite.h; how:
 *
 * A cache owns slots: one per entry, each a page-aligned stretch of a
 * region (the page buffer) plus a malloc'd bookkeeping struct and szExtra
 * bytes.  Slots come in chunks (one region each) that double in size, so
 * small caches stay small and a large one needs few descriptors.  An entry
 * is PINNED (SQLite holds it: non-volatile) or UNPINNED (volatile, on an
 * LRU list for recycling); a slot without an entry is FREE.  A hash table
 * maps keys to entries.  `vol` says whether the slot's page is marked
 * volatile now, so each state change marks or unmarks at most once.
 *
 * SQLite serialises calls on one cache; nothing here locks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>
#include <vrange.h>

#include "vrange-sqlite.h"

#define FIRST_CHUNK_SLOTS 64u
#define MAX_CHUNK_SLOTS 16384u

enum slot_state { S_FREE, S_PINNED, S_UNPINNED };
enum counter { C_FETCHES, C_HITS, C_REREADS, C_MARKS, C_UNMARKS, C_SHRINKS,
	       C_SHRUNK_BYTES, NCOUNTERS };

struct chunk;

struct slot {
	sqlite3_pcache_page pg;  /* first: SQLite hands it back to us */
	struct chunk *ch;
	size_t off;              /* of the page buffer in ch's region */
	struct slot *hnext;      /* hash chain */
	struct slot *prev, *next; /* LRU (unpinned) or free list */
	unsigned key;
	uint8_t state;
	bool vol;                /* marked volatile now */
};

struct chunk {
	struct chunk *next;
	vrange_region *r;
	struct slot *slots;
	unsigned char *extra;
	unsigned nslots;
};

struct list {
	struct slot *head, *tail; /* head: least recently added */
};

struct pcache {
	size_t sz_slot;          /* szPage rounded up to the system page */
	int sz_page, sz_extra;
	bool purgeable;
	unsigned max_pages;      /* cache_size in pages */
	unsigned npages, npinned;
	unsigned next_chunk_slots;
	struct chunk *chunks;
	struct list lru, free;
	struct slot **hash;
	unsigned nhash;          /* power of two */
	_Atomic uint64_t n[NCOUNTERS];
	_Atomic unsigned npages_pub; /* npages, for the stats */
	struct pcache *reg_prev, *reg_next;
};

/*
 * Counters.  Each cache keeps its own (only its owner writes them, so a
 * relaxed load and store suffice and threads on different caches share no
 * cache line); the stats call sums the live caches and what destroyed ones
 * left in `gone`, under reg_lock.
 */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pcache *live;        /* under reg_lock */
static uint64_t live_caches;
static uint64_t gone[NCOUNTERS];

static void count(struct pcache *c, enum counter k, uint64_t d)
{
	atomic_store_explicit(&c->n[k], atomic_load_explicit(&c->n[k], memory_order_relaxed) + d,
			      memory_order_relaxed);
}

static void pages_add(struct pcache *c, int d)
{
	c->npages += (unsigned)d;
	atomic_store_explicit(&c->npages_pub, c->npages, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Lists and hash */

static void list_del(struct list *l, struct slot *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		l->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		l->tail = s->prev;
	s->prev = s->next = NULL;
}

static void list_add_tail(struct list *l, struct slot *s)
{
	s->next = NULL;
	s->prev = l->tail;
	if (l->tail)
		l->tail->next = s;
	else
		l->head = s;
	l->tail = s;
}

static unsigned hash_of(const struct pcache *c, unsigned key)
{
	return (key * 2654435761u) & (c->nhash - 1);
}

static struct slot *hash_find(const struct pcache *c, unsigned key)
{
	struct slot *s = c->hash[hash_of(c, key)];

	while (s && s->key != key)
		s = s->hnext;
	return s;
}

static void hash_del(struct pcache *c, struct slot *s)
{
	struct slot **pp = &c->hash[hash_of(c, s->key)];

	while (*pp != s)
		pp = &(*pp)->hnext;
	*pp = s->hnext;
	s->hnext = NULL;
}

static void hash_add(struct pcache *c, struct slot *s)
{
	unsigned h = hash_of(c, s->key);

	s->hnext = c->hash[h];
	c->hash[h] = s;
}

/* Double the table when it holds more entries than buckets; a failed
 * allocation only leaves chains longer. */
static void hash_grow(struct pcache *c)
{
	unsigned n = c->nhash * 2;
	struct slot **t;

	if (c->npages < c->nhash || !(t = calloc(n, sizeof(*t))))
		return;
	for (unsigned i = 0; i < c->nhash; i++) {
		struct slot *s = c->hash[i];

		while (s) {
			struct slot *nx = s->hnext;
			unsigned h = (s->key * 2654435761u) & (n - 1);

			s->hnext = t[h];
			t[h] = s;
			s = nx;
		}
	}
	free(c->hash);
	c->hash = t;
	c->nhash = n;
}

/* ------------------------------------------------------------------ */
/* Marking: the only calls into libvrange on the hot path */

/*
 * What losing the page costs (contract 10, vrange_mark_volatile_cost):
 * an interior b-tree page (and page 1, the schema's root) is read on
 * every lookup below it, so a purge of one costs a re-read - a disk read
 * when the file's own cache is gone too - per lookup until SQLite reads
 * it again; a leaf costs one read.  The page's type is in its b-tree
 * header (SQLite's file format: flag byte 2 or 5, at offset 100 on page
 * 1).  A free slot's content is garbage: cost 1.  VRANGE_SQLITE_COST=0
 * marks every page at 1 (the age-only order, for comparison).
 */
#define INTERIOR_COST 16u

static bool use_costs(void)
{
	static int on = -1;

	if (on < 0) {
		const char *v = getenv("VRANGE_SQLITE_COST");

		on = !(v && v[0] == '0' && !v[1]);
	}
	return on;
}

static uint32_t page_cost(const struct pcache *c, const struct slot *s)
{
	const unsigned char *pg = s->pg.pBuf;
	unsigned char flag;

	if (s->state == S_FREE || !use_costs())
		return 1;
	if (s->key == 1)
		return INTERIOR_COST;
	flag = c->sz_page > 0 ? pg[0] : 0;
	return flag == 2 || flag == 5 ? INTERIOR_COST : 1;
}

static void make_volatile(struct pcache *c, struct slot *s)
{
	if (!c->purgeable || s->vol)
		return;
	/* A failed mark (-ENOMEM) only leaves the page resident. */
	s->vol = vrange_mark_volatile_cost(s->ch->r, s->off, c->sz_slot,
					   page_cost(c, s)) == 0;
	count(c, C_MARKS, 1);
}

/* Non-volatile again; true if its content survived. */
static bool make_nonvolatile(struct pcache *c, struct slot *s)
{
	int r;

	if (!s->vol)
		return true;
	s->vol = false;
	r = vrange_mark_nonvolatile(s->ch->r, s->off, c->sz_slot);
	count(c, C_UNMARKS, 1);
	return r == VRANGE_INTACT;
}

/* ------------------------------------------------------------------ */
/* Slots */

static int add_chunk(struct pcache *c)
{
	unsigned n = c->next_chunk_slots;
	struct chunk *ch;

	/* The first region holds cache_size slots (a power of two), so a
	 * cache of the usual size costs one region, one memfd: descriptors
	 * run out long before address space does. */
	while (!c->chunks && n < c->max_pages && n < MAX_CHUNK_SLOTS)
		n *= 2;
	ch = calloc(1, sizeof(*ch));
	unsigned char *base;
	int r = -ENOMEM;

	if (!ch)
		return -ENOMEM;
	ch->slots = calloc(n, sizeof(*ch->slots));
	ch->extra = calloc(n, (size_t)c->sz_extra ? (size_t)c->sz_extra : 1);
	if (!ch->slots || !ch->extra)
		goto fail;
	r = vrange_region_create("sqlite-pcache", (size_t)n * c->sz_slot,
				 VRANGE_ACCESS_ZERO, &ch->r);
	if (r < 0)
		goto fail;
	base = vrange_region_base(ch->r);
	ch->nslots = n;
	for (unsigned i = 0; i < n; i++) {
		struct slot *s = &ch->slots[i];

		s->ch = ch;
		s->off = (size_t)i * c->sz_slot;
		s->pg.pBuf = base + s->off;
		s->pg.pExtra = ch->extra + (size_t)i * (size_t)c->sz_extra;
		s->state = S_FREE;
		list_add_tail(&c->free, s);
	}
	ch->next = c->chunks;
	c->chunks = ch;
	if (n < MAX_CHUNK_SLOTS)
		c->next_chunk_slots = n * 2;
	return 0;
fail:
	free(ch->slots);
	free(ch->extra);
	free(ch);
	return r;
}

/* Drop an entry (pinned or not): its slot becomes free and, in a purgeable
 * cache, volatile — its content is garbage now. */
static void drop_entry(struct pcache *c, struct slot *s)
{
	hash_del(c, s);
	if (s->state == S_UNPINNED)
		list_del(&c->lru, s);
	else
		c->npinned--;
	pages_add(c, -1);
	s->state = S_FREE;
	make_volatile(c, s);
	list_add_tail(&c->free, s);
}

/* A slot for a new entry, or NULL.  Recycles the least recently unpinned
 * entry once the cache holds cache_size entries. */
static struct slot *take_slot(struct pcache *c, int create)
{
	struct slot *s = NULL;

	if (c->purgeable && c->npages >= c->max_pages) {
		if (c->lru.head) {
			drop_entry(c, c->lru.head);
		} else if (create < 2) {
			return NULL;
		}
	}
	if (!c->free.head && add_chunk(c) < 0)
		return NULL;
	s = c->free.head;
	list_del(&c->free, s);
	/* Its old content is garbage: purged or not does not matter. */
	make_nonvolatile(c, s);
	return s;
}

/* ------------------------------------------------------------------ */
/* The methods */

static int pc_init(void *arg)
{
	(void)arg;
	return SQLITE_OK;
}

static void pc_shutdown(void *arg)
{
	(void)arg;
}

static sqlite3_pcache *pc_create(int sz_page, int sz_extra, int purgeable)
{
	long ps = sysconf(_SC_PAGESIZE);
	struct pcache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->sz_page = sz_page;
	c->sz_extra = sz_extra;
	c->sz_slot = ((size_t)sz_page + (size_t)ps - 1) / (size_t)ps * (size_t)ps;
	c->purgeable = purgeable != 0;
	c->max_pages = 100;
	c->next_chunk_slots = FIRST_CHUNK_SLOTS;
	c->nhash = 64;
	c->hash = calloc(c->nhash, sizeof(*c->hash));
	if (!c->hash) {
		free(c);
		return NULL;
	}
	pthread_mutex_lock(&reg_lock);
	c->reg_next = live;
	if (live)
		live->reg_prev = c;
	live = c;
	live_caches++;
	pthread_mutex_unlock(&reg_lock);
	return (sqlite3_pcache *)c;
}

static void pc_cachesize(sqlite3_pcache *p, int n)
{
	struct pcache *c = (struct pcache *)p;

	c->max_pages = n > 0 ? (unsigned)n : 1;
	/* Over the new size: recycle unpinned entries now (their slots stay
	 * volatile, so this marks nothing). */
	while (c->purgeable && c->npages > c->max_pages && c->lru.head)
		drop_entry(c, c->lru.head);
}

static int pc_pagecount(sqlite3_pcache *p)
{
	return (int)((struct pcache *)p)->npages;
}

static sqlite3_pcache_page *pc_fetch(sqlite3_pcache *p, unsigned key, int create)
{
	struct pcache *c = (struct pcache *)p;
	struct slot *s = hash_find(c, key);

	count(c, C_FETCHES, 1);
	if (s && s->state == S_PINNED) {
		count(c, C_HITS, 1);
		return &s->pg;
	}
	if (s) {
		list_del(&c->lru, s);
		if (make_nonvolatile(c, s)) {
			s->state = S_PINNED;
			c->npinned++;
			count(c, C_HITS, 1);
			return &s->pg;
		}
		/* Purged: a clean miss.  The slot is ours again either way. */
		count(c, C_REREADS, 1);
		if (!create) {
			hash_del(c, s);
			pages_add(c, -1);
					s->state = S_FREE;
			/* Non-volatile now: the head of the free list is taken
			 * next, without another unmark. */
			s->next = c->free.head;
			s->prev = NULL;
			if (c->free.head)
				c->free.head->prev = s;
			else
				c->free.tail = s;
			c->free.head = s;
			return NULL;
		}
		memset(s->pg.pExtra, 0, (size_t)c->sz_extra);
		s->state = S_PINNED;
		c->npinned++;
		return &s->pg;
	}
	if (!create || !(s = take_slot(c, create)))
		return NULL;
	memset(s->pg.pExtra, 0, (size_t)c->sz_extra);
	s->key = key;
	s->state = S_PINNED;
	c->npinned++;
	pages_add(c, 1);
	hash_add(c, s);
	hash_grow(c);
	return &s->pg;
}

static void pc_unpin(sqlite3_pcache *p, sqlite3_pcache_page *pg, int discard)
{
	struct pcache *c = (struct pcache *)p;
	struct slot *s = (struct slot *)pg;

	if (s->state != S_PINNED)
		return;
	if (discard || !c->purgeable) {
		drop_entry(c, s);
		return;
	}
	c->npinned--;
	s->state = S_UNPINNED;
	list_add_tail(&c->lru, s);
	make_volatile(c, s);
	while (c->npages > c->max_pages && c->lru.head)
		drop_entry(c, c->lru.head);
}

static void pc_rekey(sqlite3_pcache *p, sqlite3_pcache_page *pg, unsigned old_key,
		     unsigned new_key)
{
	struct pcache *c = (struct pcache *)p;
	struct slot *s = (struct slot *)pg, *other = hash_find(c, new_key);

	(void)old_key;
	if (other && other != s)
		drop_entry(c, other);
	hash_del(c, s);
	s->key = new_key;
	hash_add(c, s);
}

static void pc_truncate(sqlite3_pcache *p, unsigned limit)
{
	struct pcache *c = (struct pcache *)p;

	for (unsigned i = 0; i < c->nhash; i++) {
		struct slot *s = c->hash[i], *nx;

		for (; s; s = nx) {
			nx = s->hnext;
			if (s->key >= limit)
				drop_entry(c, s);
		}
	}
}

static void pc_destroy(sqlite3_pcache *p)
{
	struct pcache *c = (struct pcache *)p;
	struct chunk *ch, *nx;

	pthread_mutex_lock(&reg_lock);
	for (int i = 0; i < NCOUNTERS; i++)
		gone[i] += atomic_load(&c->n[i]);
	if (c->reg_prev)
		c->reg_prev->reg_next = c->reg_next;
	else
		live = c->reg_next;
	if (c->reg_next)
		c->reg_next->reg_prev = c->reg_prev;
	live_caches--;
	pthread_mutex_unlock(&reg_lock);
	for (ch = c->chunks; ch; ch = nx) {
		nx = ch->next;
		vrange_region_destroy(ch->r);
		free(ch->slots);
		free(ch->extra);
		free(ch);
	}
	free(c->hash);
	free(c);
}

static void pc_shrink(sqlite3_pcache *p)
{
	struct pcache *c = (struct pcache *)p;

	count(c, C_SHRINKS, 1);
	for (struct chunk *ch = c->chunks; ch; ch = ch->next) {
		ssize_t n = vrange_region_purge(ch->r);

		if (n > 0)
			count(c, C_SHRUNK_BYTES, (uint64_t)n);
	}
}

int vrange_sqlite_pcache_install(void)
{
	static const sqlite3_pcache_methods2 methods = {
		.iVersion = 1,
		.xInit = pc_init,
		.xShutdown = pc_shutdown,
		.xCreate = pc_create,
		.xCachesize = pc_cachesize,
		.xPagecount = pc_pagecount,
		.xFetch = pc_fetch,
		.xUnpin = pc_unpin,
		.xRekey = pc_rekey,
		.xTruncate = pc_truncate,
		.xDestroy = pc_destroy,
		.xShrink = pc_shrink,
	};

	return sqlite3_config(SQLITE_CONFIG_PCACHE2, &methods);
}

int vrange_sqlite_pcache_stats(struct vrange_sqlite_stats *out)
{
	uint64_t sum[NCOUNTERS], pages = 0;

	if (!out)
		return -EINVAL;
	pthread_mutex_lock(&reg_lock);
	for (int i = 0; i < NCOUNTERS; i++)
		sum[i] = gone[i];
	for (struct pcache *c = live; c; c = c->reg_next) {
		for (int i = 0; i < NCOUNTERS; i++)
			sum[i] += atomic_load_explicit(&c->n[i], memory_order_relaxed);
		pages += atomic_load_explicit(&c->npages_pub, memory_order_relaxed);
	}
	out->caches = live_caches;
	pthread_mutex_unlock(&reg_lock);
	out->pages = pages;
	out->fetches = sum[C_FETCHES];
	out->hits = sum[C_HITS];
	out->rereads = sum[C_REREADS];
	out->marks = sum[C_MARKS];
	out->unmarks = sum[C_UNMARKS];
	out->shrinks = sum[C_SHRINKS];
	out->shrunk_bytes = sum[C_SHRUNK_BYTES];
	return 0;
}
