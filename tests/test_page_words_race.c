/* SPDX-License-Identifier: MIT */
/*
 * test_page_words_race.c - the lock-free page-word calls against a holder
 * whose steps land exactly between their two looks at fast_off
 * (page_words.h).  Built with its own copy of page_words.c and
 * -DPW_TEST_HOOKS: the hook runs the "other thread" at a chosen point.
 *
 *  - a holder that raises fast_off and reads the word (absorb into a
 *    range, the copy of a move) before the swap: the call must say
 *    "redo under the lock", the word it read being stale;
 *  - the same raised just after the swap: also a redo;
 *  - a purge recording the page before an unmark's swap: the unmark
 *    fails over to the lock (which reports PURGED), the word stays purged;
 *  - an unmark by another thread before a mark's swap: the mark retries
 *    on the fresh word and the count stays exact;
 *  - words spread over line pairs (pw_slot): the lock-free calls and the
 *    holder's find every page's word in one place, a purge of a neighbour
 *    forced before an unmark's swap leaves that unmark INTACT and the
 *    neighbour purged, and neighbouring pages never share a line pair;
 *  - the swap of the tag alone (word_cas): a re-mark's age lands with the
 *    same tag, and a purge forced before a re-mark's swap leaves the word
 *    purged (the age the mark stored on it read by nobody, the counts
 *    exact);
 *  - stripes a thread owns (plain adds): a thread claims one of stripes
 *    1..3 and counts there; a fourth thread counts in the shared stripe 0;
 *    five threads marking and unmarking their own pages at once lose no
 *    count (two owners of one stripe would); a thread that exits hands its
 *    claim to the next thread; pw_release_stripes gives them back; a fork
 *    child claims a stripe of its own.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "page_words.h"
#include "range_tree.h"
#include "test_main.h"

enum { NP = 64, PAGE = 9 };

static struct pw P;
static void *area;
static int step; /* what the hook does next; 0: nothing */

static void setup(void);

/* The swap alone (plain marks off), or plain marks where the word is in
 * no state: every case runs both ways. */
static void setup_swap(void)
{
	plain_fence_init(false);
	setup();
}

static void setup_plain(void)
{
	plain_fence_init(true);
	setup();
}

static void setup(void)
{
	size_t bytes = pw_area_bytes(NP);

	/* Shared: a fork child's counts land where the parent reads them. */
	area = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(area, MAP_FAILED);
	pw_format(&P, area, NP);
	pw_test_hook = NULL;
	step = 0;
}

static void teardown(void)
{
	pw_test_hook = NULL;
	munmap(area, pw_area_bytes(NP));
}

static bool lock_free_here(void)
{
	if (pw_fast_mark(P.h, NP, 0, 0, 1) == 1) {
		ck_assert_int_eq(pw_fast_clear(P.h, NP, 0), 1);
		return true;
	}
	fprintf(stderr, "SKIP: no 16-byte compare-and-swap here\n");
	return false;
}

static uint32_t state_of(uint64_t i)
{
	struct pw_run run;

	return pw_next_run(&P, i, i + 1, &run) == 1 ? run.state : 0;
}

enum { RAISE_AND_READ = 1, PURGE_IT, UNMARK_IT, PURGE_NEXT };

/* The other thread's steps, once, at the point `at` names. */
static int at;
static uint32_t seen;

static void other(int where)
{
	int what = step;
	uint64_t stop;
	struct pw_delta d = { 0 };

	if (where != at || !what)
		return;
	step = 0; /* once: the hook runs again when the caller retries */
	switch (what) {
	case RAISE_AND_READ:
		pw_fast_off(&P);
		seen = state_of(PAGE);
		break;
	case PURGE_IT:
		ck_assert_int_eq(pw_purge_exact(&P, PAGE, PAGE + 1, &stop, &d), 0);
		ck_assert_uint_eq(stop, PAGE + 1);
		break;
	case UNMARK_IT:
		ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 1);
		break;
	case PURGE_NEXT:
		ck_assert_int_eq(pw_purge_exact(&P, PAGE + 1, PAGE + 2, &stop, &d), 0);
		ck_assert_uint_eq(stop, PAGE + 2);
		break;
	}
}

