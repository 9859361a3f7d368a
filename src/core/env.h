/* SPDX-License-Identifier: MIT */
/* env.h - library start-up: page size, environment (read once), debug log. */
#ifndef VRANGE_ENV_H
#define VRANGE_ENV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define VR_HIDDEN __attribute__((visibility("hidden")))

/* The mark clock (vr_next_seq, the barrier) is a module of its own; its
 * users include env.h. */
#include "mark_clock.h"

struct vr_env {
	bool monitor;       /* VRANGE_MONITOR, default on */
	bool debug;         /* VRANGE_DEBUG=1 */
	bool no_uffd;       /* VRANGE_NO_UFFD=1: behave as if userfaultfd were missing */
	bool plain_marks;   /* VRANGE_PLAIN_MARKS, default on: marks without a
	                     * locked instruction where they may be */
	bool meminfo_only;  /* VRANGE_PRESSURE=meminfo: skip PSI and cgroups (tests) */
	size_t budget;      /* VRANGE_BUDGET, 0 = none */
	const char *fs_root; /* VRANGE_FS_ROOT: prefix for /proc and /sys paths the
	                      * monitor reads (tests feed it fake files); "" = none */
};

/* Filled by vr_init(); read-only afterwards. */
extern struct vr_env vr_env VR_HIDDEN;
extern size_t vr_page_size VR_HIDDEN;
extern unsigned int vr_page_shift VR_HIDDEN;

/*
 * First-use initialisation, idempotent and thread-safe: page size, the
 * environment, and (unless VRANGE_MONITOR=0) the pressure monitor.
 * Every public entry point that creates state calls it.
 */
void vr_init(void) VR_HIDDEN;

/* Page size and environment only: what even signal-safe paths need.
 * Set once it has run: the hot paths test the flag inline, not call out. */
extern _Atomic bool vr_basic_done VR_HIDDEN;
void vr_init_basic_once(void) VR_HIDDEN;
static inline void vr_init_basic(void)
{
	if (!atomic_load_explicit(&vr_basic_done, memory_order_acquire))
		vr_init_basic_once();
}

/* Parse "<digits>[K|M|G]"; 0 or -EINVAL.  Exposed for tests. */
int vr_parse_size(const char *s, size_t *out) VR_HIDDEN;

/* Debug log to stderr when VRANGE_DEBUG=1; never otherwise. */
void vr_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2))) VR_HIDDEN;

/* ftruncate, again after a signal interrupted it (EINTR: nothing done);
 * 0 or -errno, errno set as ftruncate sets it. */
int vr_ftruncate(int fd, uint64_t len) VR_HIDDEN;

#endif
