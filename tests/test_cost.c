/* SPDX-License-Identifier: MIT */
/*
 * test_cost.c - the purge order by re-creation cost (contract 10).
 *
 * Within a priority a range of cost c is purged as if marked (c - 1)
 * aging units later (at least 1 ms each, docs/design.md "Purge order by
 * cost"): a dearer range outlives a cheaper one marked at the same time,
 * in the page words (single pages) and in the tree (ranges), in one file
 * and across files; with every cost equal the order is the mark order;
 * a dear range not marked again is purged in the end; cost 0 is -EINVAL;
 * the cache takes a cost per put and a default in its options (an older
 * struct_size means 1); vrange_stats.purged_cost counts pages x cost.
 *
 * Each case runs in its own forked process (CK_FORK), without the monitor.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

static vrange_region *region(const char *name, size_t npages)
{
	vrange_region *r = NULL;

	ck_assert_int_eq(vrange_region_create(name, npages * ps, VRANGE_ACCESS_ZERO, &r), 0);
	memset(vrange_region_base(r), 0x5a, npages * ps);
	return r;
}

/* Was [pg, pg + n) of r purged?  (Makes it non-volatile.) */
static int purged(vrange_region *r, size_t pg, size_t n)
{
	int rc = vrange_mark_nonvolatile(r, pg * ps, n * ps);

	ck_assert_int_ge(rc, 0);
	return rc == VRANGE_PURGED;
}

START_TEST(cost_zero_is_einval)
{
	vrange_region *r = region("cost-einval", 4);
	struct vrange_cache_opts o = { .struct_size = sizeof(o) };
	vrange_cache *c = NULL;

	ck_assert_int_eq(vrange_mark_volatile_cost(r, 0, ps, 0), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile_cost(NULL, 0, ps, 1), -EINVAL);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 0);
	ck_assert_int_eq(vrange_region_set_cost(r, 0), -EINVAL);
	ck_assert_int_eq(vrange_region_set_cost(NULL, 5), -EINVAL);
	ck_assert_int_eq(vrange_region_set_cost(r, 5), 0);
	ck_assert_int_eq(vrange_cache_create(&o, &c), 0);
	ck_assert_int_eq(vrange_cache_put_cost(c, "k", 1, "v", 1, 0), -EINVAL);
	ck_assert_int_eq(vrange_cache_put_cost(NULL, "k", 1, "v", 1, 3), -EINVAL);
	ck_assert_int_eq(vrange_cache_put_cost(c, "k", 1, "v", 1, 3), 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
}
END_TEST

/*
 * The dear range is marked first, the cheap one right after (well within
 * a millisecond): by age alone the dear one goes first.  npages 1: page
 * words; 32: tree ranges.  _i: the same file or two files.
 */
START_TEST(dear_outlives_cheap_marked_at_the_same_time)
{
	size_t n = _i & 1 ? 32 : 1;
	bool two_files = _i & 2;
	vrange_region *a = region("cost-a", 2 * n), *b = two_files ? region("cost-b", 2 * n) : a;
	size_t cheap_pg = two_files ? 0 : n;
	struct vrange_stats st0, st1;

	ck_assert_int_eq(vrange_get_stats(&st0), 0);
	ck_assert_int_eq(vrange_mark_volatile_cost(a, 0, n * ps, 100), 0);
	ck_assert_int_eq(vrange_mark_volatile(b, cheap_pg * ps, n * ps), 0);
	ck_assert_int_ge(vrange_purge(n * ps), (ssize_t)(n * ps));
	ck_assert_int_eq(vrange_get_stats(&st1), 0);
	ck_assert_int_eq(purged(b, cheap_pg, n), 1);
	ck_assert_int_eq(purged(a, 0, n), 0);
	/* The cheap pages went, at cost 1 each. */
	ck_assert_uint_eq(st1.purged_cost - st0.purged_cost, n);
	/* Now the dear one, at 100 each. */
	ck_assert_int_eq(vrange_mark_volatile_cost(a, 0, n * ps, 100), 0);
	ck_assert_int_ge(vrange_purge(n * ps), (ssize_t)(n * ps));
	ck_assert_int_eq(vrange_get_stats(&st0), 0);
	ck_assert_uint_eq(st0.purged_cost - st1.purged_cost, 100 * n);
	ck_assert_int_eq(purged(a, 0, n), 1);
	if (two_files)
		ck_assert_int_eq(vrange_region_destroy(b), 0);
	ck_assert_int_eq(vrange_region_destroy(a), 0);
}
END_TEST

