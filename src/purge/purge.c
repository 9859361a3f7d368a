/* SPDX-License-Identifier: MIT */
/*
 * purge.c - the purge engine: pick the globally oldest volatile range
 * (lowest priority, then least recently marked) across every file, discard
 * one bounded chunk of it, repeat.  Chunks keep each hold of a file's lock
 * short, so marking never waits long behind a big purge.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "any_mapping.h"
#include "cache.h"
#include "file_state.h"
#include "pressure.h"
#include "publish.h"
#include "purge.h"
#include "region.h"
#include "uffd_purge.h"
#include "vrange.h"

/* One purger at a time keeps the global order and the counters exact.
 * Passes for disk space have a lock of their own: each of their steps
 * waits for a commit (disk_file.h), and a memory purge must not wait for a
 * whole disk pass.  A memory pass and a disk pass may then meet on one
 * disk file: their steps take its lock one after the other, and each step
 * reads the file's oldest range afresh under it (the order between the two
 * passes is approximate, what they discard is exact). */
static pthread_mutex_t purge_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t disk_purge_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t n_purges, n_purged_total, n_events, n_refills,
	n_purged_cost;
static _Atomic uint64_t n_disk_purges, n_disk_freed;

void purge_note_cost(uint64_t cost)
{
	atomic_fetch_add_explicit(&n_purged_cost, cost, memory_order_relaxed);
}

/*
 * The aging unit follows the purge front (docs/design.md, "Purge order
 * by cost"): how far the key of the last range a pass purged lags the
 * mark clock is how long a page of cost 1 now stays once volatile, and a
 * page of cost c is given (c - 1) times that on top.  Learnt at the end
 * of a memory pass (the keys of one pass share one unit), smoothed, never
 * below PURGE_UNIT_MIN.  Passes for disk space use the unit but do not
 * teach it: their pace is the disk's, not memory's.
 */
static void learn_unit(uint64_t last_key)
{
	uint64_t now = vr_next_seq(), u = pw_cost_unit();
	uint64_t lag = now > last_key ? now - last_key : 0;

	if (lag < PURGE_UNIT_MIN)
		lag = PURGE_UNIT_MIN;
	pw_set_cost_unit(u / 4 * 3 + lag / 4);
}

/* The files of one pass as a binary min-heap on their oldest range: the
 * next step's file in O(log files), not a walk over every file. */
