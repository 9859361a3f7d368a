/* SPDX-License-Identifier: MIT */
/*
 * any_mapping.h - vrange() on memory the library did not create (contract
 * section 5): private anonymous memory, and MAP_SHARED mappings of
 * shared-memory files the application mapped itself (internal).
 */
#ifndef VRANGE_ANY_MAPPING_H
#define VRANGE_ANY_MAPPING_H

#include <stddef.h>
#include <stdint.h>

#include "env.h"

struct vfile;
struct vmap;

/* vrange() for an address range outside every region. */
int anymap_vrange(void *addr, size_t len, int mode, int *purged) VR_HIDDEN;

/*
 * The purge engine's discard step for the anonymous-memory state (pages are
 * virtual page numbers).  Caller holds the tree lock.  Verifies that the memory
 * is still what was marked, frees resident pages, leaves pages that hold no
 * data volatile (they are put at the back of the purge order).
 */
void anymap_discard(struct vfile *f, uint64_t start, uint64_t end,
		    uint64_t *freed) VR_HIDDEN;

/* mark_nonvolatile found purged anonymous pages: fault fresh zero pages
 * there from now on.  0 or -errno (then they may still raise SIGBUS: the
 * caller keeps them purged).  Async-signal-safe. */
int anymap_unpoison(uint64_t start, uint64_t end) VR_HIDDEN;

/*
 * The file and file page behind addr, if addr lies in an application
 * shared-file mapping vrange() knows; NULL otherwise.  No lock, no
 * allocation: async-signal-safe (the SIGBUS fixup).  No reference is
 * taken: the caller is a thread that faulted on that mapping, so it is
 * still there.
 */
struct vfile *anymap_file_at(const void *addr, uint64_t *page) VR_HIDDEN;

/*
 * Notice what the application unmapped or replaced since: file entries
 * whose address maps something else are dropped (with their reference),
 * anonymous state of memory that is gone is forgotten, and files nothing
 * refers to any more are let go (vfile_sweep_orphans; that part also
 * before this layer's first use).  Run by
 * vrange_get_stats(), and at the start of purge passes (at most ten times
 * a second: anymap_sweep_for_purge); takes no lock the caller may hold,
 * except that the purge engine's may be held.
 */
void anymap_sweep(void) VR_HIDDEN;
void anymap_sweep_for_purge(void) VR_HIDDEN;

#endif