/* A region's cost applies to its plain marks (and vrange() on it). */
START_TEST(region_cost_applies_to_plain_marks)
{
	vrange_region *a = region("cost-dear", 4), *b = region("cost-cheap", 4);

	ck_assert_int_eq(vrange_region_set_cost(a, 1000), 0);
	ck_assert_int_eq(vrange(vrange_region_base(a), ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_mark_volatile(a, ps, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(b, 0, 2 * ps), 0);
	ck_assert_int_ge(vrange_purge(2 * ps), (ssize_t)(2 * ps));
	ck_assert_int_eq(purged(b, 0, 2), 1);
	ck_assert_int_eq(purged(a, 0, 2), 0);
	ck_assert_int_eq(vrange_region_destroy(b), 0);
	ck_assert_int_eq(vrange_region_destroy(a), 0);
}
END_TEST

/* Every cost equal (not 1): the order is the order of marking, page by
 * page, in the words (_i 0) and in the tree (_i 1: two-page ranges). */
START_TEST(equal_costs_keep_the_mark_order)
{
	static const size_t order[] = { 5, 2, 7, 0, 3, 6, 1, 4 };
	size_t w = _i ? 2 : 1;
	vrange_region *r = region("cost-equal", 8 * w);

	for (size_t k = 0; k < 8; k++)
		ck_assert_int_eq(vrange_mark_volatile_cost(r, order[k] * w * ps, w * ps, 7), 0);
	for (size_t k = 0; k < 8; k++) {
		ck_assert_int_ge(vrange_purge(w * ps), (ssize_t)(w * ps));
		ck_assert_int_eq(purged(r, order[k] * w, w), 1);
		for (size_t j = k + 1; j < 8; j++) {
			ck_assert_int_eq(purged(r, order[j] * w, w), 0);
			ck_assert_int_eq(vrange_mark_volatile_cost(r, order[j] * w * ps, w * ps, 7), 0);
		}
		/* Re-marked in the same order: still the same order. */
	}
	ck_assert_int_eq(vrange_region_destroy(r), 0);
}
END_TEST

/* A dear range nobody marks again goes in the end, once the cheap ones
 * marked up to its head start later are purged: aging, not protection. */
START_TEST(dear_range_not_marked_again_is_purged_in_the_end)
{
	vrange_region *d = region("cost-aging-dear", 1), *c = region("cost-aging-cheap", 64);
	struct timespec start, now, pause = { 0, 2000000 };
	int rounds = 0;

	ck_assert_int_eq(vrange_mark_volatile_cost(d, 0, ps, 100), 0);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		size_t pg = (size_t)rounds % 64;

		ck_assert_int_eq(vrange_mark_volatile(c, pg * ps, ps), 0);
		ck_assert_int_ge(vrange_purge(ps), (ssize_t)ps);
		/* ZERO mode: a purged page reads zeros (no unmark: the
		 * dear page is marked once). */
		if (((volatile unsigned char *)vrange_region_base(d))[0] == 0)
			break;
		rounds++;
		clock_gettime(CLOCK_MONOTONIC, &now);
		ck_assert_msg(now.tv_sec - start.tv_sec < 20,
			      "a dear page outlived %d purges of cheap ones", rounds);
		nanosleep(&pause, NULL);
	}
	/* Not at once: it outlived some cheap pages marked after it. */
	ck_assert_int_gt(rounds, 3);
	ck_assert_int_eq(vrange_region_destroy(c), 0);
	ck_assert_int_eq(vrange_region_destroy(d), 0);
}
END_TEST

/* The cache: a value put dear outlives a cheap one put right after; a
 * cache's own cost option; options of the older size (no cost) work. */
START_TEST(cache_costs)
{
	struct vrange_cache_opts o = { .struct_size = sizeof(o),
				       .flags = VRANGE_CACHE_EAGER };
	struct vrange_cache_opts old = { .struct_size = offsetof(struct vrange_cache_opts, cost),
					 .flags = VRANGE_CACHE_EAGER };
	struct vrange_cache_opts dear_opts = o;
	vrange_cache *c = NULL, *c_old = NULL, *c_dear = NULL;
	char *v = malloc(ps);
	const void *got;
	size_t len;

	ck_assert_ptr_nonnull(v);
	memset(v, 7, ps);
	dear_opts.cost = 500;
	ck_assert_int_eq(vrange_cache_create(&o, &c), 0);
	ck_assert_int_eq(vrange_cache_create(&old, &c_old), 0);
	ck_assert_int_eq(vrange_cache_create(&dear_opts, &c_dear), 0);
	ck_assert_int_eq(vrange_cache_put_cost(c, "dear", 4, v, ps, 100), 0);
	ck_assert_int_eq(vrange_cache_put(c, "cheap", 5, v, ps), 0);
	ck_assert_int_ge(vrange_purge(ps), (ssize_t)ps);
	ck_assert_int_eq(vrange_cache_get(c, "cheap", 5, &got, &len), -ENOENT);
	ck_assert_int_eq(vrange_cache_get(c, "dear", 4, &got, &len), 0);
	ck_assert_int_eq(vrange_cache_release(c, got), 0);
	/* The cache whose default is dear against the old-sized one. */
	ck_assert_int_eq(vrange_cache_put(c_dear, "x", 1, v, ps), 0);
	ck_assert_int_eq(vrange_cache_put(c_old, "y", 1, v, ps), 0);
	ck_assert_int_ge(vrange_purge(ps), (ssize_t)ps);
	ck_assert_int_eq(vrange_cache_get(c_old, "y", 1, &got, &len), -ENOENT);
	ck_assert_int_eq(vrange_cache_get(c_dear, "x", 1, &got, &len), 0);
	ck_assert_int_eq(vrange_cache_release(c_dear, got), 0);
	ck_assert_int_eq(vrange_cache_destroy(c_dear), 0);
	ck_assert_int_eq(vrange_cache_destroy(c_old), 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
	free(v);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("cost");
	TCase *tc = tcase_create("order");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, cost_zero_is_einval);
	tcase_add_loop_test(tc, dear_outlives_cheap_marked_at_the_same_time, 0, 4);
	tcase_add_test(tc, region_cost_applies_to_plain_marks);
	tcase_add_loop_test(tc, equal_costs_keep_the_mark_order, 0, 2);
	tcase_add_test(tc, dear_range_not_marked_again_is_purged_in_the_end);
	tcase_add_test(tc, cache_costs);
	suite_add_tcase(s, tc);
	return s;
}
