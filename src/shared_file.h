/* SPDX-License-Identifier: MIT */
/*
 * shared_file.h - files this library creates keep their volatile state
 * inside the file, shared by every process that maps it (internal).
 *
 * Layout of a library file of S bytes:
 *
 *   [0, U)          the user area: user_size bytes rounded up to pages
 *   [U, S - P)      the range tree's arena (sparse: untouched pages cost nothing)
 *   [S - P, S)      the header page: magic, sizes, the process-shared lock
 *
 * (P = page size.)  The header sits at the end so that a process handed only
 * the descriptor finds it from fstat alone, and so that offset 0 of the file
 * is offset 0 of the user's data (mmap and ashmem offsets stay unchanged).
 * Nothing outside the file names the state: only a process that already
 * holds the file can reach it.  Everything read from it is validated; a
 * header or tree that does not check out is -EIO, never a crash or a hang.
 */
#ifndef VRANGE_SHARED_FILE_H
#define VRANGE_SHARED_FILE_H

#include <stdint.h>
#include <sys/stat.h>

#include "env.h"
#include "range_tree.h"

struct vshared_hdr;

/* This process's view of one library file's metadata. */
struct vshared {
	void *map;               /* [U, S) mapped shared */
	size_t map_bytes;
	struct vshared_hdr *hdr; /* inside map, at its end */
	uint64_t user_size;      /* bytes of user data (not page-rounded) */
	uint64_t user_pages;     /* U / P: pages the tree may hold */
	uint64_t arena_bytes;    /* local copy: never trust the header's */
};

/*
 * Make fd - a tmpfs/memfd file the library created, empty - a library file
 * for user_size bytes: size it and format its metadata.  0 or -errno.
 */
int vshared_format(int fd, uint64_t user_size) VR_HIDDEN;

/*
 * Is fd a library file?  1 and *user_size filled, 0 if it is a foreign file,
 * -errno on failure.  One pread of the header page.
 */
int vshared_probe(int fd, uint64_t *user_size) VR_HIDDEN;

/*
 * Attach to the metadata of fd (st from fstat): 1 and s, tree filled; 0 for
 * a foreign file; -EIO for a header that does not check out; -errno.
 */
int vshared_open(int fd, const struct stat *st, struct vshared *s,
		 struct rt_tree *tree) VR_HIDDEN;
void vshared_close(struct vshared *s) VR_HIDDEN;

/*
 * The process-shared lock.  A holder that died is recovered from: the tree
 * is checked, and if the death left it inconsistent it is reset to one
 * conservative state (every page "purged": nothing is ever reported INTACT
 * that might not be, and nothing is discarded).  A lock that cannot be had
 * within a bounded time (a hostile or wedged holder) is -EIO.
 */
int vshared_lock(struct vshared *s, struct rt_tree *tree) VR_HIDDEN;
void vshared_unlock(struct vshared *s) VR_HIDDEN;

#endif
