/* SPDX-License-Identifier: MIT */
/*
 * state_pool.h - where the state of a region that nobody else holds yet
 * lives (internal).
 *
 * A region's state is a tree arena and a header with its lock, laid out as
 * a library file's metadata (shared_file.h).  Until the region's file can
 * be reached by anybody but this process (its fd handed out, a second
 * reference, see file_state.c), that state is a slot of one memfd per
 * process, "vrange-pool", mapped once: creating a region then costs no
 * descriptor, no mapping and no system call for its state.  vrangectl
 * reads a slot through the pool's descriptor like any tree (publish.h).
 *
 * fork: states move to metadata files first (file_state.c); one that
 * could not is shared through the pool's pages (a shared mapping), the
 * same file's state in both processes under the same process-shared lock.
 * So that neither hands out a slot the other still uses, the child never
 * allocates from the pool it inherited ("sealed": it goes with its last
 * slot there), and the parent never reuses a slot that was live at the
 * fork.  Slots are never moved: readers may spin on a lock in a slot
 * until its owner frees it.  The process's own pool stays open, empty or
 * not, like the publication.
 */
#ifndef VRANGE_STATE_POOL_H
#define VRANGE_STATE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"

struct pool;

struct pool_slot {
	struct pool *pool;
	uint64_t off;   /* within the pool memfd */
	uint32_t bytes; /* the slot's size (a power of two) */
	void *addr;
	int fd;         /* the pool's descriptor (the pool's, not ours) */
	bool forked;    /* live at a fork: the child may use it (the
			 * parent's flag; set by vfile_fork_prepare) */
};

/* Largest slot: bigger states get metadata of their own at once. */
#define POOL_SLOT_MAX (256u << 10)

/* A zero-filled slot of at least bytes bytes.  0 or -errno. */
int pool_alloc(size_t bytes, struct pool_slot *out) VR_HIDDEN;
void pool_free(struct pool_slot *s) VR_HIDDEN;

/* pthread_atfork handlers (env.c). */
void pool_fork_prepare(void) VR_HIDDEN;
void pool_fork_parent(void) VR_HIDDEN;
void pool_fork_child(void) VR_HIDDEN;

#endif
