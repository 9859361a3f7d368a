/* SPDX-License-Identifier: MIT */
/* bench_util.h - the clock and the error exit the benchmarks share. */
#ifndef VRANGE_BENCH_UTIL_H
#define VRANGE_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* A benchmark that cannot measure stops, saying what failed. */
static inline void die(const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, strerror(err));
	exit(1);
}

#endif
