/* SPDX-License-Identifier: MIT */
/*
 * region_table.c - regions by base address, for vrange()'s lookup and the
 * SIGBUS handlers, read without a lock (seqlock.h).
 *
 * Two levels, so that neither a create nor a destroy moves more than a
 * block whatever the number of regions (one sorted array moved all of
 * them: with mmap placing each new region below the last, every create
 * shifted the whole table, O(n) at 20,000 regions): a sorted array of
 * blocks (each named by its first base) and, in each block, up to BLOCK
 * entries sorted by base.  Entries carry the extent, so a lookup never
 * follows a region pointer that a concurrent destroy may be freeing.
 * Neither the top array nor a block is ever freed (a reader may still
 * scan it): a grown top array is retired, an emptied block kept for reuse.
 *
 * Every change a reader could see half done sits inside one write section
 * of the seqlock.  A split is two: the new block (a copy of the old one's
 * upper half) enters the top array first, and only then does the old
 * block let go of those entries; in between, both hold them and a lookup
 * finds them through either.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "region_table.h"
#include "seqlock.h"

#define BLOCK 128

struct entry {
	char *base;
	size_t size;
	struct vrange_region *r;
};

struct block {
	size_t n;
	struct block *next_free;
	struct entry e[BLOCK];
};

struct top {
	char *first;        /* e[0].base of the block (while it has entries) */
	struct block *b;
};

/* upper() reads both kinds of item by their leading base address. */
_Static_assert(offsetof(struct entry, base) == 0 && offsetof(struct top, first) == 0,
	       "items begin with their base");

static pthread_mutex_t table_write = PTHREAD_MUTEX_INITIALIZER;
struct seqlock region_table_seq;
#define table_seq region_table_seq
static struct seq_array *_Atomic tops;
static struct block *free_blocks;
static _Atomic uint64_t live_regions;

/* Index of the first of the n items (stride bytes apart, each beginning
 * with its base address) whose base is above addr. */