static void arm(int what, int where)
{
	step = what;
	at = where;
	pw_test_hook = other;
}

START_TEST(holder_reads_before_the_swap)
{
	if (!lock_free_here())
		return;
	arm(RAISE_AND_READ, PW_BEFORE_SWAP);
	/* The holder saw no state there and would cover the page with a
	 * range: the mark that lands after it must be redone. */
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 0);
	ck_assert_uint_eq(seen, 0);
	ck_assert_uint_eq(state_of(PAGE), RT_VOLATILE);
	/* From now on nothing goes lock-free, until the holder lowers it. */
	pw_test_hook = NULL;
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 0);
	pw_fast_on(&P);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 1);
	ck_assert_uint_eq(pw_vol(&P), 0);
}
END_TEST

START_TEST(raised_right_after_the_swap)
{
	if (!lock_free_here())
		return;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	arm(RAISE_AND_READ, PW_AFTER_SWAP);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 0);
	arm(RAISE_AND_READ, PW_AFTER_SWAP);
	pw_fast_on(&P);
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 3), 0);
}
END_TEST

START_TEST(purge_records_before_the_unmark)
{
	if (!lock_free_here())
		return;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	arm(PURGE_IT, PW_BEFORE_SWAP);
	/* The purge's swap came first: the unmark must not say INTACT. */
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 0);
	ck_assert_uint_eq(state_of(PAGE), RT_PURGED);
	ck_assert_uint_eq(pw_vol(&P), 0);
	ck_assert_uint_eq(P.h->npurged, 1);
	/* And a mark leaves a purged page to the lock. */
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 3), 0);
	ck_assert_uint_eq(state_of(PAGE), RT_PURGED);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

START_TEST(unmark_before_a_mark_swap)
{
	if (!lock_free_here())
		return;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	arm(UNMARK_IT, PW_BEFORE_SWAP);
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 3), 1);
	ck_assert_uint_eq(state_of(PAGE), RT_VOLATILE);
	ck_assert_uint_eq(pw_vol(&P), 1);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

static uint64_t age_of(uint64_t i)
{
	struct pw_run run;

	ck_assert_int_eq(pw_next_run(&P, i, i + 1, &run), 1);
	ck_assert_uint_eq(run.state, RT_VOLATILE);
	return run.seq;
}

START_TEST(remark_takes_the_new_age)
{
	if (!lock_free_here())
		return;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	ck_assert_uint_eq(age_of(PAGE), 2);
	/* Same prio and cost: the tag does not change, the age must. */
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 7), 1);
	ck_assert_uint_eq(age_of(PAGE), 7);
	ck_assert_uint_eq(pw_vol(&P), 1);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

START_TEST(purge_before_a_remark_swap)
{
	if (!lock_free_here())
		return;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	arm(PURGE_IT, PW_BEFORE_SWAP);
	/* The mark stores its age, its swap fails (purged): the lock. */
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 5), 0);
	ck_assert_uint_eq(state_of(PAGE), RT_PURGED);
	ck_assert_uint_eq(pw_vol(&P), 0);
	ck_assert_uint_eq(P.h->npurged, 1);
	ck_assert_int_eq(pw_check(&P), 0);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 0);
}
END_TEST

/* Every page, lock-free and under the lock, is one word: a lock-free mark
 * shows on that page alone, a purge under the lock makes that page's
 * lock-free unmark go to the lock. */
