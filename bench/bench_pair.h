/* SPDX-License-Identifier: MIT */
/* bench_pair.h - the region mark pair as the benchmarks measure it. */
#ifndef VRANGE_BENCH_PAIR_H
#define VRANGE_BENCH_PAIR_H

#include <vrange.h>

#include "bench_util.h"

/* Per-pair ns of n pairs on [off, off + len) of r: a function of its own,
 * so that the loop is not measured inside another's register allocation
 * (bench-mark's floor is measured the same way). */
static __attribute__((noinline, unused)) double pair_batch(vrange_region *r, size_t off,
							  size_t len, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		int ret = vrange_mark_volatile(r, off, len);

		if (ret < 0)
			die("vrange_mark_volatile", -ret);
		ret = vrange_mark_nonvolatile(r, off, len);
		if (ret != VRANGE_INTACT)
			die("vrange_mark_nonvolatile", ret < 0 ? -ret : EIO);
	}
	return (now_ns() - t0) / (double)n;
}

#endif
