/* SPDX-License-Identifier: MIT */
/*
 * purge_all.h - discard library files' volatile memory across processes,
 * in the library's one order (lowest priority, then least recently marked).
 */
#ifndef VRANGECTL_PURGE_ALL_H
#define VRANGECTL_PURGE_ALL_H

#include <stdint.h>
#include <sys/types.h>

#include "procs.h"

struct vc_purge_result {
	uint64_t freed_bytes;
	uint64_t purged_cost;       /* pages purged x their cost */
	uint64_t unreachable_bytes; /* volatile, but not reachable from outside */
	uint64_t *freed;            /* per process, parallel to the procs array */
};

/*
 * Attach to the shared metadata of every library file of procs (as another
 * process adopting the file does), then discard in global order until bytes
 * are freed or nothing volatile is left, with the library's discard step
 * (the file's shared lock held, pages recorded purged before the punch).
 * disk: punch the disk files of that file system instead (contract 9),
 * counting the space freed; memory passes take disk files only for their
 * volatile pages in the page cache.
 * 0 or -errno; res->freed is allocated (free it).
 */
int vc_purge(const struct vc_proc *procs, size_t n, uint64_t bytes,
	     const dev_t *disk, struct vc_purge_result *res);

#endif
