/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the purgeable cache: key -> value on volatile pages.
 *
 * Entries live in 64 shards chosen by the top bits of the key's hash, each
 * a chained hash table under its own mutex, so lookups of different keys
 * rarely meet on a lock.  Values live in blocks (cache_pages.c).
 *
 * A get takes a hold on the value's block (cache_hold.c), then checks that
 * the entry was not found dead by that or an earlier hold: a held block's
 * pages are non-volatile and were reported INTACT since the value was
 * written, or the value is dead.  So a hit never returns lost bytes.
 * Entry holds are an atomic word too, so a release is two CASes and a
 * lookup of the page, with no lock unless it is the last of a removed
 * value or the block must change state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "pressure.h"

#define SHARDS 64
#define SHARD_SHIFT 58
#define KEY_MAX 4096
#define FIRST_OPTS_SIZE (offsetof(struct vrange_cache_opts, flags) + sizeof(unsigned))
#define COST_OPTS_SIZE (offsetof(struct vrange_cache_opts, cost) + sizeof(uint32_t))
#define FIRST_STATS_SIZE (offsetof(struct vrange_cache_stats, evictions) + sizeof(uint64_t))
/* Released values kept non-volatile for cheap reuse, and freed pages. */
#define DEFER_BYTES (8u << 20)
#define POOL_BYTES (4u << 20)

struct cshard {
	pthread_mutex_t lock;
	struct centry **buckets;
	size_t nbuckets;   /* a power of two, or 0 before the first entry */
	size_t n;
	uint64_t hits, misses;
	/* Linked entries (dead ones included until found), their value and
	 * bookkeeping bytes: written under the lock, read by stats without. */
	_Atomic uint64_t entries, bytes, meta;
} __attribute__((aligned(64)));

struct vrange_cache {
	struct cshard shard[SHARDS];
	struct cpages pages;
	uint64_t id;                       /* unique per cache in the process */
	size_t max_bytes;
	pthread_mutex_t lru_lock;          /* capped caches only */
	struct centry *lru_head, *lru_tail; /* head: most recently used */
	_Atomic uint64_t purged_entries, evictions;
	_Atomic uint64_t dead_entries, dead_bytes; /* found purged, still linked */
	_Atomic uint64_t live_bytes;       /* capped caches: value bytes stored */
	struct cring ring;
	vrange_cache *all_next, *all_prev; /* every cache, for purges */
	bool listed;                       /* on that list (all_lock) */
};

static _Atomic uint64_t cache_regions;
static _Atomic uint64_t next_cache_id = 1;

/*
 * The value this thread got last: the usual release (same thread, right
 * after) finds its block here instead of through the chunk table.  Only a
 * hint: the block is checked to start that value now, and block metas
 * outlive every use of their cache.
 */
static __thread struct {
	uint64_t cache_id;
	const void *ptr;
	struct cblock *b;
	uint32_t slot;
} last_get __attribute__((tls_model("initial-exec")));
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static vrange_cache *_Atomic all_caches; /* written under all_lock */

struct cring *cache_ring(vrange_cache *c)
{
	return &c->ring;
}

void cache_flush_all(void)
{
	/* Cheap when no cache exists: purges and stats call this. */
	if (!atomic_load_explicit(&all_caches, memory_order_relaxed))
		return;
	pthread_mutex_lock(&all_lock);
	for (vrange_cache *c = all_caches; c; c = c->all_next) {
		cring_flush(c);
		cpages_flush_pool(&c->pages);
	}
	pthread_mutex_unlock(&all_lock);
}

void cache_fork_prepare(void)
{
	pthread_mutex_lock(&all_lock);
}

void cache_fork_parent(void)
{
	pthread_mutex_unlock(&all_lock);
}

void cache_fork_child(void)
{
	for (vrange_cache *c = all_caches; c; c = c->all_next)
		c->listed = false;
	all_caches = NULL;
	pthread_mutex_init(&all_lock, NULL);
}

uint64_t cache_region_count(void)
{
	return atomic_load(&cache_regions);
}

void cache_region_note(int delta)
{
	atomic_fetch_add(&cache_regions, (uint64_t)(int64_t)delta);
}

