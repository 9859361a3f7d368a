/* SPDX-License-Identifier: MIT */
/*
 * test_mark_clock.c - the mark clock's tick (docs/design.md, "The mark
 * clock"): while the monitor's thread runs it keeps the coarse time for
 * marks, which then read no clock; it ticks only while marks come, and
 * the purge order across threads still follows the time of the marks.
 *
 * The tick's state is read where the header's inline mark reads it
 * (vrange_inline_lib()->clock_line).  Every case runs in its own forked
 * process and starts the monitor itself (the tests' environment has it
 * off: VRANGE_MONITOR=0).
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

/* Each case starts with no monitor, whatever the environment says (it is
 * read at the library's first call, in the case's own process). */
static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	setenv("VRANGE_MONITOR", "0", 1);
}

static uint32_t tick_state(void)
{
	return __atomic_load_n(&vrange_inline_lib()->clock_line->state, __ATOMIC_RELAXED);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The monitor's thread ticks; without one (a non-x86 build) skip. */
static int start_ticker(void)
{
	if (!vrange_inline_lib()->clock_line)
		return 0;
	ck_assert_int_eq(tick_state(), VRANGE_INLINE_TICK_SELF);
	ck_assert_int_eq(vrange_monitor_start(NULL), 0);
	return 1;
}

/* Wait up to 5 s for the tick's state to be want. */
static int wait_state(uint32_t want)
{
	for (double end = now_s() + 5; now_s() < end; sleep_ms(2))
		if (tick_state() == want)
			return 1;
	return 0;
}

/* A ZERO-mode region of npages written pages. */
static vrange_region *make_region(size_t npages)
{
	vrange_region *r = NULL;

	ck_assert_int_eq(vrange_region_create("test-clock", npages * ps,
					      VRANGE_ACCESS_ZERO, &r), 0);
	memset(vrange_region_base(r), 0x5a, npages * ps);
	return r;
}

/* Pairs on page pg of r for ms milliseconds; the highest tick state seen
 * between them (sampled, not after the last: a thread kept off the CPU
 * there may find the ticker asleep again, rightly). */
static uint32_t pairs_on(vrange_region *r, size_t pg, long ms)
{
	uint32_t seen = 0;

	for (double end = now_s() + (double)ms / 1000; now_s() < end;) {
		for (int i = 0; i < 1000; i++) {
			ck_assert_int_eq(vrange_mark_volatile(r, pg * ps, ps), 0);
			ck_assert_int_eq(vrange_mark_nonvolatile(r, pg * ps, ps),
					 VRANGE_INTACT);
		}
		if (tick_state() > seen)
			seen = tick_state();
	}
	return seen;
}

static uint32_t pairs_for(vrange_region *r, long ms)
{
	return pairs_on(r, 0, ms);
}

/*
 * Without a monitor every mark reads the clock (SELF); with one, a mark
 * wakes the ticker (IDLE to MARKED), the ticker refreshes the time while
 * marks come (MARKED/ARMED), sleeps once they stop (IDLE), and a stopped
 * monitor leaves SELF again.
 */
START_TEST(tick_follows_marks)
{
	vrange_region *r = make_region(1);
	uint64_t before;

	if (!vrange_inline_lib()->clock_line)
		TEST_SKIP("no inline fast path on this architecture");
	pairs_for(r, 10);
	ck_assert_int_eq(tick_state(), VRANGE_INLINE_TICK_SELF);
	ck_assert(start_ticker());
	ck_assert_msg(wait_state(VRANGE_INLINE_TICK_IDLE), "state %u", tick_state());
	before = vrange_inline_lib()->clock_line->now;
	ck_assert_uint_ge(pairs_for(r, 100), VRANGE_INLINE_TICK_MARKED);
	/* The ticker refreshed the time during the 100 ms of marks. */
	ck_assert_uint_gt(vrange_inline_lib()->clock_line->now, before);
	ck_assert_msg(wait_state(VRANGE_INLINE_TICK_IDLE), "state %u", tick_state());
	ck_assert_int_eq(vrange_monitor_stop(), 0);
	ck_assert_int_eq(tick_state(), VRANGE_INLINE_TICK_SELF);
	pairs_for(r, 10);
	ck_assert_int_eq(tick_state(), VRANGE_INLINE_TICK_SELF);
	vrange_region_destroy(r);
}
END_TEST

/* Context switches of every thread of this process but the calling one
 * (the library's: the monitor, and any fault thread). */
static unsigned long other_threads_switches(void)
{
	long me = syscall(SYS_gettid);
	unsigned long sum = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		char path[64], line[128];
		FILE *f;

		if (e->d_name[0] == '.' || atol(e->d_name) == me)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/status", atol(e->d_name));
		f = fopen(path, "r");
		if (!f)
			continue; /* gone meanwhile */
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "voluntary_ctxt_switches:", 24))
				sum += strtoul(line + 24, NULL, 10);
		fclose(f);
	}
	closedir(d);
	return sum;
}

