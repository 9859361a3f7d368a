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

#include "file_state.h"
#include "purge.h"
#include "region.h"
#include "vrange.h"

/* One purger at a time keeps the global order and the counters exact. */
static pthread_mutex_t purge_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t n_purges, n_purged_total, n_events, n_refills;

uint64_t purge_run(uint64_t bytes)
{
	uint64_t freed = 0, pages = 0, pass_start;
	struct rt_range oldest;
	struct purge_limit lim;

	if (bytes == 0)
		return 0;
	vr_init_basic();
	pthread_mutex_lock(&purge_lock);
	/*
	 * A pass considers what was volatile when it began: anonymous pages
	 * that held no data are put back at the end of the order, and must
	 * not be met again in the same pass.
	 */
	pass_start = vr_seq_barrier();
	while (freed < bytes) {
		uint64_t left = bytes - freed;
		/* Round up to pages without wrapping for bytes near SIZE_MAX. */
		uint64_t want = (left >> vr_page_shift) + ((left & (vr_page_size - 1)) != 0);
		struct vfile *f = vfile_pick_oldest(&oldest, &lim.other_oldest, &lim.other);
		int r;

		if (!f)
			break;
		if (oldest.seq > pass_start) {
			vfile_put(f);
			break;
		}
		lim.max_seq = pass_start;
		r = vfile_purge_oldest(f, want ? want : 1, &lim, &freed, &pages);
		vfile_put(f);
		if (r < 0)
			break;
	}
	atomic_fetch_add(&n_purges, 1);
	atomic_fetch_add(&n_purged_total, freed);
	pthread_mutex_unlock(&purge_lock);
	return freed;
}

ssize_t vrange_purge(size_t bytes)
{
	uint64_t freed = purge_run(bytes);

	return freed > SSIZE_MAX ? SSIZE_MAX : (ssize_t)freed;
}

ssize_t vrange_region_purge(vrange_region *r)
{
	const struct purge_limit all = { .max_seq = UINT64_MAX };
	uint64_t freed = 0, pages = 0;
	int rc;

	if (!r)
		return -EINVAL;
	pthread_mutex_lock(&purge_lock);
	do
		rc = vfile_purge_oldest(r->file, UINT64_MAX, &all, &freed, &pages);
	while (rc > 0);
	atomic_fetch_add(&n_purges, 1);
	atomic_fetch_add(&n_purged_total, freed);
	pthread_mutex_unlock(&purge_lock);
	if (rc < 0)
		return rc;
	return freed > SSIZE_MAX ? SSIZE_MAX : (ssize_t)freed;
}

void purge_note_pressure_event(void)
{
	atomic_fetch_add(&n_events, 1);
}

void purge_note_refill(uint64_t pages)
{
	atomic_fetch_add(&n_refills, pages);
}

void purge_get_counters(struct purge_counters *out)
{
	out->purges = atomic_load(&n_purges);
	out->purged_total = atomic_load(&n_purged_total);
	out->pressure_events = atomic_load(&n_events);
	out->refills = atomic_load(&n_refills);
}

void purge_fork_prepare(void)
{
	pthread_mutex_lock(&purge_lock);
}

void purge_fork_done(void)
{
	pthread_mutex_unlock(&purge_lock);
}
