/* SPDX-License-Identifier: MIT */
/*
 * test_fd_hint.c - the file layer's per-thread hint (src/state/fd_hint.h):
 * a thread's last file used with neither the registry's lock nor a
 * reference, and the forget that must wait for such a use.  Linked with
 * the internal library: the hook fd_hint_test_pinned holds a call exactly
 * while its file is pinned.  Real memfds, real threads; under the
 * sanitizers and valgrind a forget that did not wait is a use after free.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#include "fd_hint.h"
#include "test_main.h"

static long ps;

static int page_file(void)
{
	int fd = memfd_create("fd-hint", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, ps), 0);
	return fd;
}

/* Calls that ran pinned, and a hold on the next one when asked. */
static _Atomic long pinned_calls;
static _Atomic bool hold_next;
static sem_t held, release;

static void on_pinned(void)
{
	atomic_fetch_add(&pinned_calls, 1);
	if (atomic_exchange(&hold_next, false)) {
		sem_post(&held);
		while (sem_wait(&release) < 0 && errno == EINTR)
			;
	}
}

/* A pair on fd: 0 or the first failure. */
static int pair(int fd)
{
	int r = vrange_fd_mark_volatile(fd, 0, ps);

	if (r < 0)
		return r;
	r = vrange_fd_mark_nonvolatile(fd, 0, ps);
	return r < 0 ? r : 0;
}

START_TEST(later_calls_take_the_hint)
{
	int fd = page_file();
	long before;

	fd_hint_test_pinned = on_pinned;
	/* the first finds the file through the registry; the next are the
	 * thread's hint */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, ps), 0);
	before = atomic_load(&pinned_calls);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, ps), 0);
	ck_assert_int_eq(atomic_load(&pinned_calls), before + 2);
	/* a forget ends it: the next call takes the registry again */
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	before = atomic_load(&pinned_calls);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, ps), 0);
	ck_assert_int_eq(atomic_load(&pinned_calls), before);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, ps), VRANGE_INTACT);
	ck_assert_int_eq(atomic_load(&pinned_calls), before + 1);
	/* another file is the registry's, and then the hint */
	int other = page_file();

	ck_assert_int_eq(pair(other), 0);
	ck_assert_int_eq(atomic_load(&pinned_calls), before + 2);
	ck_assert_int_eq(vrange_fd_forget(other), 0);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(other);
	close(fd);
	fd_hint_test_pinned = NULL;
}
END_TEST

struct held_call {
	int fd;
	int ret;
};

static void *held_mark(void *arg)
{
	struct held_call *c = arg;

	/* the first call makes the hint, the second is held pinned */
	c->ret = vrange_fd_mark_volatile(c->fd, 0, ps);
	if (c->ret == 0) {
		atomic_store(&hold_next, true);
		c->ret = vrange_fd_mark_nonvolatile(c->fd, 0, ps);
	}
	return NULL;
}

static _Atomic bool forget_done;

static void *forget_it(void *arg)
{
	ck_assert_int_eq(vrange_fd_forget(*(int *)arg), 0);
	atomic_store(&forget_done, true);
	return NULL;
}

START_TEST(forget_waits_for_a_pinned_call)
{
	struct held_call c = { .fd = page_file() };
	struct timespec pause = { 0, 200 * 1000 * 1000 };
	pthread_t user, forgetter;

	ck_assert_int_eq(sem_init(&held, 0, 0), 0);
	ck_assert_int_eq(sem_init(&release, 0, 0), 0);
	fd_hint_test_pinned = on_pinned;
	ck_assert_int_eq(pthread_create(&user, NULL, held_mark, &c), 0);
	while (sem_wait(&held) < 0 && errno == EINTR)
		;
	/* the user's call holds the file, with no reference of its own:
	 * the forget, which drops the last one, must wait for it */
	atomic_store(&forget_done, false);
	ck_assert_int_eq(pthread_create(&forgetter, NULL, forget_it, &c.fd), 0);
	nanosleep(&pause, NULL);
	ck_assert_msg(!atomic_load(&forget_done),
		      "the forget returned while a call had the file pinned");
	sem_post(&release);
	ck_assert_int_eq(pthread_join(user, NULL), 0);
	ck_assert_int_eq(pthread_join(forgetter, NULL), 0);
	ck_assert(atomic_load(&forget_done));
	ck_assert_int_eq(c.ret, VRANGE_INTACT);
	fd_hint_test_pinned = NULL;
	close(c.fd);
}
END_TEST

