/* SPDX-License-Identifier: MIT */
/*
 * model_cache.h - the purgeable cache's part of the model test
 * (model_cache.c), called from test_model.c.
 *
 * The caches live in the coordinator only (a cache is private to its
 * process); their operations are interleaved with the steps of the page
 * model, so they meet its purges, marks, budget and forks.
 */
#ifndef VRANGE_TEST_MODEL_CACHE_H
#define VRANGE_TEST_MODEL_CACHE_H

#include <stdint.h>

/* Provided by test_model.c: report a violation (exits), add to the trace. */
void model_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void model_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A new seed: no cache exists. */
void mcache_reset(uint64_t seed);
/* Maybe one cache operation for step n; budget: the monitor purges at will.
 * 1: it purged (vrange_purge): the page model must take it into account. */
int mcache_step(uint32_t n, int budget);
/* Something in this process may have purged (vrange_purge, the budget, a
 * forked child's purge): every released value may be gone. */
void mcache_purged(void);
/* The same for a purge of the monitor (budget) or a forked child: not
 * one that flushed the caches' deferred releases first, in this thread. */
void mcache_purged_elsewhere(void);
/* In a forked child: held values and reservations still intact; a cache
 * of the child's own works.  0 or 1 (violation, printed). */
int mcache_child_check(void);
/* End of a seed: release everything, check the counters, destroy. */
void mcache_teardown(int budget);
/* One line of what the cache model did (operations, outcomes). */
void mcache_summary(void);

#endif
