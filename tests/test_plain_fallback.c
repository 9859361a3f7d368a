/* SPDX-License-Identifier: MIT */
/*
 * test_plain_fallback.c - where the plain mark cannot be: the library
 * detects it, says why in vrange_get_stats(), and marks with a swap.
 * Every case runs in a process of its own (Check forks), which changes
 * its environment before the first call into the library:
 *
 *  - plain marks here: nothing to say, the regions' heads and the area
 *    say plain;
 *  - VRANGE_PLAIN_MARKS=0: off, and says so;
 *  - a seccomp filter refusing membarrier(2): off, "membarrier: ...",
 *    pairs INTACT and a purge that takes the page as before;
 *  - another process purging a file this one marks plainly, over and
 *    over, able to fence or not (the fallback's wait): every INTACT over
 *    the page's bytes.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_main.h"
#include "vrange.h"

static size_t ps;

static struct vrange_stats stats(void)
{
	struct vrange_stats st;

	ck_assert_int_eq(vrange_get_stats(&st), 0);
	return st;
}

/* membarrier(2) answers EPERM from now on, in this process and its
 * children. */
static int refuse_membarrier(void)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fp = { .len = sizeof(prog) / sizeof(prog[0]), .filter = prog };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) < 0 ? -errno : 0;
}

static vrange_region *region(size_t pages)
{
	vrange_region *r = NULL;

	ps = (size_t)sysconf(_SC_PAGESIZE);
	ck_assert_int_eq(vrange_region_create("plain-fallback", pages * ps,
					      VRANGE_ACCESS_ZERO, &r), 0);
	memset(vrange_region_base(r), 0x5a, pages * ps);
	return r;
}

static const struct vrange_region_inline *head(vrange_region *r)
{
	return (const struct vrange_region_inline *)(const void *)r;
}

static uint32_t area_plain(vrange_region *r)
{
	const struct vrange_inline_words *h =
		__atomic_load_n(&head(r)->pw->hdr, __ATOMIC_ACQUIRE);

	return h ? h->plain : 0;
}

/* Pairs say INTACT, a purge takes a marked page, its unmark says PURGED
 * and it reads zeros. */
static void marks_and_purges(vrange_region *r)
{
	char *b = vrange_region_base(r);

	for (int i = 0; i < 1000; i++) {
		ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, ps), 0);
		ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps, ps), VRANGE_INTACT);
	}
	ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, ps), 0);
	ck_assert_int_eq(vrange_region_purge(r), (ssize_t)ps);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps, ps), VRANGE_PURGED);
	ck_assert_int_eq(b[2 * ps], 0);
	ck_assert_int_eq(b[3 * ps], 0x5a);
}

START_TEST(plain_marks_here)
{
	vrange_region *r = region(8);
	struct vrange_stats st = stats();

	if (!head(r)->lib.plain)
		TEST_SKIP("no plain marks on this machine: %s", st.plain_marks_off);
	ck_assert_str_eq(st.plain_marks_off, "");
	ck_assert_uint_eq(vrange_inline_lib()->plain, 1);
	ck_assert_uint_eq(area_plain(r), 1);
	marks_and_purges(r);
	/* The purge turned plain marks off; its unlock put them back. */
	ck_assert_uint_eq(area_plain(r), 1);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(turned_off_by_the_environment)
{
	vrange_region *r;

	ck_assert_int_eq(setenv("VRANGE_PLAIN_MARKS", "0", 1), 0);
	r = region(8);
	ck_assert_str_eq(stats().plain_marks_off, "VRANGE_PLAIN_MARKS=0");
	ck_assert_uint_eq(head(r)->lib.plain, 0);
	ck_assert_uint_eq(vrange_inline_lib()->plain, 0);
	/* Others sharing the file may mark plainly: this process fences. */
	ck_assert_uint_eq(area_plain(r), 1);
	marks_and_purges(r);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(membarrier_refused)
{
	vrange_region *r;
	int ret = refuse_membarrier();

	if (ret < 0)
		TEST_SKIP("no seccomp filter here: %s", strerror(-ret));
	ck_assert_int_lt(syscall(__NR_membarrier, 0, 0, 0), 0);
	r = region(8);
	ck_assert_str_eq(stats().plain_marks_off, "membarrier: EPERM");
	ck_assert_uint_eq(head(r)->lib.plain, 0);
	ck_assert_uint_eq(area_plain(r), 0);
	marks_and_purges(r);
	vrange_region_destroy(r);
}
END_TEST

/* The parent marks pages plainly, one at a time, and checks every INTACT
 * against the page's bytes; a child (which cannot fence, if refuse) purges
 * the shared state (moved at the fork) over and over until the parent is
 * done.  A plain store landing on a page recorded purged would show as an
 * INTACT over zeros. */
static void purged_by_another_process(bool refuse)
{
	vrange_region *r = region(64);
	char *b = vrange_region_base(r);
	int go[2], done[2], status, purged = 0;
	char c;
	pid_t pid;

	if (!head(r)->lib.plain)
		TEST_SKIP("no plain marks on this machine: %s", stats().plain_marks_off);
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		long passes = 0;

		close(done[1]);
		if (refuse && refuse_membarrier() < 0)
			_exit(77);
		if (write(go[1], "x", 1) != 1)
			_exit(1);
		/* Until the parent closes its end. */
		for (struct pollfd p = { .fd = done[0], .events = POLLIN };
		     poll(&p, 1, 0) == 0; passes++)
			if (vrange_region_purge(r) < 0)
				_exit(1);
		_exit(passes > 0 ? 0 : 1);
	}
	close(done[0]);
	ck_assert_int_eq(read(go[0], &c, 1), 1);
	/* Each page stays volatile while the next one is marked. */
	for (int round = 0; round < 300; round++)
		for (size_t i = 10; i < 64; i++) {
			size_t j = i > 10 ? i - 1 : 63;
			int res;

			ck_assert_int_eq(vrange_mark_volatile(r, i * ps, ps), 0);
			if (!round && i == 10)
				continue;
			res = vrange_mark_nonvolatile(r, j * ps, ps);
			ck_assert(res == VRANGE_INTACT || res == VRANGE_PURGED);
			if (res == VRANGE_INTACT)
				ck_assert_int_eq(b[j * ps], 0x5a);
			else
				purged++;
			b[j * ps] = 0x5a;
		}
	close(done[1]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		TEST_SKIP("no seccomp filter here");
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	/* Back on after the other process's purges: a fencing purger puts
	 * it back as it lets go of the lock; after one that cannot fence, the
	 * next holder here does. */
	if (refuse)
		ck_assert_int_ge(vrange_region_purge(r), 0);
	ck_assert_uint_eq(area_plain(r), 1);
	fprintf(stderr, "%s purger: %d of %d unmarks PURGED\n",
		refuse ? "a non-fencing" : "a fencing", purged, 300 * 54);
	close(go[0]);
	close(go[1]);
	vrange_region_destroy(r);
}

START_TEST(purger_in_another_process)
{
	purged_by_another_process(false);
}
END_TEST

START_TEST(purger_that_cannot_fence)
{
	purged_by_another_process(true);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("plain-fallback");
	TCase *tc = tcase_create("plain-fallback");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, plain_marks_here);
	tcase_add_test(tc, turned_off_by_the_environment);
	tcase_add_test(tc, membarrier_refused);
	tcase_add_test(tc, purger_in_another_process);
	tcase_add_test(tc, purger_that_cannot_fence);
	suite_add_tcase(s, tc);
	return s;
}
