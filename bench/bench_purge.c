/* SPDX-License-Identifier: MIT */
/*
 * bench_purge.c - purge throughput against the kernel's own punch.
 *
 * vrange_purge() of a resident, wholly volatile region, beside raw
 * fallocate(PUNCH_HOLE | KEEP_SIZE) of the same number of resident pages of
 * a mapped memfd in 2 MiB chunks, measured in the same run (target: the
 * library reaches >= 0.9x of the raw punch).  For information also:
 * vrange_region_purge(), partial vrange_purge() calls, and a fragmented
 * region (every other page volatile) beside raw per-page punches of the
 * same pages; and how long a mark pair on one page of a region waits while
 * a purge of the rest of that region runs (the purge works in bounded
 * chunks, so this stays short).  Figures are the best of several repetitions, alternating
 * library and raw runs; nothing asserts on time.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#include "bench_util.h"

#define REPS 5
#define SIZE ((size_t)256 << 20)
#define CHUNK ((size_t)2 << 20)

static size_t ps;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double gibps(size_t bytes, double s)
{
	return (double)bytes / s / (double)(1u << 30);
}

/* Write every page, so each is allocated and mapped. */
static void touch(unsigned char *p, size_t len, size_t step)
{
	for (size_t o = 0; o < len; o += step)
		p[o] = (unsigned char)(o >> 12 | 1);
}

static vrange_region *make(size_t size)
{
	vrange_region *r = NULL;
	int ret = vrange_region_create("bench-purge", size, VRANGE_ACCESS_ZERO, &r);

	if (ret < 0)
		die("vrange_region_create", -ret);
	return r;
}

/* vrange_purge(SIZE_MAX) of a whole resident volatile region. */
static double lib_all(int use_region_purge)
{
	vrange_region *r = make(SIZE);
	unsigned char *b = vrange_region_base(r);
	double t0, t;
	ssize_t n;

	touch(b, SIZE, ps);
	if (vrange_mark_volatile(r, 0, SIZE) < 0)
		die("vrange_mark_volatile", EIO);
	t0 = now_s();
	n = use_region_purge ? vrange_region_purge(r) : vrange_purge(SIZE_MAX);
	t = now_s() - t0;
	if (n != (ssize_t)SIZE)
		die("purge freed the wrong amount", n < 0 ? (int)-n : EIO);
	vrange_region_destroy(r);
	return t;
}

/* The same in calls of 16 MiB each, as a pressure monitor would. */
static double lib_partial(void)
{
	vrange_region *r = make(SIZE);
	size_t done = 0;
	double t0, t;

	touch(vrange_region_base(r), SIZE, ps);
	if (vrange_mark_volatile(r, 0, SIZE) < 0)
		die("vrange_mark_volatile", EIO);
	t0 = now_s();
	while (done < SIZE) {
		ssize_t n = vrange_purge(16u << 20);

		if (n <= 0)
			die("partial purge", n < 0 ? (int)-n : EIO);
		done += (size_t)n;
	}
	t = now_s() - t0;
	vrange_region_destroy(r);
	return t;
}

/* Raw punches of a mapped, resident memfd: chunk bytes per call, every
 * stride bytes (stride == chunk: contiguous). */
static double raw_punch(size_t chunk, size_t stride)
{
	int fd = memfd_create("bench-raw", MFD_CLOEXEC);
	unsigned char *p;
	double t0, t;

	if (fd < 0 || ftruncate(fd, (off_t)SIZE) < 0)
		die("memfd", errno);
	p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap", errno);
	touch(p, SIZE, ps);
	t0 = now_s();
	for (size_t o = 0; o < SIZE; o += stride)
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)o,
			      (off_t)chunk) < 0)
			die("fallocate", errno);
	t = now_s() - t0;
	munmap(p, SIZE);
	close(fd);
	return t;
}

/* Every other page volatile: many separate ranges. */
static double lib_fragmented(void)
{
	vrange_region *r = make(SIZE);
	double t0, t;
	ssize_t n;

	touch(vrange_region_base(r), SIZE, ps);
	for (size_t o = 0; o < SIZE; o += 2 * ps)
		if (vrange_mark_volatile(r, o, ps) < 0)
			die("vrange_mark_volatile", EIO);
	t0 = now_s();
	n = vrange_purge(SIZE_MAX);
	t = now_s() - t0;
	if (n != (ssize_t)(SIZE / 2))
		die("fragmented purge freed the wrong amount", EIO);
	vrange_region_destroy(r);
	return t;
}

