/* SPDX-License-Identifier: MIT */
/*
 * uffd_purge.h - what touching a purged page does (internal).
 *
 * SIGBUS mode rests on userfaultfd.  Every SIGBUS mapping is armed when
 * the library learns it (uffd_arm).  The purge path calls
 * uffd_before_discard() for every SIGBUS mapping of a file before it punches
 * [off, off + len), and uffd_after_discard() after it; from the first call
 * on, a touch of those pages raises SIGBUS (or, in a region with a refill
 * callback, is resolved by the fault thread), never reads zeros - also in
 * other processes' armed mappings of the file.
 * mark_nonvolatile calls uffd_after_nonvolatile() on purged pages so they
 * fault in as fresh zero pages again.  All three run with the file's lock
 * held; uffd_after_nonvolatile() must be async-signal-safe.
 */
#ifndef VRANGE_UFFD_PURGE_H
#define VRANGE_UFFD_PURGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"

struct vmap;
struct vrange_region;

/* Probe userfaultfd once (VRANGE_NO_UFFD=1 forces it unusable). */
bool uffd_available(void) VR_HIDDEN;
/* "" when available, else why not (fits vrange_stats.access_fallback). */
const char *uffd_fallback_reason(void) VR_HIDDEN;

int uffd_before_discard(struct vmap *m, size_t off, size_t len) VR_HIDDEN;
/* uffd_before_discard succeeded but the purge does not go ahead. */
void uffd_cancel_discard(struct vmap *m, size_t off, size_t len) VR_HIDDEN;
void uffd_after_discard(struct vmap *m, size_t off, size_t len) VR_HIDDEN;
/*
 * A purge of scattered pages arms a mapping once over the whole span of
 * its batch (each arming splits the VMA and each disarming merges it back:
 * per page that cost more than the punch).  uffd_span_ok: m may be armed
 * that way (not a refill region, whose registrations are its own);
 * uffd_poison_armed poisons one punched piece of an armed span,
 * uffd_disarm ends the arming.  The caller checks that nothing of the span
 * outside the punched pieces is a hole, which would raise SIGBUS while
 * armed.
 */
bool uffd_span_ok(const struct vmap *m) VR_HIDDEN;
void uffd_poison_armed(struct vmap *m, size_t off, size_t len) VR_HIDDEN;
void uffd_disarm(struct vmap *m, size_t off, size_t len) VR_HIDDEN;
/* 0, or -errno: the pages may still raise SIGBUS, keep them purged. */
int uffd_after_nonvolatile(struct vmap *m, size_t off, size_t len) VR_HIDDEN;

/*
 * Arm m (on f's mapping list, m->sigbus set) for SIGBUS in this process:
 * register it whole, MISSING and MINOR, on the fault thread's uffd, so
 * that every touch of a hole - a page any process purged, or one never
 * touched - or of a page this mapping does not map yet (another mapping
 * filled a purged hole) is decided from the file's state: purged and still
 * volatile raises SIGBUS (or refills), anything else gets a zero page or
 * the file's page.  Where the kernel's own accesses could not be served
 * (a user-mode-only uffd) and force is false, m is only checked and
 * registered around purges instead.  A mapping that cannot be registered
 * (EPERM: a read-only descriptor's; EBUSY: the application's own uffd) is
 * a fallback: m->sigbus is cleared, it reads zeros where a purge punched,
 * and uffd_fallbacks() counts it.  So does a mapping without minor faults
 * (around purges only, or a kernel without them), m->sigbus kept.
 * Takes f's lock.  0 or -errno.
 */
struct vfile;
int uffd_arm(struct vfile *f, struct vmap *m, bool force) VR_HIDDEN;
/* Before m goes (unmapped, or its entry dropped): stop serving it.  Only
 * after vfile_del_map took m out of f's list: a purge that still finds m
 * there while it is registered with the fault thread's userfaultfd but no
 * longer marked armed cannot register it around its punch (EBUSY) and
 * punches nothing. */
void uffd_forget_map(struct vfile *f, struct vmap *m) VR_HIDDEN;
/* A fork child: arm again what the parent had armed (the kernel dropped
 * the registrations).  Call with no library lock held (purge entry,
 * vrange() on anything but a region). */
void uffd_rearm(void) VR_HIDDEN;

/*
 * fork(): its locks are the last taken (leaves: nothing is locked under
 * them), so env.c's handlers call these after every other module's in the
 * prepare step, and after them in the parent and the child.
 */
void uffd_fork_prepare(void) VR_HIDDEN;
void uffd_fork_parent(void) VR_HIDDEN;
void uffd_fork_child(void) VR_HIDDEN;
/* Mappings known now that fell back, and the last reason. */
void uffd_fallbacks(uint64_t *count, char *why, size_t size) VR_HIDDEN;

/* A region gets (r->refill != NULL) or loses a refill callback. 0 or -errno. */
int uffd_region_refill(struct vrange_region *r) VR_HIDDEN;
/* r's file becomes reachable by other mappings: poison its purged pages
 * in r's armed mapping, which were left to the fault thread.  Tree lock
 * held.  0 or -errno (the poison failed: nothing else may map it yet). */
int uffd_region_poison_holes(struct vrange_region *r) VR_HIDDEN;

/*
 * Bumped whenever markers are installed in a region's mapping (a purge, or
 * a SIGBUS region made over already-purged pages): the SIGBUS fixup tells a
 * new stale marker from a fault it has just failed to fix.
 */
extern _Atomic uint64_t uffd_poison_gen VR_HIDDEN;

#endif
