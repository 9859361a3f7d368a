/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the purgeable cache's internal structures (cache.c: entries,
 * shards, LRU, the API; cache_hold.c: the hold protocol of blocks and the
 * deferral ring; cache_pages.c: the pages values live on).
 *
 * Lock order: a shard lock, then the LRU lock or a block lock (never
 * both); the allocator lock, then a block lock; the ring lock alone.
 * Eviction holds the LRU lock and takes shard locks only with trylock
 * (skipping a busy shard), so the two orders cannot deadlock.  A shard
 * lock and the allocator lock are never held together, and no lock is
 * held while the caller's code runs.
 *
 * Holds are counted without locks: the block word (BS_*) is changed by
 * CAS while its pages are non-volatile (BS_HOT); the transitions between
 * volatile and non-volatile pages, and the discovery of purged pages, take
 * the block lock, so a hold that sees BS_HOT also sees every value the
 * transition found dead.
 */
#ifndef VRANGE_CACHE_H
#define VRANGE_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"
#include "vrange.h"

struct cchunk;

/* One cached value's bookkeeping (malloc'd, never in volatile memory). */
struct centry {
	struct centry *hnext;             /* shard chain (shard lock) */
	struct centry *lru_prev, *lru_next; /* capped caches (LRU lock) */
	struct cblock *block;             /* where the value lives */
	uint32_t slot;
	_Atomic uint32_t hs;              /* holds << 1 | EN_DETACHED */
	_Atomic bool dead;                /* found purged, already uncounted */
	_Atomic bool reserved;            /* filled in place, not committed */
	size_t vlen;
	uint64_t hash;
	uint32_t klen;
	unsigned char key[];
};

/* Entry word: out of its shard, freed by whoever drops the last hold. */
#define EN_DETACHED 1u
#define EN_HOLD 2u

/* Block word: pages non-volatile (a hold needs no mark call), pushed on
 * the deferral ring, the value of a one-value block removed (its entry
 * word is not used: the block's holds are the value's), and the count of
 * holds above them. */
#define BS_HOT 1u
#define BS_RING 2u
#define BS_GONE 4u
#define BS_HOLD 8u

/*
 * One slab page (values of one size class), or the pages of one large
 * value.  Its pages are non-volatile whenever it is held (and, deferred,
 * for a while after).
 */
struct cblock {
	pthread_mutex_t lock;   /* slot[] changes, HOT <-> cold, entry kills */
	_Atomic uint32_t state; /* BS_* and holds (holds + reservations) */
	struct cchunk *chunk;   /* set under the allocator lock */
	uint32_t first;         /* first page in the chunk */
	uint32_t npages;
	uint32_t slot_size;     /* bytes per slot; 0: one large value */
	uint32_t nslots;
	_Atomic uint32_t used;  /* slots with an entry (changed under the block lock) */
	int cls;                /* slab class, or -1: one large value */
	uint32_t gen;           /* bumped at each reuse of the meta */
	_Atomic uint32_t cost;  /* dearest put on it since it was made (0:
				 * the cache's cost, its region's) */
	uint64_t rel_seq;       /* mark clock at the last release (__atomic):
				 * its place in the purge order when cooled */
	bool listed;            /* on its class's partial list (allocator lock) */
	struct cblock *next, *prev; /* partial list, or spare list */
	struct centry *_Atomic slot[];
};

static inline uint32_t bs_holds(uint32_t s)
{
	return s / BS_HOLD;
}

/* A block of one large value: its holds are that value's holds. */
static inline bool cblock_one_value(const struct cblock *b)
{
	return b->slot_size == 0;
}

/* A region carved into pages for blocks. */
struct cchunk {
	vrange_region *r;
	char *base;
	uint32_t npages;
	uint32_t free_pages;
	uint64_t *used;                     /* page bitmap */
	uint64_t *vol;                      /* free page marked volatile */
	uint64_t *pool;                     /* free page non-volatile, resident */
	struct cblock *_Atomic *page_block; /* block starting at each page */
};

/* Sorted snapshot of the chunks, read without a lock by release. */
struct ctable {
	struct ctable *retired;  /* older snapshots, freed at destroy */
	size_t n;
	struct cchunk *c[];
};

#define CPAGES_MAX_CLASSES 16

/* The cache's memory: chunks of region pages and slab classes. */
struct cpages {
	pthread_mutex_t lock;           /* chunks, bitmaps, partial lists */
	char name[64];
	int prio;
	uint32_t cost; /* the cost of its regions' marks (>= 1) */
	unsigned int nclasses;          /* classes 16 << i up to half a page */
	struct cchunk **chunks;         /* creation order */
	size_t nchunks, cap;
	struct ctable *_Atomic table;
	struct cblock *partial[CPAGES_MAX_CLASSES];
	struct cblock *spare[CPAGES_MAX_CLASSES + 1]; /* recycled metas */
	_Atomic uint64_t bytes;         /* bookkeeping (chunks, metas, tables) */
	_Atomic uint64_t page_bytes;    /* pages given to blocks */
	uint64_t pool_pages, pool_max;  /* freed pages kept non-volatile */
};