/* A thread marking and unmarking one page of a region while the rest of
 * that region (1 GiB) is purged: the longest and typical pair. */
struct lat {
	vrange_region *r;
	size_t off;
	atomic_int go, stop;
	double max_ns, sum_ns;
	long n;
};

static void *lat_main(void *arg)
{
	struct lat *l = arg;

	while (!atomic_load(&l->go))
		;
	while (!atomic_load(&l->stop)) {
		double t0 = now_s() * 1e9, t;

		if (vrange_mark_volatile(l->r, l->off, ps) < 0 ||
		    vrange_mark_nonvolatile(l->r, l->off, ps) != VRANGE_INTACT)
			die("mark pair under purge", EIO);
		t = now_s() * 1e9 - t0;
		if (t > l->max_ns)
			l->max_ns = t;
		l->sum_ns += t;
		l->n++;
	}
	return NULL;
}

static void latency_under_purge(void)
{
	const size_t big = (size_t)1 << 30;
	struct lat l = { 0 };
	pthread_t th;
	double t0, t;
	ssize_t n;

	l.r = make(big);
	l.off = big - ps;
	touch(vrange_region_base(l.r), big, ps);
	if (vrange_mark_volatile(l.r, 0, big - ps) < 0)
		die("vrange_mark_volatile", EIO);
	if (pthread_create(&th, NULL, lat_main, &l) != 0)
		die("pthread_create", EAGAIN);
	atomic_store(&l.go, 1);
	usleep(1000);
	t0 = now_s();
	n = vrange_purge(SIZE_MAX);
	t = now_s() - t0;
	atomic_store(&l.stop, 1);
	pthread_join(th, NULL);
	if (n != (ssize_t)(big - ps))
		die("purge under marking freed the wrong amount", EIO);
	printf("%-46s %7.2f GiB/s   mark pair meanwhile: %ld pairs, mean %.0f ns, max %.0f us\n",
	       "purge of 1 GiB with marking in the region", gibps(big - ps, t), l.n,
	       l.n ? l.sum_ns / (double)l.n : 0.0, l.max_ns / 1000.0);
	vrange_region_destroy(l.r);
}

static double min_d(double a, double b)
{
	return a < b ? a : b;
}

int main(void)
{
	double lib = 1e9, libr = 1e9, libp = 1e9, raw = 1e9, frag = 1e9, rawfrag = 1e9;

	setenv("VRANGE_MONITOR", "0", 1);
	ps = (size_t)sysconf(_SC_PAGESIZE);
	printf("bench_purge: %zu MiB resident per run, best of %d, monitor off\n",
	       SIZE >> 20, REPS);
	for (int rep = 0; rep < REPS; rep++) {
		lib = min_d(lib, lib_all(0));
		raw = min_d(raw, raw_punch(CHUNK, CHUNK));
		libr = min_d(libr, lib_all(1));
		libp = min_d(libp, lib_partial());
		frag = min_d(frag, lib_fragmented());
		rawfrag = min_d(rawfrag, raw_punch(ps, 2 * ps));
	}
	printf("%-46s %7.2f GiB/s\n", "raw fallocate(PUNCH_HOLE), 2 MiB chunks", gibps(SIZE, raw));
	printf("%-46s %7.2f GiB/s   ratio %.2fx of raw (target >= 0.9x)\n",
	       "vrange_purge(SIZE_MAX), one region", gibps(SIZE, lib), raw / lib);
	printf("%-46s %7.2f GiB/s   ratio %.2fx of raw\n",
	       "vrange_region_purge()", gibps(SIZE, libr), raw / libr);
	printf("%-46s %7.2f GiB/s   ratio %.2fx of raw\n",
	       "vrange_purge(16 MiB) repeated", gibps(SIZE, libp), raw / libp);
	printf("%-46s %7.2f GiB/s\n", "raw punch, every other 4 KiB page",
	       gibps(SIZE / 2, rawfrag));
	printf("%-46s %7.2f GiB/s   ratio %.2fx of raw per-page punches\n",
	       "vrange_purge, every other page volatile", gibps(SIZE / 2, frag),
	       rawfrag / frag);
	latency_under_purge();
	return 0;
}
