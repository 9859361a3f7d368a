/* SPDX-License-Identifier: MIT */
/*
 * app_map_faults.h - purging and unmarking through an application's
 * MAP_SHARED mapping: only what still maps the file, and the kernel's map,
 * not the errno, says whether it went (internal; see app_map_faults.c).
 */
#ifndef VRANGE_APP_MAP_FAULTS_H
#define VRANGE_APP_MAP_FAULTS_H

#include <stdbool.h>
#include <stddef.h>

#include "env.h"

struct vfile;
struct vmap;

/*
 * Does m (a region's always) still map f all along [off, off + len)?
 * false also when that cannot be told now.  Caller holds f's lock.
 */
bool appmap_holds(const struct vfile *f, const struct vmap *m, size_t off,
		  size_t len) VR_HIDDEN;

/*
 * Arm application mapping m of f for a punch of [off, off + len): every
 * piece that still maps f (uffd_before_discard).  0 when they are armed or
 * when the kernel refuses m for good (m->skip set: it reads zeros); -errno
 * when a piece still there could not be armed or looked up, with nothing
 * of m left armed.  Caller holds f's lock.
 */
int appmap_arm(struct vfile *f, struct vmap *m, size_t off, size_t len) VR_HIDDEN;

/* uffd_after_discard on the pieces that still map f. */
void appmap_after_discard(struct vfile *f, struct vmap *m, size_t off,
			  size_t len) VR_HIDDEN;

/*
 * uffd_after_nonvolatile on the pieces of m that still map f.  0, or
 * -errno when such a piece may still raise SIGBUS (or cannot be looked
 * up).  Caller holds f's lock.  Async-signal-safe where vma_query is (the
 * PROCMAP_QUERY ioctl, Linux 6.11; not the /proc/self/maps fallback), as
 * unmarking from a SIGBUS handler needs.
 */
int appmap_unpoison(struct vfile *f, struct vmap *m, size_t off, size_t len) VR_HIDDEN;

#endif
