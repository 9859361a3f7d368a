/* SPDX-License-Identifier: MIT */
/* region.h - the library's mappings of memfds (internal view of a region). */
#ifndef VRANGE_REGION_H
#define VRANGE_REGION_H

#include <stdatomic.h>

#include "file_state.h"
#include "vrange.h"

struct vrange_region {
	struct vfile *file;
	struct vmap map;            /* base, size, SIGBUS flag; on file->maps */
	int fd;                     /* the region's own descriptor */
	unsigned int access;        /* VRANGE_ACCESS_ZERO or _SIGBUS */
	_Atomic int prio;
	_Atomic uint32_t cost; /* of plain marks; 0 = the default, 1 */
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
/* vrange_mark_volatile / vrange_mark_nonvolatile for the library's own
 * callers (vrange()): no call through the PLT. */
int region_mark_volatile(struct vrange_region *r, size_t off, size_t len) VR_HIDDEN;
int region_mark_nonvolatile(struct vrange_region *r, size_t off, size_t len) VR_HIDDEN;

/* The same, first trying the calling thread's last hit (no search while
 * the table is unchanged): for vrange(), which a program calls on the
 * same region again and again. */
struct vrange_region *region_lookup_last(const void *addr, size_t len,
					 bool *partly) VR_HIDDEN;

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

/* pthread_atfork handlers (see env.c). */
void region_fork_prepare(void) VR_HIDDEN;
void region_fork_parent(void) VR_HIDDEN;
void region_fork_child(void) VR_HIDDEN;

#endif
