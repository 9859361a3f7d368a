/* SPDX-License-Identifier: MIT */
/*
 * publish.h - what a process using the library shows to vrangectl (internal;
 * the format is shared by the library and the tool).
 *
 * Each process keeps one small memfd named "vrange-pub".  The tool finds it
 * among the links of /proc/<pid>/fd and reads it through
 * /proc/<pid>/fd/<n>, which the kernel allows only to a caller with
 * ptrace-read permission on the process (same user, or root): the boundary
 * is the kernel's, and reading costs the process nothing and needs none of
 * its threads (a process stopped in a debugger is still listed).
 *
 * The record is a header (counters the library keeps, the pressure source,
 * whether the monitor runs) and one entry per file the library keeps state
 * for.  It changes only on slow paths (a file's state created or freed, a
 * region mapped or unmapped, a purge, the monitor started or stopped); the
 * marking paths never touch it.  The figures that change with every mark -
 * volatile and purged pages - are not copied here at all: each entry names
 * the descriptor of the memfd that holds the file's range tree (a library
 * file's shared metadata, or the process-local arena of a foreign file or of
 * the anonymous state), and the tool reads the tree's own counters there.
 *
 * Writers hold a mutex and bump a sequence count around every change (odd
 * while writing); a reader copies the record with pread and keeps the copy
 * only if the count was even and unchanged.  A reader trusts nothing it
 * reads: sizes, counts, descriptors and trees are all checked.
 */
#ifndef VRANGE_PUBLISH_H
#define VRANGE_PUBLISH_H

#include <stdatomic.h>
#include <stdint.h>

#include "env.h"

#define PUB_NAME "vrange-pub"
#define PUB_MAGIC "libvrange-pub3"
#define PUB_VERSION 3u
#define PUB_MAX_FILES (1u << 20)

enum pub_flags {
	PUB_SHARED = 1u << 0,   /* state_fd is a library file's metadata:
				 * arena at offset 0, one header page after it */
	PUB_ANON = 1u << 1,     /* the anonymous state (pages = addresses) */
	PUB_FD_LAYER = 1u << 2, /* counted in vrange_stats.files */
	PUB_CACHE = 1u << 3,    /* backs a purgeable cache */
	PUB_FOREIGN_SHARED = 1u << 4, /* state_fd is a foreign file's shared
				       * metadata: header page, then arena */
	PUB_POOL = 1u << 5,     /* with PUB_SHARED: the tree is a slot of the
				 * process's pool (state_pool.h), state_fd,
				 * arena of state_bytes at state_off, header
				 * after it (paged, as a library file's) */
};

struct pub_file {
	uint64_t dev, ino;        /* the user's file (0 for PUB_ANON) */
	int32_t user_fd;          /* the process's own descriptor of it, or -1 */
	int32_t state_fd;         /* the memfd holding its range tree, or -1 */
	uint32_t flags;           /* enum pub_flags */
	uint32_t regions;         /* regions of this process mapping it */
	uint32_t sigbus_regions;  /* of those, in SIGBUS mode */
	uint32_t reserved;
	uint64_t user_size;       /* bytes of a library file (0: see fstat) */
	uint64_t state_off;       /* PUB_POOL: where the arena starts */
	uint64_t state_bytes;     /* PUB_POOL: its bytes */
};

struct pub_hdr {
	char magic[16];
	uint32_t version;
	uint32_t hdr_bytes;       /* sizeof(struct pub_hdr) */
	uint32_t entry_bytes;     /* sizeof(struct pub_file) */
	uint32_t page_size;
	_Atomic uint32_t seq;     /* odd while a writer is at work */
	int32_t pid;              /* the publisher: a copy inherited is stale */
	uint32_t nfiles;          /* entries following the header */
	uint32_t monitor;         /* 1 while the monitor thread runs */
	uint64_t purges, purged_total, pressure_events, refills;
	char pressure_source[32];
	char access_fallback[32];
	uint64_t purged_cost;     /* pages its purges took x their cost */
};

/* The tool: this process reads others and publishes nothing itself. */
void publish_disable(void) VR_HIDDEN;

/*
 * Set or replace the entry whose slot number (index + 1, 0 = none) lives
 * at *slot; the slot is kept up to date when entries move.  publish_del
 * removes it.  Both are slow-path calls (a mutex, maybe a system call).
 */
void publish_set(uint32_t *slot, const struct pub_file *e) VR_HIDDEN;
void publish_del(uint32_t *slot) VR_HIDDEN;

/* Copy the counters, the pressure source and the monitor's state. */
void publish_status(void) VR_HIDDEN;

/* After fork, in the child: start an empty record of its own (the
 * caller then sets every entry again). */
void publish_fork_child(void) VR_HIDDEN;
void publish_fork_prepare(void) VR_HIDDEN;
void publish_fork_parent(void) VR_HIDDEN;

#endif