/*
 * Threads pairing on a few files while another forgets them at random:
 * every call answers (no -errno), the hint was used and forgets crossed
 * it.  A forget that did not wait would free a file under a call.
 */
#define FILES 4

struct churn {
	int fd[FILES];
	_Atomic bool stop;
	_Atomic int bad;
	_Atomic long forgets;
};

static void *pairs(void *arg)
{
	struct churn *c = arg;
	unsigned int seed = (unsigned int)(uintptr_t)pthread_self();

	while (!atomic_load(&c->stop)) {
		int fd = c->fd[rand_r(&seed) % FILES];

		for (int i = 0; i < 50; i++) {
			int r = pair(fd);

			if (r < 0)
				atomic_store(&c->bad, r);
		}
	}
	return NULL;
}

static void *forgets(void *arg)
{
	struct churn *c = arg;
	unsigned int seed = 7;

	while (!atomic_load(&c->stop)) {
		int r = vrange_fd_forget(c->fd[rand_r(&seed) % FILES]);

		if (r < 0 && r != -ENOENT)
			atomic_store(&c->bad, 1000 + r);
		atomic_fetch_add(&c->forgets, 1);
		sched_yield();
	}
	return NULL;
}

START_TEST(forgets_under_pairs)
{
	struct churn c = { .stop = false };
	struct timespec run = { test_quick() ? 0 : 1, 300 * 1000 * 1000 };
	pthread_t th[3];
	long before = atomic_load(&pinned_calls);

	fd_hint_test_pinned = on_pinned;
	for (int i = 0; i < FILES; i++)
		c.fd[i] = page_file();
	ck_assert_int_eq(pthread_create(&th[0], NULL, pairs, &c), 0);
	ck_assert_int_eq(pthread_create(&th[1], NULL, pairs, &c), 0);
	ck_assert_int_eq(pthread_create(&th[2], NULL, forgets, &c), 0);
	nanosleep(&run, NULL);
	atomic_store(&c.stop, true);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	ck_assert_msg(atomic_load(&c.bad) == 0, "a call failed: %d (1000 + a forget's)",
		      atomic_load(&c.bad));
	ck_assert_int_gt(atomic_load(&pinned_calls), before);
	ck_assert_int_gt(atomic_load(&c.forgets), 0);
	for (int i = 0; i < FILES; i++) {
		vrange_fd_forget(c.fd[i]);
		close(c.fd[i]);
	}
	fd_hint_test_pinned = NULL;
}
END_TEST

/* More threads than hint slots (64): the rest take the registry. */
static void *two_pairs(void *arg)
{
	int fd = *(int *)arg;

	return (void *)(intptr_t)(pair(fd) == 0 && pair(fd) == 0);
}

START_TEST(more_threads_than_slots)
{
	enum { N = 70 };
	pthread_t th[N];
	int fd = page_file();

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, two_pairs, &fd), 0);
	for (int i = 0; i < N; i++) {
		void *ok = NULL;

		ck_assert_int_eq(pthread_join(th[i], &ok), 0);
		ck_assert_ptr_nonnull(ok);
	}
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
}
END_TEST

/* A fork child's calls: the parent's hints are not the child's. */
START_TEST(fork_child_calls)
{
	int fd = page_file(), status = 0;
	pid_t pid;

	ck_assert_int_eq(pair(fd), 0);
	ck_assert_int_eq(pair(fd), 0); /* the hint, in the parent */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(pair(fd) == 0 && pair(fd) == 0 && vrange_fd_forget(fd) == 0 ? 0 : 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(pair(fd), 0);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("fd-hint");
	TCase *tc = tcase_create("fd-hint");

	ps = sysconf(_SC_PAGESIZE);
	tcase_add_test(tc, later_calls_take_the_hint);
	tcase_add_test(tc, forget_waits_for_a_pinned_call);
	tcase_add_test(tc, forgets_under_pairs);
	tcase_add_test(tc, more_threads_than_slots);
	tcase_add_test(tc, fork_child_calls);
	suite_add_tcase(s, tc);
	return s;
}
