/* SPDX-License-Identifier: MIT */
/* purge.h - the purge engine: global order across files, and its counters. */
#ifndef VRANGE_PURGE_H
#define VRANGE_PURGE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "env.h"

/*
 * Discard volatile pages in global purge order (priority, then age) until
 * at least bytes are freed or nothing volatile is left.  Returns the bytes
 * freed (allocated blocks given back).  The engine behind vrange_purge().
 */
uint64_t purge_run(uint64_t bytes) VR_HIDDEN;
/* The same, passing over library files when skip_shared (the monitor,
 * while `vrangectl coordinate` looks after them). */
uint64_t purge_run_of(uint64_t bytes, bool skip_shared) VR_HIDDEN;
/* The same, telling step() after each step which file gave how much
 * (vrangectl credits each owning process). */
struct vfile;
uint64_t purge_run_each(uint64_t bytes, bool skip_shared,
			void (*step)(struct vfile *f, uint64_t freed, void *arg),
			void *arg) VR_HIDDEN;

/* The same passing over disk files (the budget, which counts library
 * files' memory: a disk file's page cache is not in its count). */
uint64_t purge_run_no_disk(uint64_t bytes) VR_HIDDEN;
/* The same over the disk files of file system dev only: the blocks they
 * give back (st_blocks), for vrange_purge_disk and the reserve worker. */
uint64_t purge_run_disk(dev_t dev, uint64_t bytes) VR_HIDDEN;
uint64_t purge_run_disk_each(dev_t dev, uint64_t bytes,
			     void (*step)(struct vfile *f, uint64_t freed, void *arg),
			     void *arg) VR_HIDDEN;

void purge_note_pressure_event(void) VR_HIDDEN;
void purge_note_refill(uint64_t pages) VR_HIDDEN;
/* Pages purged times their cost (vrange_stats.purged_cost). */
void purge_note_cost(uint64_t cost) VR_HIDDEN;

/* The least aging unit (ns; page_words.h, pw_key): a pass that purges
 * what was marked a moment ago still leaves a range of cost c ahead of
 * cheap ones marked up to (c - 1) ms later. */
#define PURGE_UNIT_MIN 1000000ull

struct purge_counters {
	uint64_t purges, purged_total, pressure_events, refills;
	uint64_t disk_purges, disk_freed_total; /* passes for disk space */
	uint64_t purged_cost;                   /* pages of both x cost */
};
void purge_get_counters(struct purge_counters *out) VR_HIDDEN;

/* pthread_atfork handlers (see env.c). */
void purge_fork_prepare(void) VR_HIDDEN;
void purge_fork_done(void) VR_HIDDEN;
void purge_fork_child(void) VR_HIDDEN;

#endif
