/* SPDX-License-Identifier: MIT */
/*
 * disk_reserve.c - free space kept on file systems that hold volatile
 * ranges (contract 9): vrange_set_disk_reserve, vrange_purge_disk and the
 * worker thread behind them.
 *
 * The worker sleeps on a condition variable while no file system holds
 * volatile disk ranges of this process: nothing runs for disk space then.
 * The first mark of a disk file wakes it (one atomic load on the marking
 * path, the wake only on the transition).  While some file system holds
 * volatile ranges it polls fstatfs of one file there every 250 ms and,
 * when f_bavail is below the reserve, punches volatile ranges of that file
 * system, oldest first, until twice the reserve is free (purge_run_disk).
 * Polling is the only way: fanotify and inotify report no free-space
 * changes, and the block layer none a process could wait for.  The cost is
 * one fstatfs per file system and a look at each disk file's counters four
 * times a second, and only while there is something to give back.
 *
 * btrfs updates f_bavail at a transaction commit only (every 30 s by
 * default): a writer there can cross the reserve for that long before
 * this worker sees it.  docs/design.md says so.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "disk_reserve.h"
#include "file_state.h"
#include "purge.h"
#include "vrange.h"

#define POLL_NS 250000000L
#define MAX_FS 32
#define DEFAULT_CAP (1ull << 30)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool started, kicked, atfork_done;
static _Atomic bool watching; /* the worker polls (or is about to) */

static struct {
	dev_t dev;
	uint64_t bytes; /* 0: the default; UINT64_MAX: never */
} reserves[MAX_FS];
static unsigned int nreserves;

/* The reserve of file system dev of total bytes (lock held). */
static uint64_t reserve_of(dev_t dev, uint64_t total)
{
	uint64_t r = 0;

	for (unsigned int i = 0; i < nreserves; i++)
		if (reserves[i].dev == dev)
			r = reserves[i].bytes;
	if (r == 0) {
		r = total / 20;
		if (r > DEFAULT_CAP)
			r = DEFAULT_CAP;
	}
	return r;
}

/* One look at every file system with volatile disk ranges; false when
 * there was none. */
static bool look(void)
{
	struct vfile_disk_fs fs[MAX_FS];
	size_t n = vfile_disk_fs(fs, MAX_FS);

	for (size_t i = 0; i < n; i++) {
		uint64_t want;

		pthread_mutex_lock(&lock);
		want = reserve_of(fs[i].dev, fs[i].total_bytes);
		pthread_mutex_unlock(&lock);
		if (want == UINT64_MAX || fs[i].bavail_bytes >= want)
			continue;
		/* Up to twice the reserve free: a writer that keeps writing
		 * is not met again at once. */
		want = want > UINT64_MAX / 2 ? UINT64_MAX : 2 * want;
		vr_debug("disk reserve: %llu bytes free on device %lu, punching %llu",
			 (unsigned long long)fs[i].bavail_bytes,
			 (unsigned long)fs[i].dev,
			 (unsigned long long)(want - fs[i].bavail_bytes));
		purge_run_disk(fs[i].dev, want - fs[i].bavail_bytes);
	}
	return n > 0;
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec until;

		if (!look()) {
			atomic_store(&watching, false);
			/* A mark that came between look() and the store saw
			 * watching still true and kicked nobody: look again.
			 * One that comes after the store kicks. */
			if (look()) {
				atomic_store(&watching, true);
				continue;
			}
			pthread_mutex_lock(&lock);
			while (!kicked)
				pthread_cond_wait(&wake, &lock);
			kicked = false;
			pthread_mutex_unlock(&lock);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += POLL_NS;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
			;
	}
	return NULL;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

/* The child has no worker: the next mark of a disk file starts one. */
static void fork_child(void)
{
	pthread_mutex_init(&lock, NULL);
	pthread_cond_init(&wake, NULL);
	started = kicked = false;
	atomic_store(&watching, false);
}

void disk_reserve_kick(void)
{
	if (atomic_load_explicit(&watching, memory_order_relaxed))
		return;
	pthread_mutex_lock(&lock);
	atomic_store(&watching, true);
	kicked = true;
	if (!atfork_done) {
		pthread_atfork(fork_prepare, fork_parent, fork_child);
		atfork_done = true;
	}
	if (!started) {
		pthread_attr_t a;
		pthread_t t;
		sigset_t all, old;

		/* The worker takes no signal meant for the application. */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&a, 256u << 10);
		started = pthread_create(&t, &a, worker, NULL) == 0;
		pthread_attr_destroy(&a);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (!started) {
			atomic_store(&watching, false);
			vr_debug("disk reserve: no worker thread");
		}
	}
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
}

int vrange_set_disk_reserve(const char *path, uint64_t bytes)
{
	struct stat st;
	unsigned int i;
	int r = 0;

	if (!path)
		return -EINVAL;
	vr_init_basic();
	if (stat(path, &st) < 0)
		return -errno;
	pthread_mutex_lock(&lock);
	for (i = 0; i < nreserves && reserves[i].dev != st.st_dev; i++)
		;
	if (i == nreserves && nreserves == MAX_FS)
		r = -ENOMEM;
	else if (i == nreserves)
		reserves[nreserves++].dev = st.st_dev;
	if (r == 0)
		reserves[i].bytes = bytes;
	pthread_mutex_unlock(&lock);
	return r;
}

ssize_t vrange_purge_disk(const char *path, size_t bytes)
{
	struct stat st;
	uint64_t freed;

	if (!path)
		return -EINVAL;
	vr_init_basic();
	if (stat(path, &st) < 0)
		return -errno;
	if (bytes == 0)
		return 0;
	freed = purge_run_disk(st.st_dev, bytes);
	return freed > SSIZE_MAX ? SSIZE_MAX : (ssize_t)freed;
}
