/* SPDX-License-Identifier: MIT */
/*
 * test_page_words_race_inline.c - the inline fast path of the public
 * header (vrange.h: a mark or unmark of one page of a region in the
 * caller) against the library's locked steps and purges forced exactly
 * between its first look at fast_off and its swap (hook 0) and between the
 * swap and its second look (hook 1).  An outside program, linked against
 * libvrange.so: the header's code, with VRANGE_INLINE_TEST_HOOK defined,
 * against the library as it is.
 *
 *  - a purge (this process, then another one: at the fork the state moves,
 *    or it was shared before) recording the page before an unmark's swap:
 *    the inline unmark must not say INTACT, the call says PURGED and the
 *    page reads zeros;
 *  - a purge right after an unmark's swap finds the page non-volatile: its
 *    bytes stay;
 *  - a large mark (a tree range: lock-free changes off) landing before a
 *    mark's swap, covering the page or not, or right after an unmark's
 *    swap: the inline call says "take the call", the call settles it, and
 *    the counts stay exact;
 *  - an unmark by the library before a re-mark's swap: the mark retries
 *    on the fresh word, counted once; a purge there: the page stays
 *    purged (the re-mark goes to the call);
 *  - vrange() on a region page, inline through the thread's last hit: a
 *    purge before its unmark's swap makes *purged 1; a region created
 *    since (the table changed) sends it to the call;
 *  - a mark at a cost of its own inline (an unmark finds the word whose
 *    cost it did not expect), and one dearer than a word holds: the call;
 *  - a head without VRANGE_INLINE_ABI (a later library's layout): the
 *    inline code calls, and the calls still work;
 *  - two threads pairing on neighbouring pages of a SIGBUS-mode region
 *    while this one purges it: INTACT only over every byte, the counts
 *    exact at the end.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void test_inline_hook(int where);
#define VRANGE_INLINE_TEST_HOOK(where) test_inline_hook(where)
#include <vrange.h>

#include "test_main.h"

enum { NPAGES = 64, PAGE = 9, BIG_AT = 32, BIG_PAGES = 20 };

static vrange_region *R;
static char *base;
static size_t ps;
static int step, at; /* what the hook does next (0: nothing), and where */

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	ck_assert_int_eq(vrange_region_create("race-inline", NPAGES * ps,
					      VRANGE_ACCESS_ZERO, &R), 0);
	base = vrange_region_base(R);
	memset(base, 0x5a, NPAGES * ps);
	step = at = 0;
	/* The thread's first pair claims its stripe (through the call). */
	ck_assert_int_eq((vrange_mark_volatile)(R, 0, ps), 0);
	ck_assert_int_eq((vrange_mark_nonvolatile)(R, 0, ps), VRANGE_INTACT);
}

static void teardown(void)
{
	step = 0;
	vrange_region_destroy(R);
	R = NULL;
}

#ifdef VRANGE_INLINE
enum { PURGE_HERE = 1, PURGE_IN_CHILD, BIG_MARK_ELSEWHERE, BIG_MARK_OVER,
       UNMARK_IT };
static ssize_t purged_by_hook;

static void big_mark(size_t first)
{
	ck_assert_int_eq((vrange_mark_volatile)(R, first * ps, BIG_PAGES * ps), 0);
}

static void (*hook_fn)(int where);

/* The other party's steps, once, at the point `at` names. */
void test_inline_hook(int where)
{
	int what = step, status;
	pid_t pid;

	if (hook_fn) {
		hook_fn(where);
		return;
	}
	if (where != at || !what)
		return;
	step = 0; /* once: the hook runs again when the swap is retried */
	switch (what) {
	case PURGE_HERE:
		purged_by_hook = vrange_region_purge(R);
		break;
	case PURGE_IN_CHILD:
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			_exit(vrange_region_purge(R) > 0 ? 0 : 1);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		break;
	case BIG_MARK_ELSEWHERE:
		big_mark(BIG_AT);
		break;
	case BIG_MARK_OVER:
		big_mark(PAGE - 4);
		break;
	case UNMARK_IT:
		ck_assert_int_eq((vrange_mark_nonvolatile)(R, PAGE * ps, ps),
				 VRANGE_INTACT);
		break;
	}
}

