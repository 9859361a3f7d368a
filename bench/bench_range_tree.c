/* SPDX-License-Identifier: MIT */
/*
 * bench_range_tree - memory per range and operation rates of the interval
 * tree at 1k and 1M tracked ranges.  Prints figures; asserts nothing about
 * speed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "range_tree.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static volatile uint64_t sink;

static int bench(uint32_t nranges, uint32_t iters)
{
	size_t bytes = rt_arena_bytes(nranges + 16);
	void *arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct rt_tree t;
	struct rt_range r;
	uint64_t rng = 42, v, p;
	double t0, dt;
	int err = 0;

	if (arena == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (rt_format(&t, arena, bytes) != 0)
		goto fail;
	/* Ranges [4i, 4i+2), each its own age, so none merge. */
	t0 = now();
	for (uint32_t i = 0; i < nranges && !err; i++)
		err = rt_mark_volatile(&t, 4ull * i, 4ull * i + 2,
				       (int32_t)(rng_next(&rng) % 8), i, NULL);
	dt = now() - t0;
	if (err || rt_nranges(&t) != nranges)
		goto fail;
	printf("%8" PRIu32 " ranges: arena %zu bytes, %.1f bytes/range, "
	       "build %.0f marks/s\n", nranges, bytes,
	       (double)bytes / nranges, nranges / dt);

	/* Mark a page in a hole (a range of its own) and clear it again. */
	t0 = now();
	for (uint32_t i = 0; i < iters && !err; i++) {
		uint64_t pg = 4 * (rng_next(&rng) % nranges) + 3;

		err = rt_mark_volatile(&t, pg, pg + 1, 3, nranges + i, NULL);
		if (!err)
			err = rt_clear(&t, pg, pg + 1, &v, &p);
	}
	dt = now() - t0;
	if (err)
		goto fail;
	printf("%8s mark_volatile+clear: %.0f pairs/s\n", "", iters / dt);

	t0 = now();
	for (uint32_t i = 0; i < iters; i++) {
		if (rt_oldest(&t, &r) != 1)
			goto fail;
		sink += r.start;
	}
	dt = now() - t0;
	printf("%8s rt_oldest: %.0f calls/s\n", "", iters / dt);

	t0 = now();
	for (uint32_t i = 0; i < iters; i++) {
		uint64_t pg = rng_next(&rng) % (4ull * nranges);

		if (rt_count(&t, pg, pg + 64, &v, &p) != 0)
			goto fail;
		sink += v + p;
	}
	dt = now() - t0;
	printf("%8s rt_count (64-page window): %.0f calls/s\n", "", iters / dt);
	if (rt_check(&t) != 0)
		goto fail;
	munmap(arena, bytes);
	return 0;
fail:
	fprintf(stderr, "bench_range_tree: tree operation failed (%d)\n", err);
	munmap(arena, bytes);
	return 1;
}

int main(void)
{
	printf("sizeof(node) = %zu bytes (arena bytes per range, plus a "
	       "header slot and %zu spare)\n",
	       rt_arena_bytes(1) - rt_arena_bytes(0),
	       rt_arena_bytes(0) / (rt_arena_bytes(1) - rt_arena_bytes(0)) - 1);
	if (bench(1000, 1000000) || bench(1000000, 1000000))
		return EXIT_FAILURE;
	return EXIT_SUCCESS;
}