/* Add to a counter only its lock's holder writes (no atomic RMW). */
static void relaxed_add(_Atomic uint64_t *v, int64_t d)
{
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) +
			      (uint64_t)d, memory_order_relaxed);
}

static uint64_t key_hash(const unsigned char *k, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;

	for (; n >= 8; k += 8, n -= 8) {
		memcpy(&w, k, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	w = 0;
	memcpy(&w, k, n);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
	return h ^ (h >> 29);
}

static struct cshard *shard_of(vrange_cache *c, uint64_t h)
{
	return &c->shard[h >> SHARD_SHIFT];
}

static bool bad_key(const void *key, size_t klen)
{
	return !key || klen == 0 || klen > KEY_MAX;
}

/* The link that points at the key's entry, or NULL (shard lock). */
static struct centry **shard_find(struct cshard *s, uint64_t h,
				  const void *key, size_t klen)
{
	struct centry **l;

	if (!s->nbuckets)
		return NULL;
	for (l = &s->buckets[h & (s->nbuckets - 1)]; *l; l = &(*l)->hnext) {
		struct centry *e = *l;

		if (e->hash == h && e->klen == klen && !memcmp(e->key, key, klen))
			return l;
	}
	return NULL;
}

/* The link that points at e itself (shard lock; e is linked). */
static struct centry **shard_link_of(struct cshard *s, struct centry *e)
{
	struct centry **l = &s->buckets[e->hash & (s->nbuckets - 1)];

	while (*l != e)
		l = &(*l)->hnext;
	return l;
}

/* Double the buckets when the table fills up; on ENOMEM chains grow. */
static void shard_grow(vrange_cache *c, struct cshard *s)
{
	size_t n = s->nbuckets ? s->nbuckets * 2 : 16;
	struct centry **nb;

	if (s->n < s->nbuckets)
		return;
	nb = calloc(n, sizeof(*nb));
	if (!nb)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct centry *e = s->buckets[i], *next;

		for (; e; e = next) {
			next = e->hnext;
			e->hnext = nb[e->hash & (n - 1)];
			nb[e->hash & (n - 1)] = e;
		}
	}
	free(s->buckets);
	relaxed_add(&s->meta, (int64_t)((n - s->nbuckets) * sizeof(*nb)));
	s->buckets = nb;
	s->nbuckets = n;
}

static void lru_del(vrange_cache *c, struct centry *e)
{
	if (!c->max_bytes)
		return;
	pthread_mutex_lock(&c->lru_lock);
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		c->lru_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		c->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
	pthread_mutex_unlock(&c->lru_lock);
}

static void lru_front_locked(vrange_cache *c, struct centry *e)
{
	e->lru_prev = NULL;
	e->lru_next = c->lru_head;
	if (c->lru_head)
		c->lru_head->lru_prev = e;
	else
		c->lru_tail = e;
	c->lru_head = e;
}

/* Make e the most recently used (shard lock; e linked). */
static void lru_touch(vrange_cache *c, struct centry *e, bool listed)
{
	if (!c->max_bytes)
		return;
	pthread_mutex_lock(&c->lru_lock);
	if (listed && c->lru_head != e) {
		e->lru_prev->lru_next = e->lru_next;
		if (e->lru_next)
			e->lru_next->lru_prev = e->lru_prev;
		else
			c->lru_tail = e->lru_prev;
	}
	if (!listed || c->lru_head != e)
		lru_front_locked(c, e);
	pthread_mutex_unlock(&c->lru_lock);
}

/* (shard lock) e joins its shard. */
static void count_link(vrange_cache *c, struct cshard *s, struct centry *e)
{
	relaxed_add(&s->entries, 1);
	relaxed_add(&s->bytes, (int64_t)e->vlen);
	relaxed_add(&s->meta, (int64_t)(sizeof(*e) + e->klen));
	if (c->max_bytes)
		atomic_fetch_add(&c->live_bytes, e->vlen);
}

/* (shard lock, and e's block lock under which dead was read) e leaves. */
static void count_unlink(vrange_cache *c, struct cshard *s, struct centry *e,
			 bool dead)
{
	relaxed_add(&s->entries, -1);
	relaxed_add(&s->bytes, -(int64_t)e->vlen);
	relaxed_add(&s->meta, -(int64_t)(sizeof(*e) + e->klen));
	if (dead) {
		atomic_fetch_sub(&c->dead_entries, 1);
		atomic_fetch_sub(&c->dead_bytes, e->vlen);
	} else if (c->max_bytes) {
		atomic_fetch_sub(&c->live_bytes, e->vlen);
	}
}

static void entry_free(vrange_cache *c, struct centry *e)
{
	(void)c;
	free(e);
}

/* Out of its shard for good, waiting for its last release. */
static bool entry_detached(const struct centry *e)
{
	if (cblock_one_value(e->block))
		return atomic_load(&e->block->state) & BS_GONE;
	return atomic_load(&e->hs) & EN_DETACHED;
}

/* Gets holding e, and e out of its shard: the block's word counts them
 * for a one-value block, e's own word otherwise. */
static uint32_t entry_holds(const struct centry *e)
{
	if (cblock_one_value(e->block))
		return bs_holds(atomic_load(&e->block->state));
	return atomic_load(&e->hs) / EN_HOLD;
}

void cache_block_purged(vrange_cache *c, struct cblock *b)
{
	/* No value on b is held (its pages were volatile): drop them all. */
	for (uint32_t i = 0; i < b->nslots; i++) {
		struct centry *e = atomic_load(&b->slot[i]);

		if (e && !e->reserved && !entry_detached(e) &&
		    !atomic_load(&e->dead)) {
			atomic_store_explicit(&e->dead, true, memory_order_release);
			atomic_fetch_add(&c->dead_entries, 1);
			atomic_fetch_add(&c->dead_bytes, e->vlen);
			if (c->max_bytes)
				atomic_fetch_sub(&c->live_bytes, e->vlen);
			atomic_fetch_add(&c->purged_entries, 1);
		}
	}
}

/* e leaves the cache for good (block lock): its slot is emptied now if it
 * is not held, else by its last release.  Returns e if the caller must
 * free it (after unlocking). */
static struct centry *entry_detach(struct centry *e, bool *requeue)
{
	/* The flag and the holds in one word: exactly one of the remover
	 * and the last releaser sees both and frees. */
	if (cblock_one_value(e->block)) {
		if (bs_holds(atomic_fetch_or(&e->block->state, BS_GONE)) > 0)
			return NULL;
	} else if (atomic_fetch_or(&e->hs, EN_DETACHED) >= EN_HOLD) {
		return NULL;
	}
	*requeue = cpages_clear_slot(e->block, e->slot);
	return e;
}

/* Free what entry_detach handed back and tidy its block (no lock held). */
static void entry_finish(vrange_cache *c, struct centry *e, struct cblock *b,
			 bool requeue)
{
	if (!e)
		return;
	entry_free(c, e);
	if (requeue)
		cpages_requeue(&c->pages, b);
}

int vrange_cache_create(const struct vrange_cache_opts *opts, vrange_cache **out)
{
	vrange_cache *c;

	bool eager = opts && (opts->flags & VRANGE_CACHE_EAGER);

	if (!out || (opts && (opts->struct_size < FIRST_OPTS_SIZE ||
			      (opts->flags & ~VRANGE_CACHE_EAGER))))
		return -EINVAL;
	vr_init();
	pressure_check_cgroup();
	c = aligned_alloc(64, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	for (int i = 0; i < SHARDS; i++)
		pthread_mutex_init(&c->shard[i].lock, NULL);
	pthread_mutex_init(&c->lru_lock, NULL);
	if (cring_init(&c->ring, eager ? 0 : DEFER_BYTES) < 0) {
		free(c);
		return -ENOMEM;
	}
	cpages_init(&c->pages, opts ? opts->name : NULL, opts ? opts->priority : 0,
		    eager ? 0 : POOL_BYTES);
	c->max_bytes = opts ? opts->max_bytes : 0;
	/* Options of an older size end before cost: the default, 1. */
	c->pages.cost = opts && opts->struct_size >= COST_OPTS_SIZE &&
			opts->cost ? opts->cost : 1;
	c->id = atomic_fetch_add(&next_cache_id, 1);
	pthread_mutex_lock(&all_lock);
	c->all_next = all_caches;
	if (all_caches)
		all_caches->all_prev = c;
	all_caches = c;
	c->listed = true;
	pthread_mutex_unlock(&all_lock);
	*out = c;
	return 0;
}

int vrange_cache_destroy(vrange_cache *c)
{
	if (!c)
		return 0;
	if (cpages_busy(&c->pages))
		return -EBUSY;
	pthread_mutex_lock(&all_lock);
	if (c->listed && c->all_prev)
		c->all_prev->all_next = c->all_next;
	else if (c->listed)
		all_caches = c->all_next;
	if (c->listed && c->all_next)
		c->all_next->all_prev = c->all_prev;
	pthread_mutex_unlock(&all_lock);
	for (int i = 0; i < SHARDS; i++) {
		struct cshard *s = &c->shard[i];

		for (size_t j = 0; j < s->nbuckets; j++) {
			struct centry *e = s->buckets[j], *next;

			for (; e; e = next) {
				next = e->hnext;
				free(e);
			}
		}
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	cpages_fini(&c->pages);
	cring_fini(&c->ring);
	pthread_mutex_destroy(&c->lru_lock);
	free(c);
	return 0;
}

/* Evict released entries, least recently used first, while over the cap;
 * never keep (the entry a put just stored: a put does not drop its own value). */
static void enforce_cap(vrange_cache *c, const struct centry *keep)
{
	struct centry *gone = NULL, *e;

	if (!c->max_bytes || atomic_load(&c->live_bytes) <= c->max_bytes)
		return;
	pthread_mutex_lock(&c->lru_lock);
	for (e = c->lru_tail; e && atomic_load(&c->live_bytes) > c->max_bytes;) {
		struct centry *prev = e->lru_prev;
		struct cshard *s = shard_of(c, e->hash);
		bool requeue = false, dead;

		/* Shard before LRU elsewhere: here only try, and skip it. */
		if (pthread_mutex_trylock(&s->lock) == 0) {
			struct cblock *b = e->block;

			pthread_mutex_lock(&b->lock);
			if (entry_holds(e) == 0 && e != keep) {
				*shard_link_of(s, e) = e->hnext;
				s->n--;
				dead = atomic_load(&e->dead);
				entry_detach(e, &requeue);
				count_unlink(c, s, e, dead);
				if (!dead)
					atomic_fetch_add(&c->evictions, 1);
				if (prev)
					prev->lru_next = e->lru_next;
				else
					c->lru_head = e->lru_next;
				if (e->lru_next)
					e->lru_next->lru_prev = prev;
				else
					c->lru_tail = prev;
				e->hnext = gone;
				gone = e;
			}
			pthread_mutex_unlock(&b->lock);
			pthread_mutex_unlock(&s->lock);
		}
		e = prev;
	}
	pthread_mutex_unlock(&c->lru_lock);
	while ((e = gone)) {
		struct cblock *b = e->block;

		gone = e->hnext;
		entry_finish(c, e, b, true);
	}
}

/* Reserve a slot for a new entry of the key, held (non-volatile). */
static int entry_reserve(vrange_cache *c, const void *key, size_t klen,
			 size_t vlen, struct centry **out)
{
	struct centry *e;
	struct cblock *b;
	bool requeue, held;
	int ret;

	if (c->max_bytes && vlen > c->max_bytes)
		return -E2BIG;
	e = calloc(1, sizeof(*e) + klen);
	if (!e)
		return -ENOMEM;
	memcpy(e->key, key, klen);
	e->klen = (uint32_t)klen;
	e->hash = key_hash(e->key, klen);
	e->vlen = vlen;
	e->reserved = true; /* before the slot is visible to block_kill */
	ret = cpages_alloc(&c->pages, vlen, e, &b, &e->slot, &held);
	if (ret < 0) {
		free(e);
		return ret;
	}
	e->block = b;
	ret = held ? 0 : chold_take(c, b);
	if (ret < 0) {
		pthread_mutex_lock(&b->lock);
		requeue = cpages_clear_slot(b, e->slot);
		pthread_mutex_unlock(&b->lock);
		entry_finish(c, e, b, requeue);
		return ret;
	}
	*out = e;
	return 0;
}

/*
 * Drop a put's own hold of b (a reservation's, or an in-place copy's),
 * after the shard lock.  The value may have been removed meanwhile: a
 * one-value block's holds are its value's, so that was its last hold -
 * free it here, as its last release would; a small value's block may be
 * left empty - free that.
 */
static void put_drop(vrange_cache *c, struct cblock *b)
{
	struct centry *e;
	bool requeue;

	if (chold_release_value(c, b) != 1) {
		/* Its last value may have gone while this hold kept the block
		 * (see vrange_cache_release): free it now then. */
		if (atomic_load(&b->used) == 0)
			cpages_requeue(&c->pages, b);
		return;
	}
	pthread_mutex_lock(&b->lock);
	e = atomic_load(&b->slot[0]);
	requeue = cpages_clear_slot(b, 0);
	pthread_mutex_unlock(&b->lock);
	entry_finish(c, e, b, requeue);
}

/* Publish a reserved entry, replacing the key's old one; drops the
 * reservation's hold.  -ENOMEM (the shard's first table could not be had):
 * nothing done, e still reserved. */
static int entry_commit(vrange_cache *c, struct centry *e)
{
	struct cshard *s = shard_of(c, e->hash);
	struct centry **l, *old = NULL, *gone = NULL;
	struct cblock *ob = NULL, *b = e->block;
	bool requeue = false;

	pthread_mutex_lock(&s->lock);
	shard_grow(c, s);
	if (!s->nbuckets) {
		pthread_mutex_unlock(&s->lock);
		return -ENOMEM;
	}
	l = shard_find(s, e->hash, e->key, e->klen);
	if (l) {
		old = *l;
		*l = old->hnext;
		s->n--;
		lru_del(c, old);
	}
	l = &s->buckets[e->hash & (s->nbuckets - 1)];
	e->hnext = *l;
	*l = e;
	s->n++;
	count_link(c, s, e);
	lru_touch(c, e, false);
	if (old) {
		ob = old->block;
		pthread_mutex_lock(&ob->lock);
		count_unlink(c, s, old, atomic_load(&old->dead));
		gone = entry_detach(old, &requeue);
		pthread_mutex_unlock(&ob->lock);
	}
	pthread_mutex_unlock(&s->lock);
	put_drop(c, b); /* the reservation's hold */
	entry_finish(c, gone, ob, requeue);
	enforce_cap(c, e);
	return 0;
}

/* Drop a reservation (no lock held; e->reserved already cleared or not). */
static void entry_abort(vrange_cache *c, struct centry *e)
{
	struct cblock *b = e->block;
	bool requeue;

	pthread_mutex_lock(&b->lock);
	atomic_store(&e->reserved, false);
	requeue = cpages_clear_slot(b, e->slot);
	pthread_mutex_unlock(&b->lock);
	chold_drop(c, b);
	entry_finish(c, e, b, requeue);
}

/*
 * A put over a released value that a new one of its size would replace:
 * copy it where the old one lies, without a slot to allocate and one to
 * free.  Nobody can hold the old value meanwhile: holds start under the
 * shard lock, held here, and this put's own hold keeps its pages
 * non-volatile.  -EAGAIN: not such a put (or the old value proved purged,
 * or its pages' state could not be had): take a new slot.
 */
/* A value of cost `cost` (0: the cache's) is on b: its pages are marked
 * at the dearest cost put there since the block was made. */
static void raise_cost(struct cblock *b, uint32_t cost)
{
	uint32_t cur = atomic_load_explicit(&b->cost, memory_order_relaxed);

	while (cost > cur &&
	       !atomic_compare_exchange_weak_explicit(&b->cost, &cur, cost,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
}

static int put_in_place(vrange_cache *c, const void *key, size_t klen,
			const void *val, size_t vlen, uint32_t cost)
{
	uint64_t h = key_hash(key, klen);
	struct cshard *s = shard_of(c, h);
	struct centry **l, *e = NULL;
	struct cblock *b = NULL;
	int64_t d;

	pthread_mutex_lock(&s->lock);
	l = shard_find(s, h, key, klen);
	if (!l)
		goto out;
	e = *l;
	b = e->block;
	if (entry_holds(e) || atomic_load(&e->dead) || !cpages_fits(b, vlen) ||
	    chold_take(c, b) < 0) {
		e = NULL;
		goto out;
	}
	if (atomic_load_explicit(&e->dead, memory_order_acquire)) {
		chold_drop(c, b); /* found purged by that hold: a new slot */
		e = NULL;
		goto out;
	}
	memcpy(cblock_ptr(b, e->slot), val, vlen);
	raise_cost(b, cost);
	d = (int64_t)vlen - (int64_t)e->vlen;
	relaxed_add(&s->bytes, d);
	if (c->max_bytes)
		atomic_fetch_add(&c->live_bytes, (uint64_t)d);
	e->vlen = vlen;
	lru_touch(c, e, true);
out:
	pthread_mutex_unlock(&s->lock);
	if (!e)
		return -EAGAIN;
	/* e may be removed (and freed) from here on: b, not e->block; e is
	 * only compared with. */
	put_drop(c, b);
	enforce_cap(c, e);
	return 0;
}

static int put_cost(vrange_cache *c, const void *key, size_t klen,
		    const void *val, size_t vlen, uint32_t cost)
{
	struct centry *e;
	int ret;

	if (!c || bad_key(key, klen) || !val || vlen == 0)
		return -EINVAL;
	if (c->max_bytes && vlen > c->max_bytes)
		return -E2BIG;
	ret = put_in_place(c, key, klen, val, vlen, cost);
	if (ret != -EAGAIN)
		return ret;
	ret = entry_reserve(c, key, klen, vlen, &e);
	if (ret < 0)
		return ret;
	memcpy(cblock_ptr(e->block, e->slot), val, vlen);
	raise_cost(e->block, cost);
	/* No lock: nobody else knows e, and its held block cannot be killed. */
	atomic_store_explicit(&e->reserved, false, memory_order_relaxed);
	ret = entry_commit(c, e);
	if (ret < 0)
		entry_abort(c, e);
	return ret;
}

int vrange_cache_put(vrange_cache *c, const void *key, size_t klen,
		     const void *val, size_t vlen)
{
	return put_cost(c, key, klen, val, vlen, c ? c->pages.cost : 1);
}

int vrange_cache_put_cost(vrange_cache *c, const void *key, size_t klen,
			  const void *val, size_t vlen, uint32_t cost)
{
	if (!cost)
		return -EINVAL;
	return put_cost(c, key, klen, val, vlen, cost);
}

int vrange_cache_reserve(vrange_cache *c, const void *key, size_t klen,
			 size_t vlen, void **buf)
{
	struct centry *e;
	int ret;

	if (!c || bad_key(key, klen) || vlen == 0 || !buf)
		return -EINVAL;
	ret = entry_reserve(c, key, klen, vlen, &e);
	if (ret == 0)
		*buf = cblock_ptr(e->block, e->slot);
	return ret;
}

/* The open reservation starting at buf, with its block locked; NULL if
 * buf is not one. */
static struct centry *find_reserved(vrange_cache *c, const void *buf)
{
	struct cblock *b;
	struct centry *e;
	uint32_t slot;

	b = cpages_find_locked(&c->pages, buf, &slot);
	if (!b)
		return NULL;
	e = atomic_load(&b->slot[slot]);
	if (!e || !e->reserved) {
		pthread_mutex_unlock(&b->lock);
		return NULL;
	}
	return e;
}

int vrange_cache_commit(vrange_cache *c, void *buf)
{
	struct centry *e;

	int ret;

	if (!c || !buf || !(e = find_reserved(c, buf)))
		return -EINVAL;
	e->reserved = false;
	pthread_mutex_unlock(&e->block->lock);
	ret = entry_commit(c, e);
	if (ret < 0) /* still open: the caller may retry or abort */
		atomic_store(&e->reserved, true);
	return ret;
}

int vrange_cache_abort(vrange_cache *c, void *buf)
{
	struct centry *e;

	if (!c || !buf || !(e = find_reserved(c, buf)))
		return -EINVAL;
	e->reserved = false; /* claimed: a second abort or commit fails */
	pthread_mutex_unlock(&e->block->lock);
	entry_abort(c, e);
	return 0;
}

/* Under e's shard lock: hold e (1), or find it dead (0), or -errno. */
static int entry_hold(vrange_cache *c, struct centry *e)
{
	int ret;

	if (atomic_load_explicit(&e->dead, memory_order_acquire))
		return 0;
	ret = chold_take(c, e->block);
	if (ret < 0)
		return ret;
	/* After the hold: a hold that found the block purged killed e. */
	if (atomic_load_explicit(&e->dead, memory_order_acquire)) {
		chold_drop(c, e->block);
		return 0;
	}
	/* A one-value block's hold is the value's: one atomic per get. */
	if (!cblock_one_value(e->block))
		atomic_fetch_add_explicit(&e->hs, EN_HOLD, memory_order_relaxed);
	return 1;
}

int vrange_cache_get(vrange_cache *c, const void *key, size_t klen,
		     const void **val, size_t *vlen)
{
	struct centry **l, *e, *gone = NULL;
	struct cblock *b = NULL;
	struct cshard *s;
	bool requeue = false;
	uint64_t h;
	int ret;

	if (!c || bad_key(key, klen) || !val || !vlen)
		return -EINVAL;
	h = key_hash(key, klen);
	s = shard_of(c, h);
	pthread_mutex_lock(&s->lock);
	l = shard_find(s, h, key, klen);
	if (!l) {
		s->misses++;
		ret = -ENOENT;
		goto out;
	}
	e = *l;
	b = e->block;
	ret = entry_hold(c, e);
	if (ret > 0) {
		s->hits++;
		lru_touch(c, e, true);
		*val = cblock_ptr(b, e->slot);
		*vlen = e->vlen;
		last_get.cache_id = c->id;
		last_get.ptr = *val;
		last_get.b = b;
		last_get.slot = e->slot;
		ret = 0;
	} else if (ret == 0) { /* purged: the entry goes, the get misses */
		*l = e->hnext;
		s->n--;
		lru_del(c, e);
		pthread_mutex_lock(&b->lock);
		count_unlink(c, s, e, true);
		gone = entry_detach(e, &requeue);
		pthread_mutex_unlock(&b->lock);
		s->misses++;
		ret = -ENOENT;
	}
out:
	pthread_mutex_unlock(&s->lock);
	entry_finish(c, gone, b, requeue);
	return ret;
}

/* Does the last-got hint still describe val?  Read once: with a release
 * too many from another thread, the block may be changing under us. */
static bool hint_matches(const struct cblock *b, uint32_t slot, const void *val)
{
	const struct cchunk *ch = __atomic_load_n(&b->chunk, __ATOMIC_RELAXED);

	return ch && ch->base + cblock_off(b) + (size_t)slot * b->slot_size ==
		     (const char *)val;
}

/* Drop one get's hold of e on b: -EINVAL none, 1 it was the last hold of
 * a removed value (the caller frees it), else 0. */
static int entry_release(vrange_cache *c, struct centry *e, struct cblock *b)
{
	uint32_t hs;
	int last;

	if (cblock_one_value(b)) {
		/* A reservation holds its block but is not a get's hold. */
		if (atomic_load_explicit(&e->reserved, memory_order_relaxed))
			return -EINVAL;
		return chold_release_value(c, b);
	}
	hs = atomic_load_explicit(&e->hs, memory_order_relaxed);
	do {
		if (hs < EN_HOLD) /* one release more than gets, or a reservation */
			return -EINVAL;
	} while (!atomic_compare_exchange_weak_explicit(&e->hs, &hs, hs - EN_HOLD,
			memory_order_release, memory_order_relaxed));
	last = hs - EN_HOLD == EN_DETACHED;
	chold_drop(c, b);
	return last;
}

int vrange_cache_release(vrange_cache *c, const void *val)
{
	struct centry *e, *gone = NULL;
	struct cblock *b;
	bool requeue = false;
	uint32_t slot;
	int last;

	if (!c || !val)
		return -EINVAL;
	b = last_get.b;
	slot = last_get.slot;
	if (last_get.ptr != val || last_get.cache_id != c->id ||
	    !hint_matches(b, slot, val))
		b = cpages_find(&c->pages, val, &slot);
	last_get.ptr = NULL;
	if (!b)
		return -EINVAL;
	e = atomic_load_explicit(&b->slot[slot], memory_order_acquire);
	if (!e)
		return -EINVAL;
	last = entry_release(c, e, b);
	if (last < 0)
		return last;
	if (last) { /* the last hold of a removed value */
		pthread_mutex_lock(&b->lock);
		requeue = cpages_clear_slot(b, e->slot);
		pthread_mutex_unlock(&b->lock);
		gone = e;
	} else {
		/* Its last value may have gone while this hold kept the block
		 * (a remove after our count dropped): free it now then. */
		requeue = atomic_load(&b->used) == 0;
	}
	if (gone)
		entry_free(c, gone);
	if (requeue)
		cpages_requeue(&c->pages, b);
	enforce_cap(c, NULL);
	return 0;
}

int vrange_cache_remove(vrange_cache *c, const void *key, size_t klen)
{
	struct centry **l, *e, *gone;
	struct cblock *b;
	struct cshard *s;
	bool requeue = false, dead;
	uint64_t h;

	if (!c || bad_key(key, klen))
		return -EINVAL;
	h = key_hash(key, klen);
	s = shard_of(c, h);
	pthread_mutex_lock(&s->lock);
	l = shard_find(s, h, key, klen);
	if (!l) {
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	e = *l;
	*l = e->hnext;
	s->n--;
	lru_del(c, e);
	b = e->block;
	pthread_mutex_lock(&b->lock);
	dead = atomic_load(&e->dead);
	count_unlink(c, s, e, dead);
	gone = entry_detach(e, &requeue);
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_unlock(&s->lock);
	entry_finish(c, gone, b, requeue);
	return dead ? -ENOENT : 0;
}

int vrange_cache_get_stats(vrange_cache *c, struct vrange_cache_stats *out)
{
	struct vrange_cache_stats st = { 0 };
	uint64_t book;

	if (!c || !out || out->struct_size < FIRST_STATS_SIZE)
		return -EINVAL;
	st.resident_bytes = sizeof(*c) + atomic_load(&c->pages.bytes);
	for (int i = 0; i < SHARDS; i++) {
		struct cshard *s = &c->shard[i];

		pthread_mutex_lock(&s->lock);
		st.hits += s->hits;
		st.misses += s->misses;
		st.entries += atomic_load_explicit(&s->entries, memory_order_relaxed);
		st.value_bytes += atomic_load_explicit(&s->bytes, memory_order_relaxed);
		st.resident_bytes += atomic_load_explicit(&s->meta, memory_order_relaxed);
		pthread_mutex_unlock(&s->lock);
	}
	st.struct_size = out->struct_size;
	/* Bookkeeping is malloc'd and stays; of the pages, what is in memory
	 * now (a purge lowers it), and what the blocks were given. */
	book = st.resident_bytes;
	st.resident_bytes = book + cpages_resident(&c->pages);
	st.allocated_bytes = book + atomic_load(&c->pages.page_bytes);
	st.entries -= atomic_load(&c->dead_entries);
	st.value_bytes -= atomic_load(&c->dead_bytes);
	st.purged_entries = atomic_load(&c->purged_entries);
	st.evictions = atomic_load(&c->evictions);
	/* An earlier layout gets the fields it has; a later one keeps the
	 * fields this version does not know. */
	memcpy(out, &st, out->struct_size < sizeof(st) ? out->struct_size : sizeof(st));
	return 0;
}