static size_t upper(const void *items, size_t n, size_t stride, const void *addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *base = *(char *const *)(const void *)
			((const char *)items + mid * stride);

		if (base <= (const char *)addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static size_t top_upper(const struct top *t, size_t n, const void *addr)
{
	return upper(t, n, sizeof(*t), addr);
}

static size_t entry_upper(const struct entry *e, size_t n, const void *addr)
{
	return upper(e, n, sizeof(*e), addr);
}

static struct block *block_new(void)
{
	struct block *b = free_blocks;

	if (b) {
		free_blocks = b->next_free;
		b->n = 0;
		return b;
	}
	return calloc(1, sizeof(*b));
}

/* Kept for reuse, never freed: a reader may still scan it. */
static void block_keep(struct block *b)
{
	b->next_free = free_blocks;
	free_blocks = b;
}

static struct top *tops_at(size_t *n)
{
	struct seq_array *a = atomic_load(&tops);

	*n = a ? a->n : 0;
	return a ? SEQ_ARRAY_AT(a, struct top) : NULL;
}

/* Writer: block j is full; move its upper half to a block of its own. */
static int split(size_t j)
{
	size_t n, half = BLOCK / 2;
	struct top *t = tops_at(&n);
	struct block *old = t[j].b, *nb = block_new();
	struct top entry;

	if (!nb)
		return -ENOMEM;
	memcpy(nb->e, old->e + half, (BLOCK - half) * sizeof(struct entry));
	nb->n = BLOCK - half;
	entry.first = nb->e[0].base;
	entry.b = nb;
	if (seq_array_insert(&tops, &table_seq, j + 1, &entry, sizeof(entry)) < 0) {
		block_keep(nb);
		return -ENOMEM;
	}
	seq_write_begin(&table_seq);
	old->n = half;
	seq_write_end(&table_seq);
	return 0;
}

/* Writer: the block an entry at base belongs in (the last one starting at
 * or below it, else the first), one block made if there is none. */
static int block_for(const char *base, size_t *j)
{
	size_t n;
	struct top *t = tops_at(&n);

	if (n == 0) {
		struct block *b = block_new();
		struct top entry = { (char *)base, b };

		if (!b)
			return -ENOMEM;
		if (seq_array_insert(&tops, &table_seq, 0, &entry, sizeof(entry)) < 0) {
			block_keep(b);
			return -ENOMEM;
		}
		*j = 0;
		return 0;
	}
	*j = top_upper(t, n, base);
	*j = *j ? *j - 1 : 0;
	return 0;
}

int region_table_insert(char *base, size_t size, struct vrange_region *r)
{
	struct entry e = { base, size, r };
	struct top *t;
	struct block *b;
	size_t j, i, n;
	int ret;

	pthread_mutex_lock(&table_write);
	ret = block_for(base, &j);
	if (ret == 0 && tops_at(&n)[j].b->n == BLOCK) {
		ret = split(j);
		if (ret == 0)
			ret = block_for(base, &j);
	}
	if (ret == 0) {
		t = tops_at(&n);
		b = t[j].b;
		i = entry_upper(b->e, b->n, base);
		seq_write_begin(&table_seq);
		memmove(b->e + i + 1, b->e + i, (b->n - i) * sizeof(struct entry));
		b->e[i] = e;
		b->n++;
		if (i == 0)
			t[j].first = base;
		seq_write_end(&table_seq);
		atomic_fetch_add(&live_regions, 1);
	}
	pthread_mutex_unlock(&table_write);
	return ret;
}

void region_table_remove(const char *base, const struct vrange_region *r)
{
	struct top *t;
	struct block *b;
	size_t j, i, n;

	pthread_mutex_lock(&table_write);
	t = tops_at(&n);
	j = top_upper(t, n, base);
	if (j == 0)
		goto out;
	b = t[--j].b;
	/* Bases are distinct (the regions' mappings): the entry just below
	 * the first base above r's is r's. */
	i = entry_upper(b->e, b->n, base);
	if (i == 0 || b->e[i - 1].r != r)
		goto out;
	i--;
	seq_write_begin(&table_seq);
	memmove(b->e + i, b->e + i + 1, (b->n - i - 1) * sizeof(struct entry));
	b->n--;
	if (i == 0 && b->n)
		t[j].first = b->e[0].base;
	seq_write_end(&table_seq);
	atomic_fetch_sub(&live_regions, 1);
	if (b->n == 0) {
		/* An empty block is harmless to a lookup meanwhile. */
		seq_array_remove(atomic_load(&tops), &table_seq, j, sizeof(struct top));
		block_keep(b);
	}
out:
	pthread_mutex_unlock(&table_write);
}

/* The lookup; on a hit also the entry (*hit) and the table's version it
 * was read under (*ver). */
static inline struct vrange_region *lookup(const void *addr, size_t len,
					   bool *partly, struct entry *hit,
					   uint32_t *ver)
{
	struct vrange_region *r;
	const char *next;
	uint32_t v;

	do {
		const struct seq_array *a;
		const struct top *t;
		size_t j, n;

		v = seq_read_begin(&table_seq);
		r = NULL;
		*partly = false;
		a = atomic_load_explicit(&tops, memory_order_acquire);
		if (!a)
			break;
		t = SEQ_ARRAY_AT(a, const struct top);
		/* Torn counts are caught by the retry; stay inside. */
		n = a->n < a->cap ? a->n : a->cap;
		j = top_upper(t, n, addr);
		next = j < n ? t[j].first : NULL;
		if (j > 0) {
			const struct block *b = t[j - 1].b;
			size_t bn = b->n < BLOCK ? b->n : BLOCK;
			size_t i = entry_upper(b->e, bn, addr);

			if (i > 0) {
				struct entry c = b->e[i - 1];
				size_t off = (size_t)((const char *)addr - c.base);

				if (off < c.size) {
					if (len <= c.size - off) {
						r = c.r;
						*hit = c;
					} else
						*partly = true;
				}
			}
			if (i < bn)
				next = b->e[i].base;
		}
		/* A range that starts before a region and runs into it. */
		if (!r && !*partly && next &&
		    (size_t)(next - (const char *)addr) < len)
			*partly = true;
	} while (seq_read_retry(&table_seq, v));
	*ver = v;
	return r;
}

struct vrange_region *region_lookup(const void *addr, size_t len, bool *partly)
{
	struct entry hit;
	uint32_t v;

	return lookup(addr, len, partly, &hit, &v);
}

/*
 * The thread's last hit: its entry and the table's version then.  While
 * the version is unchanged no write section has begun since (a writer
 * makes it odd first), so the entry is still in the table and a lookup now
 * would find it: the hit is a lookup linearized at the version's load.
 * gen is odd while the thread rewrites it: a signal handler that calls
 * vrange() in between ignores it (and leaves it alone).  A version 2^32
 * changes of the table later could match again: four billion region
 * creates and destroys between two calls of one thread.
 */
_Static_assert(sizeof(struct entry) == sizeof(struct region_hit_entry) &&
	       offsetof(struct entry, r) == offsetof(struct region_hit_entry, r),
	       "the last hit's entry");
__thread struct region_last_hit region_last_hit __attribute__((tls_model("initial-exec")));
#define last_hit region_last_hit

struct vrange_region *region_lookup_miss(const void *addr, size_t len, bool *partly)
{
	uint32_t g = last_hit.gen, v;
	struct entry e;
	struct vrange_region *r;

	atomic_signal_fence(memory_order_acquire);
	r = lookup(addr, len, partly, &e, &v);
	if (r && !(g & 1) && last_hit.gen == g) {
		last_hit.gen = g + 1;
		atomic_signal_fence(memory_order_release);
		memcpy(&last_hit.e, &e, sizeof(e));
		last_hit.ver = v;
		atomic_signal_fence(memory_order_release);
		last_hit.gen = g + 2;
	}
	return r;
}

uint64_t region_count(void)
{
	return atomic_load(&live_regions);
}

void region_fork_prepare(void)
{
	pthread_mutex_lock(&table_write);
}

void region_fork_parent(void)
{
	pthread_mutex_unlock(&table_write);
}

void region_fork_child(void)
{
	pthread_mutex_init(&table_write, NULL);
}
