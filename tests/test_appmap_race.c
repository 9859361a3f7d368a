/* SPDX-License-Identifier: MIT */
/*
 * test_appmap_race.c - an application mapping's entry against a sweep that
 * judged an older entry at the same address.
 *
 * The table of known mappings (any_mapping.c) forgets a file entry whose
 * address holds something else now: a sweep (a stats call, a purge pass)
 * or vrange() looks the entry up, asks the kernel what is mapped there
 * (PROCMAP_QUERY), and cuts the entry if the answer is another mapping.
 * Another thread may meanwhile have cut that stale entry itself and
 * learnt the mapping there now - armed for SIGBUS, poisoned by a purge.
 * The late cut must leave that newer entry alone: gone, its mapping is
 * out of the file's list, so an unmark no longer clears its poison
 * markers (nor does the library's SIGBUS fixup, which finds no entry),
 * and a page just made non-volatile raises SIGBUS (the model soak's
 * "raises SIGBUS though just made non-volatile", seeds 2800500 and
 * 3100169: the monitor's sweep on CPU 0 preempted in that window).
 *
 * The window is held open here by interposing ioctl(): the sweeping
 * thread's PROCMAP_QUERY of the stale entry's address returns, then waits
 * until the main thread has learnt, marked and purged the new mapping.
 * Linked against libvrange.so, whose calls to ioctl() come here.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_main.h"
#include "vrange.h"

#define PAGES 4

static size_t ps;

/* ---- ioctl(), interposed ------------------------------------------------- */

/* PROCMAP_QUERY (Linux 6.11): the fields up to the one read here. */
struct pmq_head {
	uint64_t size, query_flags, query_addr;
};
struct pmq_full {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset;
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	uint32_t vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define PMQ _IOWR('f', 17, struct pmq_full)

static _Atomic uintptr_t hold_addr; /* 0: hold nothing */
static _Atomic pid_t hold_tid;      /* the thread to hold */
static sem_t held, go;

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	long r;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	r = syscall(SYS_ioctl, fd, req, arg);
	if (req == PMQ && r == 0 && atomic_load(&hold_addr) &&
	    ((struct pmq_head *)arg)->query_addr == atomic_load(&hold_addr) &&
	    (pid_t)syscall(SYS_gettid) == atomic_load(&hold_tid)) {
		/* Once: the answer is in, the caller has not acted on it. */
		atomic_store(&hold_addr, 0);
		sem_post(&held);
		while (sem_wait(&go) < 0 && errno == EINTR)
			;
	}
	return (int)r;
}

/* ---- SIGBUS -------------------------------------------------------------- */

static sigjmp_buf *volatile bus_jb;

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	if (bus_jb)
		siglongjmp(*bus_jb, 1);
	_exit(99);
}

/* Read one byte: 0 (and *out) or 1 on SIGBUS. */
static int try_read(const volatile unsigned char *p, unsigned char *out)
{
	sigjmp_buf jb;

	if (sigsetjmp(jb, 1)) {
		bus_jb = NULL;
		return 1;
	}
	bus_jb = &jb;
	*out = *p;
	bus_jb = NULL;
	return 0;
}

/* ---- the case ------------------------------------------------------------ */

static void *sweeper(void *arg)
{
	struct vrange_stats st;

	(void)arg;
	atomic_store(&hold_tid, (pid_t)syscall(SYS_gettid));
	atomic_store(&hold_addr, (uintptr_t)arg);
	vrange_get_stats(&st); /* sweeps the known mappings */
	return NULL;
}

/*
 * Memfd A mapped at X and passed to vrange(), then memfd B mapped over it
 * (MAP_FIXED): A's entry is stale.  A sweep finds so and is held before
 * it cuts; meanwhile vrange() on B cuts A's entry, learns B's mapping,
 * and a purge poisons page 2 there.  The held sweep then goes on.  B's
 * page 2 made non-volatile must read zeros, without a signal.
 */
START_TEST(sweep_cut_spares_newer_entry)
{
	struct vrange_stats st;
	struct sigaction sa;
	unsigned char *x, *y, v = 0xff;
	int fa, fb, sig;
	pthread_t t;

	ck_assert_int_eq(vrange_get_stats(&st), 0);
	if (st.access_fallback[0])
		TEST_SKIP("no SIGBUS mode here (%s)", st.access_fallback);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_bus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	ck_assert_int_eq(sigaction(SIGBUS, &sa, NULL), 0);
	ck_assert_int_eq(sem_init(&held, 0, 0), 0);
	ck_assert_int_eq(sem_init(&go, 0, 0), 0);

	fa = memfd_create("appmap-race-a", MFD_CLOEXEC);
	fb = memfd_create("appmap-race-b", MFD_CLOEXEC);
	ck_assert_int_ge(fa, 0);
	ck_assert_int_ge(fb, 0);
	ck_assert_int_eq(ftruncate(fa, (off_t)(PAGES * ps)), 0);
	ck_assert_int_eq(ftruncate(fb, (off_t)(PAGES * ps)), 0);
	x = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fa, 0);
	ck_assert_ptr_ne(x, MAP_FAILED);
	memset(x, 'a', PAGES * ps);
	ck_assert_int_eq(vrange(x, PAGES * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange(x, PAGES * ps, VRANGE_NONVOLATILE, NULL), 0);
	/* B over A, with no sweep between: A's entry stays, stale. */
	y = mmap(x, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fb, 0);
	ck_assert_ptr_eq(y, x);
	memset(y, 'b', PAGES * ps);

	/* The sweep asks what is at X (B: not A's), and is held there. */
	ck_assert_int_eq(pthread_create(&t, NULL, sweeper, x), 0);
	while (sem_wait(&held) < 0 && errno == EINTR)
		;
	/* Here A's entry is cut and B's mapping learnt, armed for SIGBUS. */
	ck_assert_int_eq(vrange(y + 3 * ps, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fb, (off_t)(2 * ps), ps), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(try_read(y + 2 * ps, &v), 1); /* purged: SIGBUS */
	/* The held sweep cuts what it judged. */
	sem_post(&go);
	pthread_join(t, NULL);

	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fb, (off_t)(2 * ps), 2 * ps),
			 VRANGE_PURGED);
	sig = try_read(y + 2 * ps, &v);
	ck_assert_msg(sig == 0, "page 2 raises SIGBUS though just made non-volatile");
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(try_read(y + 3 * ps, &v), 0);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(try_read(y, &v), 0);
	ck_assert_int_eq(v, 'b');
	/* B's entry is still known: a purge of page 0 signals there. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fb, 0, ps), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(try_read(y, &v), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fb, 0, ps), VRANGE_PURGED);
	ck_assert_int_eq(try_read(y, &v), 0);
	ck_assert_int_eq(v, 0);

	ck_assert_int_eq(munmap(y, PAGES * ps), 0);
	close(fa);
	close(fb);
	sem_destroy(&held);
	sem_destroy(&go);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("appmap-race");
	TCase *tc = tcase_create("sweep");

	ps = (size_t)sysconf(_SC_PAGESIZE);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, sweep_cut_spares_newer_entry);
	suite_add_tcase(s, tc);
	return s;
}