START_TEST(one_place_per_page)
{
	struct pw_delta d = { 0 };
	uint64_t stop;

	if (!lock_free_here())
		return;
	for (uint64_t i = 0; i < NP; i++) {
		ck_assert_int_eq(pw_fast_mark(P.h, NP, i, 0, 10 + i), 1);
		for (uint64_t j = 0; j < NP; j++)
			ck_assert_uint_eq(state_of(j), j == i ? RT_VOLATILE : 0);
		ck_assert_int_eq(pw_purge_exact(&P, i, i + 1, &stop, &d), 0);
		ck_assert_uint_eq(stop, i + 1);
		ck_assert_int_eq(pw_fast_clear(P.h, NP, i), 0);
		ck_assert_int_eq(pw_clear(&P, i, i + 1, &d), 0);
		ck_assert_int_eq(pw_check(&P), 0);
	}
}
END_TEST

START_TEST(neighbour_purged_before_the_unmark)
{
	if (!lock_free_here())
		return;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE + 1, 0, 2), 1);
	arm(PURGE_NEXT, PW_BEFORE_SWAP);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 1);
	ck_assert_uint_eq(state_of(PAGE), 0);
	ck_assert_uint_eq(state_of(PAGE + 1), RT_PURGED);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE + 1), 0);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

/* Two threads on neighbouring pages write no line pair both write (the
 * words of a whole block of 64 pages; the area is 64-byte aligned, so
 * 128 bytes apart is a different pair however it is placed). */
START_TEST(neighbours_on_their_own_lines)
{
	for (uint64_t i = 0; i + 1 < NP; i++) {
		uintptr_t a = (uintptr_t)pw_at(&P, i), b = (uintptr_t)pw_at(&P, i + 1);
		uintptr_t gap = a > b ? a - b : b - a;

		ck_assert_uint_ge(gap, 128);
	}
}
END_TEST

/* The stripes (128 bytes apart, after the header's line pair). */
static int64_t stripe_vol(unsigned int k)
{
	const struct pw_stripe *st =
		(const struct pw_stripe *)((const char *)P.h + PW_STRIPES_AT);

	return __atomic_load_n(&st[k].vol, __ATOMIC_RELAXED);
}

/* The stripe page i's mark counted in: the one whose count moved. */
static int stripe_of_mark(uint64_t i)
{
	int64_t before[PW_STRIPES];
	int k = -1;

	for (unsigned int j = 0; j < PW_STRIPES; j++)
		before[j] = stripe_vol(j);
	ck_assert_int_eq(pw_fast_mark(P.h, NP, i, 0, 2), 1);
	for (unsigned int j = 0; j < PW_STRIPES; j++)
		if (stripe_vol(j) != before[j]) {
			ck_assert_int_eq(stripe_vol(j), before[j] + 1);
			ck_assert_int_eq(k, -1);
			k = (int)j;
		}
	ck_assert_int_ge(k, 0);
	return k;
}

struct marker {
	uint64_t page;
	int stripe;
	pthread_barrier_t *hold; /* NULL: exit at once */
};

/* One at a time: stripe_of_mark looks at every stripe around its mark. */
static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;

static void *mark_one(void *arg)
{
	struct marker *m = arg;

	pthread_mutex_lock(&one_at_a_time);
	m->stripe = stripe_of_mark(m->page);
	pthread_mutex_unlock(&one_at_a_time);
	if (m->hold) {
		pthread_barrier_wait(m->hold); /* all have marked */
		pthread_barrier_wait(m->hold); /* the test has looked */
	}
	return NULL;
}

static int owners(void)
{
	int n = 0;

	ck_assert_uint_eq(P.h->owner[0], 0);
	for (unsigned int k = 1; k < PW_STRIPES; k++)
		n += P.h->owner[k] != 0;
	return n;
}

