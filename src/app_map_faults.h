/* SPDX-License-Identifier: MIT */
/*
 * app_map_faults.h - a failed call on an application's MAP_SHARED mapping:
 * the kernel's map, not the errno, says whether the mapping went
 * (internal; see app_map_faults.c).
 */
#ifndef VRANGE_APP_MAP_FAULTS_H
#define VRANGE_APP_MAP_FAULTS_H

#include <stddef.h>

#include "env.h"

struct vfile;
struct vmap;

/*
 * uffd_before_discard failed on application mapping m of f: arm again the
 * pieces of [off, off + len) that still map f.  0 when they are armed, or
 * when the kernel refuses m for good (m->unarmed set: it reads zeros);
 * -errno when a piece still mapped could not be armed, with nothing of m
 * left armed.  Caller holds f's lock.
 */
int appmap_arm(struct vfile *f, struct vmap *m, size_t off, size_t len) VR_HIDDEN;

/*
 * uffd_after_nonvolatile failed on application mapping m of f: do it again
 * on the pieces that still map f.  0, or -errno when such a piece may
 * still raise SIGBUS.  Caller holds f's lock.  Async-signal-safe where
 * vma_query is (the PROCMAP_QUERY ioctl, Linux 6.11; not the
 * /proc/self/maps fallback), as unmarking from a SIGBUS handler needs; it
 * runs only after a failure.
 */
int appmap_unpoison(struct vfile *f, struct vmap *m, size_t off, size_t len) VR_HIDDEN;

#endif
