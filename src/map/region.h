/* SPDX-License-Identifier: MIT */
/* region.h - the library's mappings of memfds (internal view of a region). */
#ifndef VRANGE_REGION_H
#define VRANGE_REGION_H

#include <stdatomic.h>

#include "file_state.h"
#include "pressure.h"
#include "seqlock.h"
#include "vrange.h"

struct vrange_region {
	/* First: the header's inline fast path reads it through the handle
	 * (docs/abi.md, "The inline fast path").  Its prio and cost are the
	 * region's (vrange_region_set_priority/_cost), read atomically. */
	struct vrange_region_inline in;
	struct vfile *file;
	struct vmap map;            /* base, size, SIGBUS flag; on file->maps */
	int fd;                     /* the region's own descriptor */
	unsigned int access;        /* VRANGE_ACCESS_ZERO or _SIGBUS */
	vrange_refill_fn refill;    /* guarded by file->lock */
	void *refill_arg;
};

/*
 * The region holding [addr, addr + len), or NULL.  *partly is set when addr
 * is inside a region but the range runs out of it.  Async-signal-safe with
 * respect to the calling thread (the table lock is never held while the
 * library touches application memory).
 */
struct vrange_region *region_lookup(const void *addr, size_t len, bool *partly) VR_HIDDEN;
/*
 * One whole page of a region (the pair a page cache makes on every fetch):
 * checked in a few instructions and done with no call but the clock's,
 * where the page's word is all there is to it (vfile_fast_mark).  Anything
 * else - more or less than one page, off the page grid, outside the
 * region, a word that needs the lock - takes the general way, which checks
 * the arguments itself.
 */
static inline bool one_page(const struct vrange_region *r, size_t off, size_t len)
{
	return __builtin_expect(r && len == vr_page_size && !(off & (len - 1)) &&
				off < r->map.size, 1);
}

/* The region's priority and the cost of its plain marks (0: 1). */
static inline int32_t region_prio(const struct vrange_region *r)
{
	return __atomic_load_n(&r->in.prio, __ATOMIC_RELAXED);
}

static inline uint32_t region_cost(const struct vrange_region *r)
{
	return __atomic_load_n(&r->in.cost, __ATOMIC_RELAXED);
}

static inline bool region_fast_vol(struct vrange_region *r, size_t off, size_t len)
{
	uint32_t cost;
	uint64_t seq;

	if (!one_page(r, off, len))
		return false;
	/* The stamp first: across the clock's call only r and off live. */
	seq = vr_next_seq_inline();
	cost = region_cost(r);
	if (!vfile_fast_mark(r->file, off >> vr_page_shift, region_prio(r),
			     cost ? cost : 1, seq))
		return false;
	pressure_note_mark();
	return true;
}

static inline bool region_fast_nonvol(struct vrange_region *r, size_t off, size_t len)
{
	return one_page(r, off, len) && vfile_fast_clear(r->file, off >> vr_page_shift);
}

/* vrange_mark_volatile / vrange_mark_nonvolatile for the library's own
 * callers (vrange()): no call through the PLT. */
int region_mark_volatile(struct vrange_region *r, size_t off, size_t len) VR_HIDDEN;
int region_mark_nonvolatile(struct vrange_region *r, size_t off, size_t len) VR_HIDDEN;

/*
 * The same, first trying the calling thread's last hit (no search while
 * the table is unchanged): for vrange(), which a program calls on the
 * same region again and again.  The hit is checked inline (no call):
 * while the table's version is the one the hit was taken at, no write
 * section has begun since (a writer makes it odd first), so the entry is
 * still in the table and a lookup now would find it - the hit is a lookup
 * linearized at the version's load.  gen is odd while the thread rewrites
 * it (region_lookup_miss): a signal handler that calls vrange() in between
 * ignores it (and leaves it alone).  A version 2^32 changes of the table
 * later could match again: four billion region creates and destroys
 * between two calls of one thread.
 */
struct region_hit_entry {
	char *base;
	size_t size;
	struct vrange_region *r;
};
struct region_last_hit {
	uint32_t gen, ver;
	struct region_hit_entry e;
};
extern __thread struct region_last_hit region_last_hit
	__attribute__((tls_model("initial-exec"))) VR_HIDDEN;
extern struct seqlock region_table_seq VR_HIDDEN;
struct vrange_region *region_lookup_miss(const void *addr, size_t len,
					 bool *partly) VR_HIDDEN;

static inline struct vrange_region *region_lookup_last(const void *addr,
						       size_t len, bool *partly)
{
	uint32_t g = region_last_hit.gen, v;
	struct region_hit_entry e;

	atomic_signal_fence(memory_order_acquire);
	e = region_last_hit.e;
	v = region_last_hit.ver;
	atomic_signal_fence(memory_order_acquire);
	if (!(g & 1) && e.r && region_last_hit.gen == g &&
	    atomic_load_explicit(&region_table_seq.seq, memory_order_acquire) == v) {
		size_t off = (size_t)((const char *)addr - e.base);

		if (off < e.size && len <= e.size - off) {
			*partly = false;
			return e.r;
		}
	}
	return region_lookup_miss(addr, len, partly);
}

/* vrange_mark_volatile_cost with the place in the purge order given: seq,
 * an earlier vr_next_seq() stamp (0: now; vfile_mark_volatile_at), and
 * cost (0: the region's, as vrange_mark_volatile).  The cache's deferred
 * releases join the order when they were released, at their block's cost. */
int region_mark_volatile_at(struct vrange_region *r, size_t off, size_t len,
			    uint64_t seq, uint32_t cost) VR_HIDDEN;

/* Live regions, for stats. */
uint64_t region_count(void) VR_HIDDEN;

/* Check the byte range [off, off+len) against size; round to pages.
 * inward: whole pages only (marking volatile); else outward.  len 0 is an
 * empty range (start == end) whatever off is.  0 / -EINVAL. */
int vr_page_range(uint64_t off, uint64_t len, uint64_t size, bool inward,
		  uint64_t *start, uint64_t *end) VR_HIDDEN;

/* At start-up (and in a fork child), once plain_fence_init has run: the
 * library part of the inline path says whether marks may be plain
 * (vrange_inline_lib()->plain, copied into every region's head). */
void region_inline_start(void) VR_HIDDEN;

/* pthread_atfork handlers (see env.c). */
void region_fork_prepare(void) VR_HIDDEN;
void region_fork_parent(void) VR_HIDDEN;
void region_fork_child(void) VR_HIDDEN;

#endif