START_TEST(threads_own_their_stripes)
{
	enum { T = PW_STRIPES };
	struct marker m[T];
	pthread_t th[T];
	pthread_barrier_t b;
	bool taken[PW_STRIPES] = { false };

	if (!lock_free_here())
		return;
	/* This thread: a stripe of its own, counted by plain adds. */
	ck_assert_int_ge(stripe_of_mark(1), 1);
	ck_assert_int_eq(owners(), 1);
	pw_release_stripes(P.h);
	ck_assert_int_eq(owners(), 0);
	/* Four threads alive at once: two more claim the other two stripes,
	 * the fourth finds none free and counts in the shared one. */
	ck_assert_int_eq(pthread_barrier_init(&b, NULL, T + 1), 0);
	for (int t = 0; t < T; t++) {
		m[t] = (struct marker){ .page = 10 + (uint64_t)t, .hold = &b };
		ck_assert_int_eq(pthread_create(&th[t], NULL, mark_one, &m[t]), 0);
	}
	pthread_barrier_wait(&b);
	for (int t = 0; t < T; t++) {
		ck_assert(!taken[m[t].stripe]);
		taken[m[t].stripe] = true;
	}
	ck_assert_int_eq(owners(), 3);
	pthread_barrier_wait(&b);
	for (int t = 0; t < T; t++)
		pthread_join(th[t], NULL);
	ck_assert_uint_eq(pw_vol(&P), 5);
	ck_assert_int_eq(pw_check(&P), 0);
	pthread_barrier_destroy(&b);
	/* Their claims stay with their slots: a thread started now reuses
	 * one (no stripe is left free, and it does not count in stripe 0). */
	m[0] = (struct marker){ .page = 20 };
	ck_assert_int_eq(pthread_create(&th[0], NULL, mark_one, &m[0]), 0);
	pthread_join(th[0], NULL);
	ck_assert_int_ge(m[0].stripe, 1);
	ck_assert_int_eq(owners(), 3);
	pw_release_stripes(P.h);
	ck_assert_int_eq(owners(), 0);
	ck_assert_uint_eq(pw_vol(&P), 6);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

enum { HAMMER_THREADS = 5, HAMMER_PAIRS = 200000 };

static void *hammer(void *arg)
{
	uint64_t i = (uintptr_t)arg;
	int pairs = test_quick() ? HAMMER_PAIRS / 10 : HAMMER_PAIRS;

	for (int n = 0; n < pairs; n++) {
		ck_assert_int_eq(pw_fast_mark(P.h, NP, i, 0, 2 + (uint64_t)n), 1);
		ck_assert_int_eq(pw_fast_clear(P.h, NP, i), 1);
	}
	ck_assert_int_eq(pw_fast_mark(P.h, NP, i, 0, 1), 1);
	return NULL;
}

/* Plain adds by two threads on one stripe would lose counts: five threads
 * (three owners, two on the shared stripe) end with the count exact. */
START_TEST(no_count_lost)
{
	pthread_t th[HAMMER_THREADS];

	if (!lock_free_here())
		return;
	for (uintptr_t t = 0; t < HAMMER_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, hammer,
						(void *)(t * 9 + 1)), 0);
	for (int t = 0; t < HAMMER_THREADS; t++)
		pthread_join(th[t], NULL);
	ck_assert_uint_eq(pw_vol(&P), HAMMER_THREADS);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

/* A fork child's thread carries the parent's token: it must claim a stripe
 * of its own, not count in the parent's by plain adds. */
START_TEST(fork_child_claims_its_own)
{
	int mine, status;
	pid_t pid;

	if (!lock_free_here())
		return;
	mine = stripe_of_mark(3);
	ck_assert_int_ge(mine, 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int k = stripe_of_mark(4);

		_exit(k >= 1 && k != mine ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(owners(), 2);
	ck_assert_int_eq(stripe_of_mark(5), mine);
	ck_assert_uint_eq(pw_vol(&P), 3);
	ck_assert_int_eq(pw_check(&P), 0);
	pw_release_stripes(P.h); /* ours only: the child's stays */
	ck_assert_int_eq(owners(), 1);
}
END_TEST

/* ---- The plain mark ------------------------------------------------------ */

static int64_t stripe_busy(unsigned int k)
{
	return __atomic_load_n(&pw_stripes_of(P.h)[k].busy, __ATOMIC_ACQUIRE);
}

static bool plain_here(void)
{
	if (!lock_free_here())
		return false;
	if (!plain_marks_on()) {
		fprintf(stderr, "SKIP: no plain marks here (%s)\n", plain_marks_off_why());
		return false;
	}
	P.h->plain = 1;
	return true;
}

/* What the hook saw of the marking thread's own stripe. */
static int64_t busy_seen;

static void see_busy(int where)
{
	if (where == PW_BEFORE_SWAP)
		busy_seen = stripe_busy(pw_my_stripe);
}

/* A mark of a word in no state is plain (inside its stripe's busy count),
 * a re-mark and a mark with plain marks stopped are swaps. */
START_TEST(plain_mark_inside_busy)
{
	if (!plain_here())
		return;
	pw_test_hook = see_busy;
	busy_seen = -1;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	ck_assert_int_eq(busy_seen, 1);
	ck_assert_int_eq(stripe_busy(pw_my_stripe), 0);
	ck_assert_uint_eq(age_of(PAGE), 2);
	busy_seen = -1;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 3), 1);
	ck_assert_int_eq(busy_seen, 0);
	ck_assert_uint_eq(age_of(PAGE), 3);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 1);
	ck_assert_int_eq(pw_plain_stop(&P), 0);
	ck_assert_uint_eq(P.h->plain, 0);
	busy_seen = -1;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 4), 1);
	ck_assert_int_eq(busy_seen, 0);
	pw_plain_resume(&P);
	ck_assert_uint_eq(P.h->plain, 1);
	ck_assert_uint_eq(pw_vol(&P), 1);
	ck_assert_int_eq(pw_check(&P), 0);
}
END_TEST