static void sift_down(struct purge_cand *h, size_t n, size_t i)
{
	for (;;) {
		size_t m = i, l = 2 * i + 1, r = l + 1;
		struct purge_cand t;

		if (l < n && vfile_older(&h[l].oldest, &h[m].oldest))
			m = l;
		if (r < n && vfile_older(&h[r].oldest, &h[m].oldest))
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/* The top file out of the heap, its reference dropped. */
static void drop_top(struct purge_cand *h, size_t *n)
{
	vfile_put(h[0].f);
	h[0] = h[--*n];
	sift_down(h, *n, 0);
}

/* After the top file's step: its new oldest range, or out of the heap. */
static void rekey_top(struct purge_cand *h, size_t *n, uint64_t pass_start)
{
	if (vfile_peek_oldest(h[0].f, pass_start, &h[0].oldest) <= 0)
		drop_top(h, n);
	else
		sift_down(h, *n, 0);
}

/* The limit a step on the top file must stay within: the pass's start and
 * the oldest range of every other file (the top's children). */
static void step_limit(const struct purge_cand *h, size_t n, uint64_t pass_start,
		       struct purge_limit *lim)
{
	lim->max_seq = pass_start;
	lim->other = n > 1;
	if (n > 1)
		lim->other_oldest = h[1].oldest;
	if (n > 2 && vfile_older(&h[2].oldest, &h[1].oldest))
		lim->other_oldest = h[2].oldest;
}

uint64_t purge_run(uint64_t bytes)
{
	return purge_run_each(bytes, false, NULL, NULL);
}

uint64_t purge_run_of(uint64_t bytes, bool skip_shared)
{
	return purge_run_each(bytes, skip_shared, NULL, NULL);
}

/* One pass: memory (disk NULL: every file, a disk file for its page
 * cache; skip_disk: none of those) or the disk space of one file system
 * (*disk). */
static uint64_t pass(uint64_t bytes, bool skip_shared, bool skip_disk,
		     const dev_t *disk,
		     void (*step)(struct vfile *f, uint64_t freed, void *arg),
		     void *arg)
{
	uint64_t freed = 0, pages = 0, pass_start, last_key = 0;
	bool took = false;
	struct purge_cand *h = NULL;
	struct purge_limit lim;
	struct rt_range now;
	ssize_t got;
	size_t n;

	if (bytes == 0)
		return 0;
	vr_init_basic();
	/* Caches defer making released values volatile: not past a purge. */
	cache_flush_all();
	uffd_rearm(); /* a fork child's mappings: before any lock */
	pthread_mutex_lock(disk ? &disk_purge_lock : &purge_lock);
	/* What the application unmapped since is forgotten, not purged. */
	if (!disk)
		anymap_sweep_for_purge();
	/*
	 * A pass considers what was volatile when it began, in every file
	 * and every process sharing one: the barrier is later than every
	 * stamp taken before it, here or in another process (one clock).
	 * Ranges marked since - by any thread or process, or anonymous pages
	 * that held no data and were put back at the end of the order - are
	 * passed over, never waited at, so the ranges of higher priorities
	 * behind them are still reached.  Files that gain their first
	 * volatile range meanwhile hold only later marks.
	 */
	pass_start = vr_seq_barrier();
	got = disk ? vfile_oldest_disk(&h, *disk, pass_start) :
	      skip_disk ? vfile_oldest_no_disk(&h, pass_start) :
			  vfile_oldest_all(&h, skip_shared, pass_start);
	n = got > 0 ? (size_t)got : 0;
	for (size_t i = n / 2; i-- > 0;)
		sift_down(h, n, i);
	while (freed < bytes && n) {
		uint64_t left = bytes - freed;
		/* Round up to pages without wrapping for bytes near SIZE_MAX. */
		uint64_t want = (left >> vr_page_shift) + ((left & (vr_page_size - 1)) != 0);
		uint64_t before = freed;
		int r;

		/* Unmarked since the heap learnt it: take the file's key now. */
		if (vfile_peek_oldest(h[0].f, pass_start, &now) != 1 ||
		    now.seq != h[0].oldest.seq || now.prio != h[0].oldest.prio ||
		    now.start != h[0].oldest.start) {
			rekey_top(h, &n, pass_start);
			continue;
		}
		step_limit(h, n, pass_start, &lim);
		lim.memory = !disk;
		r = vfile_purge_oldest(h[0].f, want ? want : 1, &lim, &freed, &pages);
		if (r > 0) {
			last_key = h[0].oldest.key;
			took = true;
		}
		if (step)
			step(h[0].f, freed - before, arg);
		/* A file that failed (a damaged state, no memory for its tree)
		 * is left out of this pass; the others are still purged. */
		if (r < 0)
			drop_top(h, &n);
		else
			rekey_top(h, &n, pass_start);
	}
	while (n)
		vfile_put(h[--n].f);
	free(h);
	if (took && !disk)
		learn_unit(last_key);
	atomic_fetch_add(disk ? &n_disk_purges : &n_purges, 1);
	atomic_fetch_add(disk ? &n_disk_freed : &n_purged_total, freed);
	pthread_mutex_unlock(disk ? &disk_purge_lock : &purge_lock);
	publish_status();
	return freed;
}

uint64_t purge_run_each(uint64_t bytes, bool skip_shared,
			void (*step)(struct vfile *f, uint64_t freed, void *arg),
			void *arg)
{
	return pass(bytes, skip_shared, false, NULL, step, arg);
}

uint64_t purge_run_no_disk(uint64_t bytes)
{
	return pass(bytes, false, true, NULL, NULL, NULL);
}

uint64_t purge_run_disk(dev_t dev, uint64_t bytes)
{
	return pass(bytes, false, false, &dev, NULL, NULL);
}

uint64_t purge_run_disk_each(dev_t dev, uint64_t bytes,
			     void (*step)(struct vfile *f, uint64_t freed, void *arg),
			     void *arg)
{
	return pass(bytes, false, false, &dev, step, arg);
}

ssize_t vrange_purge(size_t bytes)
{
	uint64_t freed;

	pressure_check_cgroup();
	freed = purge_run(bytes);

	return freed > SSIZE_MAX ? SSIZE_MAX : (ssize_t)freed;
}

ssize_t vrange_region_purge(vrange_region *r)
{
	const struct purge_limit all = { .max_seq = UINT64_MAX };
	uint64_t freed = 0, pages = 0;
	int rc;

	if (!r)
		return -EINVAL;
	uffd_rearm(); /* a fork child's mappings: before any lock */
	pthread_mutex_lock(&purge_lock);
	do
		rc = vfile_purge_oldest(r->file, UINT64_MAX, &all, &freed, &pages);
	while (rc > 0);
	atomic_fetch_add(&n_purges, 1);
	atomic_fetch_add(&n_purged_total, freed);
	pthread_mutex_unlock(&purge_lock);
	publish_status();
	if (rc < 0)
		return rc;
	return freed > SSIZE_MAX ? SSIZE_MAX : (ssize_t)freed;
}

void purge_note_pressure_event(void)
{
	atomic_fetch_add(&n_events, 1);
	publish_status();
}

void purge_note_refill(uint64_t pages)
{
	/* Not published here: the fault thread goes straight back to sleep
	 * (the count reaches the publication with the next slow path). */
	atomic_fetch_add(&n_refills, pages);
}

void purge_get_counters(struct purge_counters *out)
{
	out->purges = atomic_load(&n_purges);
	out->purged_total = atomic_load(&n_purged_total);
	out->pressure_events = atomic_load(&n_events);
	out->refills = atomic_load(&n_refills);
	out->disk_purges = atomic_load(&n_disk_purges);
	out->disk_freed_total = atomic_load(&n_disk_freed);
	out->purged_cost = atomic_load(&n_purged_cost);
}

void purge_fork_prepare(void)
{
	pthread_mutex_lock(&purge_lock);
}

void purge_fork_done(void)
{
	pthread_mutex_unlock(&purge_lock);
}

/* A fork does not wait for a disk pass (its steps wait for fsync): the
 * child, which has no thread in one, starts with the lock free.  The
 * files' own locks are held across fork as usual (file_state.c). */
void purge_fork_child(void)
{
	pthread_mutex_unlock(&purge_lock);
	pthread_mutex_init(&disk_purge_lock, NULL);
}
