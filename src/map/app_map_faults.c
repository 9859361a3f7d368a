/* SPDX-License-Identifier: MIT */
/*
 * app_map_faults.c - purging and unmarking through an application's own
 * MAP_SHARED mapping that may have gone.
 *
 * A purge arms every SIGBUS mapping of a file, the application's mappings
 * passed to vrange() included (any_mapping.c), and unmarking clears their
 * markers.  The application may unmap such a mapping at any time, and map
 * something else there; its entry stays in the file's mapping list until
 * the table of known mappings next checks it.  So every piece of the range
 * is looked up first (vma_query): only pieces that still map the file at
 * the mapping's offsets are armed, poisoned or zapped - never a newcomer.
 * A failed call is never read as "it went": the calls on a mapping that
 * went fail with ENOMEM, the very errno of a real shortage (a split that
 * hits the map-count limit) or of an injected fault; the kernel's map is
 * what tells.  A failure on a piece still there fails the caller, and so
 * does a look-up that cannot be answered (the safe side: pages stay
 * purged, nothing is punched unarmed).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "app_map_faults.h"
#include "file_state.h"
#include "region.h"
#include "uffd_purge.h"
#include "vma_query.h"

/*
 * The piece of m's range that starts at file offset off, up to len bytes:
 * its length in *plen; 1 if it still maps f there, 0 if nothing or
 * something else is mapped there now, -errno if the map cannot be read.
 */
static int piece_at(const struct vfile *f, const struct vmap *m, size_t off,
		    size_t len, size_t *plen)
{
	uintptr_t a = (uintptr_t)m->base + off;
	struct vma v = { 0 }; /* filled by an ioctl valgrind does not know */
	int q = vma_query_next(a, &v);

	*plen = len;
	if (q == -ENOENT) /* nothing mapped at or above a */
		return 0;
	if (q < 0)
		return q;
	if (v.start > a) { /* a hole first */
		if (v.start - a < len)
			*plen = v.start - a;
		return 0;
	}
	if (v.end - a < len)
		*plen = v.end - a;
	/* A region of the same file there now maps the same offsets, but it
	 * is the library's, with a mapping entry of its own. */
	return v.shared && v.dev == f->dev && (ino_t)v.inode == f->ino &&
	       v.offset + (a - v.start) == off &&
	       !region_lookup((void *)a, 1, &(bool){ false });
}

typedef int (*map_op)(struct vmap *m, size_t off, size_t len);

/* op on every piece of [off, off + len) that still maps f; the first
 * -errno of a query or of op stops it, *stop says where. */
static int on_held(const struct vfile *f, struct vmap *m, size_t off, size_t len,
		   map_op op, size_t *stop)
{
	size_t end = off + len, plen;
	int r = 0;

	for (; off < end; off += plen) {
		r = piece_at(f, m, off, end - off, &plen);
		if (r > 0)
			r = op(m, off, plen);
		if (r < 0)
			break;
	}
	if (stop)
		*stop = off;
	return r < 0 ? r : 0;
}

static int cancel_op(struct vmap *m, size_t off, size_t len)
{
	uffd_cancel_discard(m, off, len);
	return 0;
}

/* The kernel's refusals for good: a mapping without write permission
 * (EPERM), one the application registered with its own userfaultfd
 * (EBUSY), a kind userfaultfd does not take (EINVAL). */
static bool refused_for_good(int r)
{
	return r == -EPERM || r == -EBUSY || r == -EINVAL;
}

bool appmap_holds(const struct vfile *f, const struct vmap *m, size_t off, size_t len)
{
	size_t end = off + len, plen;

	if (m->region)
		return true; /* the library's own mapping, unmapped by destroy */
	for (; off < end; off += plen)
		if (piece_at(f, m, off, end - off, &plen) != 1)
			return false; /* gone, partly, or cannot tell */
	return true;
}

int appmap_arm(struct vfile *f, struct vmap *m, size_t off, size_t len)
{
	size_t stop;
	int r = on_held(f, m, off, len, uffd_before_discard, &stop);

	m->skip = false;
	if (r == 0)
		return 0;
	/* Whatever was armed of m is let go: either the purge does not go
	 * ahead, or m is left out of it. */
	on_held(f, m, off, stop - off, cancel_op, NULL);
	m->skip = true;
	/* The documented fallback (contract 5): that mapping reads zeros. */
	return refused_for_good(r) ? 0 : r;
}

static int after_discard_op(struct vmap *m, size_t off, size_t len)
{
	uffd_after_discard(m, off, len);
	return 0;
}

void appmap_after_discard(struct vfile *f, struct vmap *m, size_t off, size_t len)
{
	/* A piece that cannot be looked up now keeps its registration, which
	 * raises SIGBUS as the markers would; unmarking drops it. */
	if (on_held(f, m, off, len, after_discard_op, NULL) < 0)
		atomic_store(&m->reg_stayed, true);
}

int appmap_unpoison(struct vfile *f, struct vmap *m, size_t off, size_t len)
{
	return on_held(f, m, off, len, uffd_after_nonvolatile, NULL);
}
