/* SPDX-License-Identifier: MIT */
/*
 * bench_cost.c - what the purge order by cost saves (contract 10).
 *
 * One deterministic trace of accesses to N items (one page each, one
 * region), Zipf-like popularity (s = 0.9), replayed under a memory budget
 * of 20% of the items: an access unmarks the item's page (VRANGE_PURGED or
 * never there: a miss, whose re-creation cost is paid and the page
 * rewritten), then marks it volatile again; whenever more pages are
 * resident than the budget, vrange_purge() takes the excess in the
 * library's order.  Replayed twice in the same run: with every cost given
 * as 1 (the age-only order) and with the real costs.  Beside them, an
 * ideal GreedyDual-Size cache of the same capacity on the same trace (no
 * library).  Two workloads: 10% of the items 100x dearer (the cost-aware
 * total should be at most half the age-only one), and every item of one
 * cost (no more than 5% worse).  Prints totals and ratios; asserts
 * nothing.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vrange.h>

#include "bench_util.h"

#define N 2000u
#define BUDGET (N / 5)
#define ACCESSES 60000u

static size_t ps;
static uint32_t trace[ACCESSES];
static uint32_t cost_of[N];

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static void make_trace(uint32_t dear_every, uint32_t dear, uint32_t cheap)
{
	static double cdf[N];
	static uint32_t perm[N];
	double sum = 0;

	rng = 0x9e3779b97f4a7c15ull;
	for (uint32_t i = 0; i < N; i++) {
		sum += 1.0 / pow((double)(i + 1), 0.9);
		cdf[i] = sum;
		perm[i] = i;
	}
	/* Popularity rank -> item: a shuffle, so cost and popularity are
	 * independent. */
	for (uint32_t i = N - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(uniform() * (i + 1)), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (uint32_t a = 0; a < ACCESSES; a++) {
		double u = uniform() * sum;
		uint32_t lo = 0, hi = N - 1;

		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		trace[a] = perm[lo];
	}
	for (uint32_t i = 0; i < N; i++)
		cost_of[i] = i % dear_every == 0 ? dear : cheap;
}

/* The library under the budget; costs as given (use_costs) or all 1. */
static uint64_t replay(bool use_costs)
{
	vrange_region *r = NULL;
	static bool there[N];
	uint64_t paid = 0, resident = 0;
	unsigned char *base;
	int err;

	err = vrange_region_create("bench-cost", (size_t)N * ps, VRANGE_ACCESS_ZERO, &r);
	if (err)
		die("vrange_region_create", -err);
	base = vrange_region_base(r);
	memset(there, 0, sizeof(there));
	for (uint32_t a = 0; a < ACCESSES; a++) {
		uint32_t i = trace[a];
		int rc = 0;

		if (there[i]) {
			rc = vrange_mark_nonvolatile(r, (size_t)i * ps, ps);
			if (rc < 0)
				die("vrange_mark_nonvolatile", -rc);
		}
		if (!there[i] || rc == VRANGE_PURGED) {
			paid += cost_of[i]; /* re-create it */
			base[(size_t)i * ps] = (unsigned char)(i | 1);
			there[i] = true;
			resident++;
		}
		rc = vrange_mark_volatile_cost(r, (size_t)i * ps, ps,
					       use_costs ? cost_of[i] : 1);
		if (rc < 0)
			die("vrange_mark_volatile_cost", -rc);
		if (resident > BUDGET) {
			ssize_t got = vrange_purge((resident - BUDGET) * ps);

			if (got < 0)
				die("vrange_purge", (int)-got);
			resident -= (uint64_t)got / ps < resident ? (uint64_t)got / ps : resident;
		}
	}
	vrange_region_destroy(r);
	return paid;
}

/* GreedyDual-Size with capacity BUDGET pages: evict the smallest H, L
 * rises to it; an item's H = L + cost at every access. */
static uint64_t ideal(void)
{
	static double h[N];
	static bool in[N];
	uint32_t count = 0;
	double L = 0;
	uint64_t paid = 0;

	memset(in, 0, sizeof(in));
	for (uint32_t a = 0; a < ACCESSES; a++) {
		uint32_t i = trace[a];

		if (!in[i]) {
			paid += cost_of[i];
			if (count == BUDGET) {
				uint32_t v = N;

				for (uint32_t j = 0; j < N; j++)
					if (in[j] && (v == N || h[j] < h[v]))
						v = j;
				L = h[v];
				in[v] = false;
				count--;
			}
			in[i] = true;
			count++;
		}
		h[i] = L + cost_of[i];
	}
	return paid;
}

static void workload(const char *name, uint32_t dear_every, uint32_t dear,
		     uint32_t cheap)
{
	uint64_t age, cost, gds;
	double t0, t1, t2;

	make_trace(dear_every, dear, cheap);
	t0 = now_ns();
	age = replay(false);
	t1 = now_ns();
	cost = replay(true);
	t2 = now_ns();
	gds = ideal();
	printf("%-28s cost-aware %9llu  age-only %9llu  ideal GDS %9llu  "
	       "cost-aware/age-only %.3f  cost-aware/ideal %.3f  (%.2f s, %.2f s)\n",
	       name, (unsigned long long)cost, (unsigned long long)age,
	       (unsigned long long)gds, (double)cost / (double)age,
	       (double)cost / (double)gds, (t1 - t0) / 1e9, (t2 - t1) / 1e9);
}

int main(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	printf("bench_cost: %u items of a page, budget %u pages, %u accesses, Zipf 0.9\n",
	       N, BUDGET, ACCESSES);
	workload("10% of items 100x dearer", 10, 100, 1);
	workload("every item cost 10", 1, 10, 10);
	return 0;
}
