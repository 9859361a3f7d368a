/* SPDX-License-Identifier: MIT */
/* The main() every Check test program shares: run test_suite(), forked. */
#include <stdlib.h>

#include "test_main.h"

int test_quick(void)
{
	const char *q = getenv("VRANGE_TEST_QUICK");

	return q && *q && *q != '0';
}

int main(void)
{
	/* Read by tcase_create(), so it must be set before test_suite(). */
	setenv("CK_DEFAULT_TIMEOUT", "120", 0);
	if (getenv("VRANGE_UNDER_VALGRIND"))
		setenv("CK_TIMEOUT_MULTIPLIER", "10", 0);

	SRunner *sr = srunner_create(test_suite());
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
