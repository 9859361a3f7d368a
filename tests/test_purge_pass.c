/* SPDX-License-Identifier: MIT */
/*
 * test_purge_pass.c - one purge pass considers everything that was volatile
 * when it began, whoever marked it, and is not stopped by what was marked
 * or put back after (contract 3: vrange_purge(bytes) frees at least bytes
 * if that much is volatile; the oldest-first order of contract 2).
 *
 * Defects D2 and D3 of the model test: a pass stopped at the first range in
 * purge order that was marked after it began - a range another process
 * marked within the same clock tick (the pass began on the coarse clock),
 * a range of a lower priority marked meanwhile by anybody, or never-touched
 * anonymous pages the pass itself had just put back at the end of its
 * priority - and never reached the older ranges of higher priorities
 * behind it.
 *
 * Each case runs in its own forked process (CK_FORK).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

static vrange_region *region(const char *name, size_t npages, int prio)
{
	vrange_region *r = NULL;

	ck_assert_int_eq(vrange_region_create(name, npages * ps, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_eq(vrange_region_set_priority(r, prio), 0);
	return r;
}

static unsigned char *anon(size_t npages)
{
	void *p = mmap(NULL, npages * ps, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}

/*
 * D3: never-touched anonymous pages are the oldest; a purge finds no data
 * there, puts them back (they stay volatile, contract 5) and must go on to
 * the region of a higher priority behind them.
 */
START_TEST(untouched_anonymous_does_not_stop_pass)
{
	const size_t n = 4;
	unsigned char *a = anon(n);
	vrange_region *r = region("d3", n, 1);
	unsigned char *b = vrange_region_base(r);
	int purged = -1;

	ck_assert_int_eq(vrange(a, n * ps, VRANGE_VOLATILE, NULL), 0); /* untouched */
	memset(b, 'r', n * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, n * ps), 0);
	/* "Frees >= bytes if that much is volatile": the region holds it. */
	ck_assert_int_ge(vrange_purge(n * ps), (ssize_t)(n * ps));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, n * ps), VRANGE_PURGED);
	/* The untouched pages were neither purged nor forgotten. */
	ck_assert_int_eq(vrange(a, n * ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);

	/* Again with everything: a pass of all reaches the region too. */
	ck_assert_int_eq(vrange(a, n * ps, VRANGE_VOLATILE, NULL), 0);
	memset(b, 's', n * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, n * ps), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(n * ps));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, n * ps), VRANGE_PURGED);
	vrange_region_destroy(r);
	munmap(a, n * ps);
}
END_TEST

/* Part-touched anonymous memory: the resident pages go, the others stay
 * volatile, and the pass goes on to what is behind them. */
START_TEST(untouched_between_resident_pages)
{
	const size_t n = 8;
	unsigned char *a = anon(n);
	vrange_region *r = region("d3-mixed", 2, 1);
	int purged = -1;

	for (size_t i = 0; i < n; i += 2)
		a[i * ps] = 1; /* every other page holds data */
	ck_assert_int_eq(vrange(a, n * ps, VRANGE_VOLATILE, NULL), 0);
	memset(vrange_region_base(r), 'x', 2 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)((n / 2 + 2) * ps));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 2 * ps), VRANGE_PURGED);
	for (size_t i = 1; i < n; i += 2) {
		ck_assert_int_eq(vrange(a + i * ps, ps, VRANGE_NONVOLATILE, &purged), 0);
		ck_assert_int_eq(purged, 0);
	}
	vrange_region_destroy(r);
	munmap(a, n * ps);
}
END_TEST

static void write_byte(int fd)
{
	char c = 1;

	ck_assert_int_eq(write(fd, &c, 1), 1);
}

static int read_byte(int fd)
{
	char c;

	return read(fd, &c, 1) == 1;
}

/*
 * D2: another process sharing a library file marks a page and tells us;
 * our purge, at once (well within the clock tick of the mark), must find
 * it.  Many rounds: a pass that began on the coarse clock missed nearly
 * every one.
 */
START_TEST(peer_mark_of_the_same_tick)
{
	const size_t n = 64;
	vrange_region *r = region("d2-tick", n, 0);
	vrange_region *scratch = region("d2-scratch", 1, 0);
	unsigned char *b = vrange_region_base(r);
	int go[2], done[2], st;
	pid_t pid;

	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The child shares the region's state (a holder, contract 2).
		 * It marks a lot, as a busy process does: its own count of
		 * marks within the tick runs on. */
		for (size_t i = 0; i < n && read_byte(go[0]); i++) {
			for (int k = 0; k < 200; k++) {
				vrange_mark_volatile(scratch, 0, ps);
				vrange_mark_nonvolatile(scratch, 0, ps);
			}
			memset(b + i * ps, 'p', ps);
			if (vrange_mark_volatile(r, i * ps, ps) != 0)
				_exit(2);
			write_byte(done[1]);
		}
		_exit(0);
	}
	for (size_t i = 0; i < n; i++) {
		write_byte(go[1]);
		ck_assert(read_byte(done[0]));
		ck_assert_msg(vrange_purge(SIZE_MAX) >= (ssize_t)ps,
			      "round %zu: the peer's fresh mark was not purged", i);
		ck_assert_int_eq(vrange_mark_nonvolatile(r, i * ps, ps), VRANGE_PURGED);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	vrange_region_destroy(r);
	vrange_region_destroy(scratch);
}
END_TEST

/*
 * D2 with priorities: another process keeps marking pages of a lower
 * priority while we purge.  Those marks come after our pass began and
 * sort before our older ranges; the pass must go past them.
 */
START_TEST(peer_low_priority_marks_do_not_stop_pass)
{
	const size_t n = 8;
	const int rounds = test_quick() ? 50 : 300;
	vrange_region *mine = region("d2-mine", n, 0);
	vrange_region *theirs = region("d2-theirs", 4, 0);
	unsigned char *b = vrange_region_base(mine);
	int ready[2], st;
	pid_t pid;

	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		unsigned char *t = vrange_region_base(theirs);

		vrange_region_set_priority(theirs, -1);
		write_byte(ready[1]);
		for (;;) { /* until killed */
			for (size_t i = 0; i < 4; i++) {
				t[i * ps] = 1;
				vrange_mark_volatile(theirs, i * ps, ps);
			}
			for (size_t i = 0; i < 4; i++)
				vrange_mark_nonvolatile(theirs, i * ps, ps);
		}
	}
	ck_assert(read_byte(ready[0]));
	for (int i = 0; i < rounds; i++) {
		ssize_t freed;

		memset(b, 'm', n * ps);
		ck_assert_int_eq(vrange_mark_volatile(mine, 0, n * ps), 0);
		freed = vrange_purge(SIZE_MAX);
		ck_assert_msg(vrange_mark_nonvolatile(mine, 0, n * ps) == VRANGE_PURGED,
			      "round %d: the pass stopped at the peer's newer marks "
			      "(freed %zd)", i, freed);
	}
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	vrange_region_destroy(mine);
	vrange_region_destroy(theirs);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("purge-pass");
	TCase *tc = tcase_create("pass");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, untouched_anonymous_does_not_stop_pass);
	tcase_add_test(tc, untouched_between_resident_pages);
	tcase_add_test(tc, peer_mark_of_the_same_tick);
	tcase_add_test(tc, peer_low_priority_marks_do_not_stop_pass);
	suite_add_tcase(s, tc);
	return s;
}