int cpages_init(struct cpages *p, const char *name, int prio,
		size_t pool_bytes) VR_HIDDEN;
void cpages_fini(struct cpages *p) VR_HIDDEN;
/* True when any block is held or reserved. */
bool cpages_busy(struct cpages *p) VR_HIDDEN;
/*
 * A slot of vlen bytes, recorded as e's (b->slot[*slot] = e, block used
 * count raised).  *held: a new block on pages that need no mark call,
 * already held once for e; else the caller takes the hold.  0 or -ENOMEM.
 */
int cpages_alloc(struct cpages *p, size_t vlen, struct centry *e,
		 struct cblock **b, uint32_t *slot, bool *held) VR_HIDDEN;
/* Would a value of vlen bytes get a slot of b's size (class or pages)?
 * b is held, or its entry's shard locked. */
bool cpages_fits(const struct cblock *b, size_t vlen) VR_HIDDEN;
/* Empty slot (under b->lock).  True if the block must be requeued. */
bool cpages_clear_slot(struct cblock *b, uint32_t slot) VR_HIDDEN;
/* Fix b's list membership or give its pages back (allocator lock). */
void cpages_requeue(struct cpages *p, struct cblock *b) VR_HIDDEN;
/* The block and slot a value pointer starts, or NULL if ptr starts no
 * slot of this cache's blocks.  Exact for pointers the caller holds; the
 * locked form re-checks under b->lock (taken) for any pointer. */
struct cblock *cpages_find(struct cpages *p, const void *ptr,
			   uint32_t *slot) VR_HIDDEN;
struct cblock *cpages_find_locked(struct cpages *p, const void *ptr,
				  uint32_t *slot) VR_HIDDEN;
/* Make the pooled free pages volatile (a purge is coming). */
void cpages_flush_pool(struct cpages *p) VR_HIDDEN;
/* Bytes of the chunks' pages in memory now (their files' st_blocks):
 * values, pooled pages and freed pages no purge has taken yet. */
uint64_t cpages_resident(struct cpages *p) VR_HIDDEN;

/* cache_hold.c: the hold protocol and the deferral ring. */
struct cring {
	pthread_mutex_t lock;
	struct cring_slot { struct cblock *b; uint32_t npages, gen; } *q;
	size_t cap, head, n;
	uint64_t pages, max_pages;  /* 0: no deferral (VRANGE_CACHE_EAGER) */
};
int cring_init(struct cring *r, size_t bytes) VR_HIDDEN;
void cring_fini(struct cring *r) VR_HIDDEN;
/* Take a hold on b: the first over volatile pages marks them
 * non-volatile and, if any was purged, drops every value on b
 * (cache_block_purged).  0 or -errno.  No cache lock may be held but a
 * shard lock. */
int chold_take(vrange_cache *c, struct cblock *b) VR_HIDDEN;
/* Drop a hold; the last one defers b's volatility (or, eager, marks). */
void chold_drop(vrange_cache *c, struct cblock *b) VR_HIDDEN;
/* Release a get's hold of the value of a one-value block: -EINVAL if it
 * has none, 1 if that was the last of a removed value (the caller frees
 * it and its block), else 0. */
int chold_release_value(vrange_cache *c, struct cblock *b) VR_HIDDEN;
/* Mark every deferred block volatile now. */
void cring_flush(vrange_cache *c) VR_HIDDEN;

/* cache.c, for cache_hold.c. */
struct cring *cache_ring(vrange_cache *c) VR_HIDDEN;
/* Under b->lock, b's pages found purged: drop its values. */
void cache_block_purged(vrange_cache *c, struct cblock *b) VR_HIDDEN;
/* Make every cache's deferred pages volatile: before a purge and stats. */
void cache_flush_all(void) VR_HIDDEN;
/* pthread_atfork: the list of caches.  A child forgets its parent's caches
 * (another thread may have held their locks): its purges skip them. */
void cache_fork_prepare(void) VR_HIDDEN;
void cache_fork_parent(void) VR_HIDDEN;
void cache_fork_child(void) VR_HIDDEN;

static inline void *cblock_ptr(const struct cblock *b, uint32_t slot)
{
	return b->chunk->base + ((size_t)b->first << vr_page_shift) +
	       (size_t)slot * b->slot_size;
}

static inline size_t cblock_off(const struct cblock *b)
{
	return (size_t)b->first << vr_page_shift;
}

/* Regions the caches of this process use, for vrange_get_stats. */
uint64_t cache_region_count(void) VR_HIDDEN;
void cache_region_note(int delta) VR_HIDDEN;

#endif
