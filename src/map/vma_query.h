/* SPDX-License-Identifier: MIT */
/* vma_query.h - what is mapped at an address (internal). */
#ifndef VRANGE_VMA_QUERY_H
#define VRANGE_VMA_QUERY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "env.h"

struct vma {
	uintptr_t start, end;
	uint64_t offset;        /* file offset of start */
	uint64_t inode;
	dev_t dev;
	bool shared, readable, writable;
	char name[256];         /* path, "[heap]", "[vdso]", ... or "" */
};

/*
 * The mapping that contains addr: 0 and *out filled, -ENOENT if addr is not
 * mapped, -errno.  Uses the PROCMAP_QUERY ioctl (Linux 6.11) where there is
 * one - one ioctl on a descriptor opened once - and parses /proc/self/maps
 * elsewhere.  Async-signal-safe where the ioctl exists (the first call opens
 * the descriptor).
 */
int vma_query(uintptr_t addr, struct vma *out) VR_HIDDEN;

/* vma_query() where the ioctl exists, -ENOTTY elsewhere: never stdio (and
 * so never malloc), for callers that may not wait for another thread. */
int vma_query_no_stdio(uintptr_t addr, struct vma *out) VR_HIDDEN;

/* The mapping that contains addr or, if none does, the first above it;
 * -ENOENT when nothing is mapped at or above addr. */
int vma_query_next(uintptr_t addr, struct vma *out) VR_HIDDEN;

/* Drop the cached descriptor (a fork child: it names the parent's
 * address space). */
void vma_query_forget(void) VR_HIDDEN;

#endif
