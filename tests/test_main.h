/* SPDX-License-Identifier: MIT */
/* Shared by the Check test programs: each defines test_suite(). */
#ifndef VRANGE_TEST_MAIN_H
#define VRANGE_TEST_MAIN_H

#include <check.h>
#include <stdio.h>

Suite *test_suite(void);

/* Nonzero when the tests run under a sanitizer or valgrind: scale loops down. */
int test_quick(void);

/*
 * Report that a case cannot run on this machine and why.  The case then
 * returns without asserting; the reason is printed so it is never a silent
 * pass.
 */
#define TEST_SKIP(...)                                                         \
	do {                                                                   \
		fprintf(stderr, "SKIP %s: ", __func__);                        \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		return;                                                        \
	} while (0)

#endif