/* Inside a plain mark of PAGE (which loaded the word as "no state"),
 * another thread marks PAGE, and a third purges it. */
static _Atomic int purge_ret = 1;
static _Atomic uint64_t purge_stop;

static void *mark_page(void *arg)
{
	(void)arg;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 5), 1);
	return NULL;
}

static void *purge_page(void *arg)
{
	struct pw_delta d = { 0 };
	uint64_t stop = 0;

	(void)arg;
	atomic_store(&purge_ret, pw_purge_exact(&P, PAGE, PAGE + 1, &stop, &d));
	atomic_store(&purge_stop, stop);
	return NULL;
}

static pthread_t purger;
static bool join_purger; /* the hook waits for the purge (it gives up) */

static void cross_the_window(int where)
{
	pthread_t marker;

	if (where != PW_BEFORE_SWAP || !step)
		return;
	step = 0;
	ck_assert_int_eq(pthread_create(&marker, NULL, mark_page, NULL), 0);
	ck_assert_int_eq(pthread_join(marker, NULL), 0);
	ck_assert_uint_eq(state_of(PAGE), RT_VOLATILE);
	ck_assert_int_eq(pthread_create(&purger, NULL, purge_page, NULL), 0);
	if (join_purger) {
		ck_assert_int_eq(pthread_join(purger, NULL), 0);
		return;
	}
	/* The purge must wait for this mark: still under way a while later
	 * (well within its PLAIN_WAIT_NS). */
	usleep(5000);
	ck_assert_int_eq(atomic_load(&purge_ret), 1);
}

/* The purge waits until the plain mark is done, then takes the page: the
 * mark's store never lands on "purged" (which an unmark would then call
 * volatile and INTACT). */
START_TEST(purge_waits_for_a_plain_mark)
{
	if (!plain_here())
		return;
	step = 1;
	pw_test_hook = cross_the_window;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	ck_assert_int_eq(pthread_join(purger, NULL), 0);
	ck_assert_int_eq(atomic_load(&purge_ret), 0);
	ck_assert_uint_eq(atomic_load(&purge_stop), PAGE + 1);
	ck_assert_uint_eq(state_of(PAGE), RT_PURGED);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 0);
	ck_assert_uint_eq(P.h->npurged, 1);
}
END_TEST

/* A plain mark that stays under way (its thread kept off the processor)
 * makes the purge give up after its wait: -EAGAIN, nothing purged. */
