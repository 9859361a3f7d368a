/* SPDX-License-Identifier: MIT */
/*
 * fd_hint.h - the file layer's per-thread hint (internal).
 *
 * A program names a file by descriptor on every file-layer call.  Finding
 * the file's state through the registry takes its lock and a reference:
 * four locked instructions beside the word's swap, about a quarter of a
 * call that is otherwise one fstat.  So each thread keeps the last file it
 * found while the file layer's own reference keeps that file alive
 * (vfile.fd_layer: taken by the first mark, dropped only by vfile_forget)
 * and uses it with neither lock nor reference.  The only thing that can
 * free it meanwhile is a forget, and a forget waits for such users:
 *
 *   user:    publish f in its hazard slot; fence; read the generation:
 *            unchanged since f was found - use f, then clear the slot.
 *   forget:  fd_layer off; bump the generation; fence; wait until no
 *            slot holds f; then drop the reference.
 *
 * Either the user reads the new generation (and takes the registry), or
 * the forget sees the user's slot (and waits).  The user's fence is a
 * compiler barrier where membarrier(2) lets the forget fence every thread
 * of the process instead (registered once, before any hint exists), else
 * a full fence.  64 threads have slots; the others always take the
 * registry.
 */
#ifndef VRANGE_FD_HINT_H
#define VRANGE_FD_HINT_H

#include <stdint.h>
#include <sys/types.h>

#include "env.h"

struct vfile;

/* Before the first use of the hint in this process (idempotent). */
void fd_hint_init(void) VR_HIDDEN;

/* The file (dev, ino) as this thread last found it, pinned for this call,
 * or NULL: take the registry.  A pinned file is used as one the caller
 * holds a reference to, and fd_hint_unpin()ned at the end of the call. */
struct vfile *fd_hint_pin(dev_t dev, ino_t ino) VR_HIDDEN;
void fd_hint_unpin(void) VR_HIDDEN;

/* The generation, read before looking at f->fd_layer for fd_hint_note. */
uint64_t fd_hint_gen(void) VR_HIDDEN;

/* Remember f, found through the registry with a reference and attached
 * to the file layer, as this thread's hint (gen: fd_hint_gen() read
 * before fd_layer was seen set). */
void fd_hint_note(struct vfile *f, dev_t dev, ino_t ino, uint64_t gen) VR_HIDDEN;

/* f's fd_layer went off: wait until no thread has f pinned.  No lock
 * held. */
void fd_hint_forgotten(struct vfile *f) VR_HIDDEN;

/* fork() child: every hint is the parent's; none is used. */
void fd_hint_fork_child(void) VR_HIDDEN;

/* Tests only: called with the file pinned, before the call uses it. */
extern void (*fd_hint_test_pinned)(void) VR_HIDDEN;

#endif