static void arm(int what, int where)
{
	step = what;
	at = where;
}

static struct vrange_region_inline *head(void)
{
	return (struct vrange_region_inline *)(void *)R;
}

static uint64_t volatile_pages(void)
{
	struct vrange_stats st;

	ck_assert_int_eq(vrange_get_stats(&st), 0);
	return st.volatile_bytes / ps;
}

#endif

/* The header's inline path runs here, on this region. */
static bool inline_here(void)
{
#ifdef VRANGE_INLINE
	if (vrange_inline_lib()->abi == VRANGE_INLINE_ABI &&
	    head()->abi == VRANGE_INLINE_ABI &&
	    __vrange_try_mark(head(), 1 * ps, ps, 0) == 1) {
		ck_assert_int_eq(__vrange_try_unmark(head(), 1 * ps, ps), 1);
		return true;
	}
#endif
	fprintf(stderr, "SKIP: no inline fast path here (x86-64 with cmpxchg16b)\n");
	return false;
}

#ifdef VRANGE_INLINE
static bool page_is(size_t i, int byte)
{
	for (size_t b = 0; b < ps; b++)
		if (base[i * ps + b] != (char)byte)
			return false;
	return true;
}

static void purge_before_unmark(int how)
{
	if (!inline_here())
		return;
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	arm(how, 0);
	/* The purge's swap came first: the inline unmark must not say INTACT. */
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 0);
	ck_assert_int_eq(step, 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_PURGED);
	ck_assert(page_is(PAGE, 0));
	ck_assert_uint_eq(volatile_pages(), 0);
}

START_TEST(purge_records_before_the_unmark)
{
	purge_before_unmark(PURGE_HERE);
	ck_assert_int_gt(purged_by_hook, 0);
}
END_TEST

START_TEST(purge_in_another_process_before_the_unmark)
{
	purge_before_unmark(PURGE_IN_CHILD);
}
END_TEST

/* The state shared already (the region's fd handed out): the child purges
 * the words the inline unmark is about to swap, in the same shared area. */
START_TEST(purge_in_another_process_on_shared_state)
{
	if (!inline_here())
		return;
	ck_assert_int_ge(vrange_region_fd(R), 0);
	/* The moved state's first pair claims a stripe there (the call). */
	ck_assert_int_eq((vrange_mark_volatile)(R, 0, ps), 0);
	ck_assert_int_eq((vrange_mark_nonvolatile)(R, 0, ps), VRANGE_INTACT);
	purge_before_unmark(PURGE_IN_CHILD);
}
END_TEST

START_TEST(purge_right_after_the_unmark)
{
	if (!inline_here())
		return;
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	arm(PURGE_HERE, 1);
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 1);
	/* The purge ran after the swap and left the page alone. */
	ck_assert_int_eq(step, 0);
	ck_assert_int_eq(purged_by_hook, 0);
	ck_assert(page_is(PAGE, 0x5a));
	ck_assert_int_eq(vrange_is_volatile(R, PAGE * ps, ps), 0);
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST

START_TEST(lock_free_off_before_the_mark)
{
	if (!inline_here())
		return;
	arm(BIG_MARK_ELSEWHERE, 0);
	/* Swapped after the holder raised fast_off: the call must redo it. */
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 0);
	ck_assert_int_eq(step, 0);
	ck_assert_int_eq(vrange_mark_volatile(R, PAGE * ps, ps), 0);
	ck_assert_uint_eq(volatile_pages(), BIG_PAGES + 1);
	/* Nothing goes lock-free while the range is there. */
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, BIG_AT * ps, BIG_PAGES * ps),
			 VRANGE_INTACT);
	ck_assert_uint_eq(volatile_pages(), 0);
	/* No range left: lock-free again. */
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 1);
}
END_TEST

START_TEST(range_over_the_page_before_the_mark)
{
	if (!inline_here())
		return;
	arm(BIG_MARK_OVER, 0);
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 0);
	ck_assert_int_eq(vrange_mark_volatile(R, PAGE * ps, ps), 0);
	/* The page in the range and in its word would count twice. */
	ck_assert_uint_eq(volatile_pages(), BIG_PAGES);
	ck_assert_int_gt(vrange_purge(SIZE_MAX), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, (PAGE - 4) * ps, BIG_PAGES * ps),
			 VRANGE_PURGED);
	ck_assert(page_is(PAGE, 0));
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST

