/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the purgeable cache's internal structures (cache.c: entries,
 * shards, holds, LRU; cache_pages.c: the pages values live on).
 *
 * Lock order: a shard lock, then the LRU lock or a block lock (never
 * both); the allocator lock, then a block lock.  Eviction holds the LRU
 * lock and takes shard locks only with trylock (skipping a busy shard), so
 * the two orders cannot deadlock.  A shard lock and the allocator lock are
 * never held together, and no lock is held while the caller's code runs.  Every state of an entry that a hold depends on (its holds,
 * dead, detached, reserved) changes only under its block's lock, so the
 * hold protocol and the discovery of a purged page are atomic with
 * respect to each other.
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
	uint32_t holds;                   /* gets not yet released (block lock) */
	bool reserved;                    /* filled in place, not yet committed */
	bool detached;                    /* out of the shard: freed at 0 holds */
	bool dead;                        /* found purged, already uncounted */
	bool linked;                      /* in its shard (shard lock) */
	size_t vlen;
	uint64_t hash;
	uint32_t klen;
	unsigned char key[];
};

/*
 * One slab page (values of one size class), or the pages of one large
 * value.  Its pages are non-volatile exactly while holds > 0.
 */
struct cblock {
	pthread_mutex_t lock;   /* holds, slot[], the states of its entries */
	struct cchunk *chunk;   /* set under the allocator lock */
	uint32_t first;         /* first page in the chunk */
	uint32_t npages;
	uint32_t slot_size;     /* bytes per slot */
	uint32_t nslots;
	uint32_t used;          /* slots with an entry (block lock) */
	int cls;                /* slab class, or -1: one large value */
	uint32_t holds;         /* held values + reservations (block lock) */
	bool listed;            /* on its class's partial list (allocator lock) */
	struct cblock *next, *prev; /* partial list, or spare list */
	struct centry *slot[];
};

/* A region carved into pages for blocks. */
struct cchunk {
	vrange_region *r;
	char *base;
	uint32_t npages;
	uint32_t free_pages;
	uint64_t *used;                     /* page bitmap */
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
	unsigned int nclasses;          /* classes 16 << i up to half a page */
	struct cchunk **chunks;         /* creation order */
	size_t nchunks, cap;
	struct ctable *_Atomic table;
	struct cblock *partial[CPAGES_MAX_CLASSES];
	struct cblock *spare[CPAGES_MAX_CLASSES + 1]; /* recycled metas */
	_Atomic uint64_t bytes;         /* block pages + bookkeeping */
};

int cpages_init(struct cpages *p, const char *name, int prio) VR_HIDDEN;
void cpages_fini(struct cpages *p) VR_HIDDEN;
/* True when any block is held or reserved. */
bool cpages_busy(struct cpages *p) VR_HIDDEN;
/*
 * A slot of vlen bytes, recorded as e's (b->slot[*slot] = e, block used
 * count raised) but not yet held.  0 or -ENOMEM.
 */
int cpages_alloc(struct cpages *p, size_t vlen, struct centry *e,
		 struct cblock **b, uint32_t *slot) VR_HIDDEN;
/* Empty slot (under b->lock).  True if the block must be requeued. */
bool cpages_clear_slot(struct cblock *b, uint32_t slot) VR_HIDDEN;
/* Fix b's list membership or give its pages back (allocator lock). */
void cpages_requeue(struct cpages *p, struct cblock *b) VR_HIDDEN;
/* The block and slot a value pointer starts, with b->lock taken; NULL if
 * ptr starts no slot of this cache's blocks. */
struct cblock *cpages_find_locked(struct cpages *p, const void *ptr,
				  uint32_t *slot) VR_HIDDEN;

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
