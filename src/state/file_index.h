/* SPDX-License-Identifier: MIT */
/*
 * file_index.h - the registry's index of files by device and inode
 * (internal).
 *
 * The file layer names a file by descriptor: every vrange_fd_* call finds
 * the file's state from the (device, inode) fstat gives.  A walk of the
 * registry's list made that call cost a step per file the process holds
 * (a process may hold 100,000 regions: 8 us per pair at 900).  The index
 * is a hash table of the registry's entries over that key, chained
 * through the entries themselves, so adding, removing and finding are
 * O(1) and never allocate on the way: the table grows by doubling when
 * it can, and a table that could not grow stays correct, only with
 * longer chains.  Anonymous states (no file) are not in it.
 *
 * Every function here runs under the registry lock (file_state.c).
 */
#ifndef VRANGE_FILE_INDEX_H
#define VRANGE_FILE_INDEX_H

#include <stdbool.h>
#include <sys/types.h>

#include "env.h"

struct vfile;

/* Enter f (not anonymous) under its (dev, ino); f->hnext, f->hprev are the
 * index's. */
void findex_add(struct vfile *f) VR_HIDDEN;
/* Take f out again (a no-op for a file that was never entered). */
void findex_del(struct vfile *f) VR_HIDDEN;
/* The entry entered last of (dev, ino) whose dormant flag is @p dormant,
 * or NULL. */
struct vfile *findex_find(dev_t dev, ino_t ino, bool dormant) VR_HIDDEN;

#endif