START_TEST(lock_free_off_right_after_the_unmark)
{
	if (!inline_here())
		return;
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	arm(BIG_MARK_ELSEWHERE, 1);
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 0);
	/* The call answers from word and range: never purged. */
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_INTACT);
	ck_assert_uint_eq(volatile_pages(), BIG_PAGES);
	ck_assert_int_gt(vrange_purge(SIZE_MAX), 0);
	ck_assert(page_is(PAGE, 0x5a));
}
END_TEST

START_TEST(unmark_before_a_remark)
{
	if (!inline_here())
		return;
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	arm(UNMARK_IT, 0);
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	ck_assert_int_eq(step, 0);
	ck_assert_int_eq(vrange_is_volatile(R, PAGE * ps, ps), 1);
	ck_assert_uint_eq(volatile_pages(), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_INTACT);
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST

START_TEST(purge_before_a_remark)
{
	if (!inline_here())
		return;
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 1);
	arm(PURGE_HERE, 0);
	/* A purged page stays purged: the re-mark leaves it to the call. */
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 0);
	ck_assert_int_eq(step, 0);
	ck_assert_int_gt(purged_by_hook, 0);
	ck_assert_int_eq(vrange_mark_volatile(R, PAGE * ps, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_PURGED);
	ck_assert(page_is(PAGE, 0));
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST

START_TEST(vrange_inline_through_the_last_hit)
{
	vrange_region *other;
	void *page;
	size_t off = 0;
	int purged = -1;

	if (!inline_here())
		return;
	page = base + PAGE * ps;
	/* The first call finds the region (the call), the next one inline. */
	ck_assert_int_eq((vrange)(page, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_ptr_eq(__vrange_hit(page, ps, &off), head());
	ck_assert_uint_eq(off, PAGE * ps);
	ck_assert_int_eq(vrange(page, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);
	ck_assert_int_eq(vrange(page, ps, VRANGE_VOLATILE, NULL), 0);
	arm(PURGE_HERE, 0);
	purged = -1;
	ck_assert_int_eq(vrange(page, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(step, 0);
	ck_assert_int_eq(purged, 1);
	ck_assert(page_is(PAGE, 0));
	/* A region made since: the hit is stale, vrange() calls. */
	ck_assert_int_eq(vrange_region_create("other", ps, VRANGE_ACCESS_ZERO, &other), 0);
	ck_assert_ptr_null(__vrange_hit(page, ps, &off));
	ck_assert_int_eq(vrange(page, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_ptr_eq(__vrange_hit(page, ps, &off), head());
	ck_assert_int_eq(vrange(page, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);
	vrange_region_destroy(other);
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST

/* A mark at a cost of its own, inline: the word takes that cost, and the
 * unmark, which first expects the region's, finds it and says INTACT. */
START_TEST(costed_mark_inline)
{
	if (!inline_here())
		return;
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 1000), 1);
	ck_assert_int_eq(vrange_mark_volatile_cost(R, (PAGE + 1) * ps, ps, 7), 0);
	ck_assert_int_eq(vrange_mark_volatile_cost(R, (PAGE + 2) * ps, ps, 0), -EINVAL);
	ck_assert_uint_eq(volatile_pages(), 2);
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 1);
	/* Dearer than a word holds: the call (a tree range). */
	ck_assert_int_eq(__vrange_try_mark(head(), (PAGE + 2) * ps, ps, 70000), 0);
	ck_assert_int_eq(vrange_mark_volatile_cost(R, (PAGE + 2) * ps, ps, 70000), 0);
	ck_assert_uint_eq(volatile_pages(), 2);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, (PAGE + 1) * ps, 2 * ps), VRANGE_INTACT);
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST

/*
 * Two threads, each marking and unmarking its own page of a SIGBUS-mode
 * region (neighbours: their words share a line pair's block), inline,
 * while this thread purges the region again and again.  An unmark's
 * INTACT means the page kept every byte; PURGED, that it reads zeros
 * (and is written again).  The pages are never touched while volatile.
 * At the end nothing is volatile: the threads' stripe counts are exact.
 */
static _Atomic int neighbours_done;

struct neighbour {
	vrange_region *r;
	char *page;
	unsigned char byte;
	unsigned long rounds, intact, purged, bad;
};

static void *neighbour_main(void *arg)
{
	struct neighbour *n = arg;

	for (unsigned long i = 0; i < n->rounds; i++) {
		size_t off = (size_t)(n->page - (char *)vrange_region_base(n->r));
		int r;

		if (vrange_mark_volatile(n->r, off, ps) != 0) {
			n->bad++;
			continue;
		}
		/* Volatile a while, so that purges land between the two. */
		for (volatile int k = 0; k < 200; k++)
			;
		r = vrange_mark_nonvolatile(n->r, off, ps);
		if (r == VRANGE_INTACT) {
			n->intact++;
			for (size_t b = 0; b < ps; b++)
				n->bad += n->page[b] != (char)n->byte;
		} else if (r == VRANGE_PURGED) {
			n->purged++;
			for (size_t b = 0; b < ps; b++)
				n->bad += n->page[b] != 0;
			memset(n->page, n->byte, ps);
		} else {
			n->bad++;
		}
	}
	neighbours_done++;
	return NULL;
}

START_TEST(neighbour_threads_against_purges)
{
	unsigned long rounds = getenv("VRANGE_TEST_QUICK") ? 2000 : 50000;
	struct neighbour nb[2];
	pthread_t t[2];
	vrange_region *r;
	char *p;
	int rc;

	if (!inline_here())
		return;
	rc = vrange_region_create("neighbours", 2 * ps, VRANGE_ACCESS_SIGBUS, &r);
	if (rc == -EOPNOTSUPP)
		rc = vrange_region_create("neighbours", 2 * ps, VRANGE_ACCESS_ZERO, &r);
	ck_assert_int_eq(rc, 0);
	p = vrange_region_base(r);
	neighbours_done = 0;
	for (int i = 0; i < 2; i++) {
		nb[i] = (struct neighbour){ r, p + (size_t)i * ps, (unsigned char)(0x31 + i),
					    rounds, 0, 0, 0 };
		memset(nb[i].page, nb[i].byte, ps);
		ck_assert_int_eq(pthread_create(&t[i], NULL, neighbour_main, &nb[i]), 0);
	}
	/* Purge until both threads are through. */
	while (neighbours_done < 2)
		vrange_region_purge(r);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	for (int i = 0; i < 2; i++) {
		fprintf(stderr, "neighbour %d: %lu pairs, %lu intact, %lu purged\n", i,
			nb[i].rounds, nb[i].intact, nb[i].purged);
		ck_assert_uint_eq(nb[i].bad, 0);
		ck_assert_uint_eq(nb[i].intact + nb[i].purged, rounds);
		ck_assert_int_eq(vrange_is_volatile(r, (size_t)i * ps, ps), 0);
	}
	ck_assert_uint_eq(volatile_pages(), 0);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(head_of_another_layout)
{
	if (!inline_here())
		return;
	head()->abi = 0; /* what a library with another layout leaves there */
	ck_assert_int_eq(__vrange_try_mark(head(), PAGE * ps, ps, 0), 0);
	ck_assert_int_eq(vrange_mark_volatile(R, PAGE * ps, ps), 0);
	ck_assert_int_eq(vrange_is_volatile(R, PAGE * ps, ps), 1);
	ck_assert_int_eq(__vrange_try_unmark(head(), PAGE * ps, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_INTACT);
	head()->abi = VRANGE_INLINE_ABI;
	ck_assert_uint_eq(volatile_pages(), 0);
}
END_TEST
#endif

#ifdef VRANGE_INLINE
/* ---- The plain mark, inline ---------------------------------------------- */

static struct vrange_inline_words *words_hdr(void)
{
	return __atomic_load_n(&head()->pw->hdr, __ATOMIC_ACQUIRE);
}

/* This thread's stripe's busy count. */
static int64_t my_busy(void)
{
	const struct vrange_inline_lib *lib = &head()->lib;
	uint32_t k = *(uint32_t *)(void *)(__vrange_tp() + lib->tls_stripe);

	return __atomic_load_n(&words_hdr()->stripe[k & 3].busy, __ATOMIC_ACQUIRE);
}

static bool plain_inline_here(void)
{
	struct vrange_stats st;

	if (!inline_here())
		return false;
	ck_assert_int_eq(vrange_get_stats(&st), 0);
	if (!head()->lib.plain) {
		fprintf(stderr, "SKIP: no plain marks here (%s)\n", st.plain_marks_off);
		return false;
	}
	ck_assert_str_eq(st.plain_marks_off, "");
	ck_assert_uint_eq(words_hdr()->plain, 1);
	return true;
}

static _Atomic ssize_t purge_result = -1;
static pthread_t purger;

static void *purge_region(void *arg)
{
	(void)arg;
	atomic_store(&purge_result, vrange_region_purge(R));
	return NULL;
}

static void *mark_page_by_call(void *arg)
{
	(void)arg;
	ck_assert_int_eq((vrange_mark_volatile)(R, PAGE * ps, ps), 0);
	return NULL;
}

static int64_t busy_in_window = -1;

/* Inside the plain mark (it found the word in no state): another thread
 * marks the page, a third purges the region - which must wait. */
static void plain_window(int where)
{
	pthread_t marker;

	if (where != 0 || !step)
		return;
	step = 0;
	busy_in_window = my_busy();
	ck_assert_int_eq(pthread_create(&marker, NULL, mark_page_by_call, NULL), 0);
	ck_assert_int_eq(pthread_join(marker, NULL), 0);
	ck_assert_int_eq(pthread_create(&purger, NULL, purge_region, NULL), 0);
	usleep(5000);
	ck_assert_int_eq(atomic_load(&purge_result), -1);
}

START_TEST(purge_waits_for_the_inline_plain_mark)
{
	if (!plain_inline_here())
		return;
	hook_fn = plain_window;
	step = 1;
	ck_assert_int_eq(vrange_mark_volatile(R, PAGE * ps, ps), 0);
	hook_fn = NULL;
	ck_assert_int_eq(busy_in_window, 1);
	ck_assert_int_eq(my_busy(), 0);
	ck_assert_int_eq(pthread_join(purger, NULL), 0);
	ck_assert_int_eq(atomic_load(&purge_result), (ssize_t)ps);
	/* The mark's store did not land on "purged". */
	ck_assert_int_eq(vrange_mark_nonvolatile(R, PAGE * ps, ps), VRANGE_PURGED);
	ck_assert(page_is(PAGE, 0));
	/* Plain marks are back on once the purge let go of the lock. */
	ck_assert_uint_eq(words_hdr()->plain, 1);
}
END_TEST
#endif

START_TEST(inline_or_skip)
{
	/* Says, in the log, whether the cases above could run here. */
	(void)inline_here();
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("page-words-race-inline");
	TCase *tc = tcase_create("inline");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, inline_or_skip);
#ifdef VRANGE_INLINE
	tcase_add_test(tc, purge_records_before_the_unmark);
	tcase_add_test(tc, purge_in_another_process_before_the_unmark);
	tcase_add_test(tc, purge_in_another_process_on_shared_state);
	tcase_add_test(tc, purge_right_after_the_unmark);
	tcase_add_test(tc, lock_free_off_before_the_mark);
	tcase_add_test(tc, range_over_the_page_before_the_mark);
	tcase_add_test(tc, lock_free_off_right_after_the_unmark);
	tcase_add_test(tc, unmark_before_a_remark);
	tcase_add_test(tc, purge_before_a_remark);
	tcase_add_test(tc, vrange_inline_through_the_last_hit);
	tcase_add_test(tc, costed_mark_inline);
	tcase_add_test(tc, head_of_another_layout);
	tcase_add_test(tc, neighbour_threads_against_purges);
	tcase_add_test(tc, purge_waits_for_the_inline_plain_mark);
#endif
	suite_add_tcase(s, tc);
	return s;
}