/*
 * The ticker wakes while marks come and not once they stopped: over a
 * second with nothing volatile, the library's threads wake no more often
 * than before the first mark (the monitor's other timers, whatever they
 * are here, count in both); over a second of marks, far more often.
 */
START_TEST(ticker_sleeps_when_idle)
{
	vrange_region *r = make_region(1);
	unsigned long s0, base, busy, idle;

	if (!start_ticker())
		TEST_SKIP("no inline fast path on this architecture");
	ck_assert(wait_state(VRANGE_INLINE_TICK_IDLE));
	sleep_ms(200);
	s0 = other_threads_switches();
	sleep_ms(1000);
	base = other_threads_switches() - s0;
	s0 = other_threads_switches();
	pairs_for(r, 1000);
	busy = other_threads_switches() - s0;
	ck_assert_msg(wait_state(VRANGE_INLINE_TICK_IDLE), "state %u", tick_state());
	sleep_ms(200);
	s0 = other_threads_switches();
	sleep_ms(1000);
	idle = other_threads_switches() - s0;
	fprintf(stderr, "wake-ups per second: before %lu, marking %lu, after %lu\n",
		base, busy, idle);
	ck_assert_msg(busy >= base + 20, "marking: %lu wake-ups, idle %lu", busy, base);
	ck_assert_msg(idle <= base + 10, "after the marks: %lu wake-ups, before %lu",
		      idle, base);
	vrange_region_destroy(r);
}
END_TEST

struct marker {
	vrange_region *r;
	size_t page;
};

static void *mark_page(void *arg)
{
	struct marker *m = arg;

	return (void *)(intptr_t)vrange_mark_volatile(m->r, m->page * ps, ps);
}

static void mark_in_thread(vrange_region *r, size_t page)
{
	struct marker m = { r, page };
	pthread_t t;
	void *ret;

	ck_assert_int_eq(pthread_create(&t, NULL, mark_page, &m), 0);
	ck_assert_int_eq(pthread_join(t, &ret), 0);
	ck_assert_int_eq((intptr_t)ret, 0);
}

/*
 * Least recently marked first, across threads, while the ticker runs:
 * page 2 by this thread; then, after 300 ms of pairs on page 3 (the
 * ticker ticks all along; the gap is wide so that a ticker kept off the
 * CPU for a while on a loaded machine still ticks in it), page 1 by
 * another thread (its first mark: its age is the tick's time alone);
 * after 300 ms more, page 0 by this thread.
 * Purged one page at a time they go 2, 1, 0.  A tick's time left behind
 * would give page 1 an age before page 2's, and it would go first.
 */
START_TEST(order_across_threads_with_tick)
{
	vrange_region *r = make_region(4);

	if (!start_ticker())
		TEST_SKIP("no inline fast path on this architecture");
	pairs_on(r, 3, 20);
	ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, ps), 0);
	ck_assert_uint_ge(pairs_on(r, 3, 300), VRANGE_INLINE_TICK_MARKED);
	mark_in_thread(r, 1);
	pairs_on(r, 3, 300);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_eq(vrange_monitor_stop(), 0); /* no purge of its own */
	for (int k = 2; k >= 0; k--) {
		ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
		ck_assert_msg(vrange_is_volatile(r, (size_t)k * ps, ps) == 1 &&
			      vrange_mark_nonvolatile(r, (size_t)k * ps, ps) == VRANGE_PURGED,
			      "page %d was not purged next", k);
		for (int j = 0; j < k; j++)
			ck_assert_int_eq(vrange_is_volatile(r, (size_t)j * ps, ps), 1);
	}
	vrange_region_destroy(r);
}
END_TEST

/* A fork child has its own ticker or none, never the parent's state. */
START_TEST(fork_child_starts_its_own)
{
	vrange_region *r = make_region(1);
	int status;
	pid_t pid;

	if (!start_ticker())
		TEST_SKIP("no inline fast path on this architecture");
	ck_assert_uint_ge(pairs_for(r, 20), VRANGE_INLINE_TICK_MARKED);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		uint32_t st = tick_state();

		/* Its monitor started again at the fork: asleep, or none. */
		if (st == VRANGE_INLINE_TICK_SELF)
			_exit(0);
		if (st != VRANGE_INLINE_TICK_IDLE)
			_exit(1);
		_exit(pairs_for(r, 20) >= VRANGE_INLINE_TICK_MARKED ? 0 : 2);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %d", status);
	vrange_region_destroy(r);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("mark-clock");
	TCase *tc = tcase_create("tick");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, tick_follows_marks);
	tcase_add_test(tc, ticker_sleeps_when_idle);
	tcase_add_test(tc, order_across_threads_with_tick);
	tcase_add_test(tc, fork_child_starts_its_own);
	suite_add_tcase(s, tc);
	return s;
}