START_TEST(purge_gives_up_on_a_mark_under_way)
{
	if (!plain_here())
		return;
	step = 1;
	join_purger = true;
	pw_test_hook = cross_the_window;
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 2), 1);
	ck_assert_int_eq(atomic_load(&purge_ret), -EAGAIN);
	ck_assert_uint_eq(atomic_load(&purge_stop), PAGE);
	ck_assert_uint_eq(state_of(PAGE), RT_VOLATILE);
	ck_assert_int_eq(pw_fast_clear(P.h, NP, PAGE), 1);
	ck_assert_uint_eq(P.h->npurged, 0);
}
END_TEST

static void die_in_the_window(int where)
{
	if (where == PW_BEFORE_SWAP)
		raise(SIGKILL);
}

/* A process killed inside a plain mark leaves its stripe busy for good:
 * a purge that finds the owner gone - reaped, or a zombie its parent has
 * not reaped yet - goes on. */
static void killed_inside_a_plain_mark(bool reap_first)
{
	struct pw_delta d = { 0 };
	siginfo_t si;
	uint64_t stop;
	int status;
	pid_t pid;

	if (!plain_here())
		return;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		pw_test_hook = die_in_the_window;
		pw_fast_mark(P.h, NP, PAGE, 0, 2);
		_exit(1);
	}
	/* Dead, and (WNOWAIT) still a zombie. */
	ck_assert_int_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	ck_assert_int_eq(si.si_code, CLD_KILLED);
	if (reap_first)
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(owners(), 2); /* ours, and the dead child's */
	ck_assert_int_eq(stripe_busy(1) + stripe_busy(2) + stripe_busy(3), 1);
	ck_assert_int_eq(pw_fast_mark(P.h, NP, PAGE, 0, 3), 1);
	ck_assert_int_eq(pw_purge_exact(&P, PAGE, PAGE + 1, &stop, &d), 0);
	ck_assert_uint_eq(stop, PAGE + 1);
	ck_assert_int_eq(stripe_busy(1) + stripe_busy(2) + stripe_busy(3), 0);
	ck_assert_uint_eq(state_of(PAGE), RT_PURGED);
	if (!reap_first)
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
}

START_TEST(dead_owner_does_not_hold_purges)
{
	killed_inside_a_plain_mark(true);
}
END_TEST

START_TEST(zombie_owner_does_not_hold_purges)
{
	killed_inside_a_plain_mark(false);
}
END_TEST

static void add_cases(TCase *tc)
{
	tcase_add_test(tc, holder_reads_before_the_swap);
	tcase_add_test(tc, raised_right_after_the_swap);
	tcase_add_test(tc, purge_records_before_the_unmark);
	tcase_add_test(tc, unmark_before_a_mark_swap);
	tcase_add_test(tc, one_place_per_page);
	tcase_add_test(tc, neighbour_purged_before_the_unmark);
	tcase_add_test(tc, neighbours_on_their_own_lines);
	tcase_add_test(tc, remark_takes_the_new_age);
	tcase_add_test(tc, purge_before_a_remark_swap);
	tcase_add_test(tc, threads_own_their_stripes);
	tcase_add_test(tc, no_count_lost);
	tcase_add_test(tc, fork_child_claims_its_own);
}

Suite *test_suite(void)
{
	Suite *s = suite_create("page-words-race");
	TCase *tc = tcase_create("race");
	TCase *tp = tcase_create("plain");

	tcase_add_checked_fixture(tc, setup_swap, teardown);
	add_cases(tc);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(tp, setup_plain, teardown);
	add_cases(tp);
	tcase_add_test(tp, plain_mark_inside_busy);
	tcase_add_test(tp, purge_waits_for_a_plain_mark);
	tcase_add_test(tp, purge_gives_up_on_a_mark_under_way);
	tcase_add_test(tp, dead_owner_does_not_hold_purges);
	tcase_add_test(tp, zombie_owner_does_not_hold_purges);
	suite_add_tcase(s, tp);
	return s;
}

