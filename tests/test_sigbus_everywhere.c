/* SPDX-License-Identifier: MIT */
/*
 * test_sigbus_everywhere.c - SIGBUS through every mapping the library knows
 * of, in every process (contract 2 and 5), also where a ZERO-mode mapping
 * of the same file read the purged hole first (contract 6: one file, two
 * access modes), in a fork child's copies passed to vrange() again, and
 * the mappings that fall back to zeros.
 *
 * Process A is the test itself; process B is forked before the case uses
 * the library and runs commands sent over a socketpair (it adopts the
 * region from a descriptor passed with SCM_RIGHTS), so B's library state
 * is its own, as in an unrelated program.  Both install their SIGBUS
 * handler before the library's first use, so the library's own handler
 * (stale markers) chains to it, as the manual asks.
 *
 * Run twice by meson: as is, and with VRANGE_NO_UFFD=1, where every
 * mapping is in ZERO mode and the same touches read zeros without a
 * signal (libvrange(7)).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd_pass.h"
#include "test_main.h"
#include "vrange.h"

#define PAGES 16

static size_t ps;

/* ---- touching under a SIGBUS handler (both processes) -------------------- */

enum bus_mode { BUS_GUARD, BUS_RECOVER };

static volatile sig_atomic_t bus_mode;
static sigjmp_buf *volatile bus_jb;
static void *volatile bus_addr;
static volatile pid_t bus_tid;
static volatile int bus_count, bus_purged;
static volatile unsigned char recover_byte;

/*
 * GUARD: note where and on which thread, and jump out.  RECOVER: the
 * pattern of the original volatile-range tests - unmark the page in the
 * handler, rewrite it, return, and let the access complete.
 */
static void on_bus(int sig, siginfo_t *si, void *uc)
{
	char *page = (char *)((uintptr_t)si->si_addr & ~(uintptr_t)(ps - 1));
	int purged = 0;

	(void)sig;
	(void)uc;
	bus_count++;
	bus_addr = si->si_addr;
	bus_tid = (pid_t)syscall(SYS_gettid);
	if (bus_mode == BUS_RECOVER) {
		if (vrange(page, ps, VRANGE_NONVOLATILE, &purged) == 0) {
			bus_purged += purged;
			memset(page, recover_byte, ps);
			return;
		}
	}
	if (bus_jb)
		siglongjmp(*bus_jb, 1);
	_exit(99); /* a SIGBUS nobody expected */
}

static void catch_bus(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_bus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

/* Read one byte: 0 (and *out) or 1 on SIGBUS. */
static int try_read(const volatile unsigned char *p, unsigned char *out)
{
	sigjmp_buf jb;

	bus_mode = BUS_GUARD;
	bus_addr = NULL;
	bus_jb = &jb;
	if (sigsetjmp(jb, 1)) {
		bus_jb = NULL;
		return 1;
	}
	*out = *p;
	bus_jb = NULL;
	return 0;
}

/* Read with the recovery pattern: the value the access finally read. */
static unsigned char recover_read(const volatile unsigned char *p, unsigned char fill)
{
	unsigned char v;

	recover_byte = fill;
	bus_mode = BUS_RECOVER;
	bus_jb = NULL;
	v = *p;
	bus_mode = BUS_GUARD;
	return v;
}

static int in_page(const void *a, const void *page)
{
	return (const char *)a >= (const char *)page &&
	       (const char *)a < (const char *)page + ps;
}

/* ---- process B ----------------------------------------------------------- */

enum op { OP_ADOPT, OP_READ, OP_RECOVER, OP_MARK, OP_UNMARK, OP_WRITE,
	  OP_PURGE, OP_QUIT };

/* OP_ADOPT's len: the access flags of vrange_region_adopt(). */

struct req {
	int op;
	uint64_t off, len;
	unsigned char byte;
};

struct rep {
	int64_t rc;
	int sig;          /* READ: 1 if SIGBUS */
	int addr_ok;      /* si_addr inside the page */
	int tid_ok;       /* delivered to the touching thread */
	unsigned char val;
	int signals, purged; /* RECOVER */
};

struct peer {
	pid_t pid;
	int sock;
};

static void peer_serve(int sock)
{
	vrange_region *r = NULL;
	unsigned char *base = NULL;

	for (;;) {
		struct req q;
		struct rep a;
		int fd;

		if (fd_pass_recv(sock, &q, sizeof(q), &fd) != (ssize_t)sizeof(q))
			_exit(0);
		memset(&a, 0, sizeof(a));
		switch (q.op) {
		case OP_ADOPT:
			a.rc = vrange_region_adopt(fd, (unsigned int)q.len, &r);
			close(fd);
			base = r ? vrange_region_base(r) : NULL;
			break;
		case OP_READ: {
			pid_t me = (pid_t)syscall(SYS_gettid);

			a.sig = try_read(base + q.off, &a.val);
			a.addr_ok = a.sig && in_page(bus_addr, base + q.off);
			a.tid_ok = a.sig && bus_tid == me;
			break;
		}
		case OP_RECOVER:
			bus_count = bus_purged = 0;
			a.val = recover_read(base + q.off, q.byte);
			a.signals = bus_count;
			a.purged = bus_purged;
			break;
		case OP_MARK:
			a.rc = vrange_mark_volatile(r, q.off, q.len);
			break;
		case OP_UNMARK:
			a.rc = vrange_mark_nonvolatile(r, q.off, q.len);
			break;
		case OP_WRITE:
			memset(base + q.off, q.byte, q.len);
			break;
		case OP_PURGE:
			a.rc = vrange_purge(SIZE_MAX);
			break;
		default:
			vrange_region_destroy(r);
			_exit(0);
		}
		if (write(sock, &a, sizeof(a)) != (ssize_t)sizeof(a))
			_exit(1);
	}
}

/* Fork B before this process uses the library in the case. */
static struct peer peer_start(void)
{
	struct peer p;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	p.pid = fork();
	ck_assert_int_ge(p.pid, 0);
	if (p.pid == 0) {
		close(sv[0]);
		alarm(60);
		catch_bus();
		peer_serve(sv[1]);
	}
	close(sv[1]);
	p.sock = sv[0];
	return p;
}

static struct rep peer_call(struct peer *p, int op, uint64_t off, uint64_t len,
			    unsigned char byte, int fd)
{
	struct req q;
	struct rep a;

	memset(&q, 0, sizeof(q)); /* padding too: it crosses a socket */
	q.op = op;
	q.off = off;
	q.len = len;
	q.byte = byte;

	ck_assert_int_eq(fd_pass_send(p->sock, &q, sizeof(q), fd), 0);
	ck_assert_int_eq(read(p->sock, &a, sizeof(a)), (ssize_t)sizeof(a));
	return a;
}

static void peer_stop(struct peer *p)
{
	struct req q;
	int st;

	memset(&q, 0, sizeof(q));
	q.op = OP_QUIT;

	fd_pass_send(p->sock, &q, sizeof(q), -1);
	ck_assert_int_eq(waitpid(p->pid, &st, 0), p->pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "peer status %#x", st);
	close(p->sock);
}

/* ---- helpers ------------------------------------------------------------- */

static int sigbus_mode(void)
{
	struct vrange_stats st;

	ck_assert_int_eq(vrange_get_stats(&st), 0);
	return st.access_fallback[0] == '\0';
}

static vrange_region *region(void)
{
	vrange_region *r = NULL;

	ck_assert_int_eq(vrange_region_create("sigbus-everywhere", PAGES * ps, 0, &r), 0);
	ck_assert_uint_eq(vrange_region_access(r),
			  sigbus_mode() ? VRANGE_ACCESS_SIGBUS : VRANGE_ACCESS_ZERO);
	return r;
}

/* A purged, still volatile page read in process B or A. */
static void expect_lost(int sig, int addr_ok, int tid_ok, unsigned char val)
{
	if (sigbus_mode()) {
		ck_assert_int_eq(sig, 1);
		ck_assert_int_eq(addr_ok, 1);
		ck_assert_int_eq(tid_ok, 1);
	} else {
		ck_assert_int_eq(sig, 0);
		ck_assert_int_eq(val, 0);
	}
}

/* ---- cases --------------------------------------------------------------- */

/* A purges; B's mapping of the region signals (and only where data went). */
START_TEST(a_purges_b_signals)
{
	struct peer b;
	struct rep a;
	vrange_region *r;
	unsigned char *p, v;

	catch_bus();
	b = peer_start();
	r = region();
	p = vrange_region_base(r);
	memset(p, 'a', 8 * ps);
	ck_assert_int_eq(peer_call(&b, OP_ADOPT, 0, 0, 0, vrange_region_fd(r)).rc, 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));

	a = peer_call(&b, OP_READ, 2 * ps, 0, 0, -1);
	expect_lost(a.sig, a.addr_ok, a.tid_ok, a.val);
	/* Nothing lost: outside the volatile range, never touched. */
	a = peer_call(&b, OP_READ, 5 * ps, 0, 0, -1);
	ck_assert_int_eq(a.sig, 0);
	ck_assert_int_eq(a.val, 'a');
	a = peer_call(&b, OP_READ, 12 * ps + 7, 0, 0, -1);
	ck_assert_int_eq(a.sig, 0);
	ck_assert_int_eq(a.val, 0);
	/* The recovery pattern completes B's access. */
	a = peer_call(&b, OP_RECOVER, 3 * ps + 1, 0, 'r', -1);
	if (sigbus_mode()) {
		ck_assert_int_eq(a.val, 'r');
		ck_assert_int_eq(a.signals, 1);
		ck_assert_int_eq(a.purged, 1);
		/* A purged too (its own marker): B's rewrite is data here. */
		ck_assert_int_eq(try_read(p + 3 * ps, &v), 0);
		ck_assert_int_eq(v, 'r');
		/* Still volatile and lost: A signals as well. */
		ck_assert_int_eq(try_read(p + 1 * ps, &v), 1);
		ck_assert(in_page(bus_addr, p + ps));
	} else {
		ck_assert_int_eq(a.val, 0);
		ck_assert_int_eq(a.signals, 0);
	}
	peer_stop(&b);
	vrange_region_destroy(r);
}
END_TEST

/* B purges; A signals, recovers; what B unmarked and wrote never signals. */
START_TEST(b_purges_a_signals)
{
	struct peer b;
	vrange_region *r;
	unsigned char *p, v;
	int sig;

	catch_bus();
	b = peer_start();
	r = region();
	p = vrange_region_base(r);
	memset(p, 'a', 8 * ps);
	ck_assert_int_eq(peer_call(&b, OP_ADOPT, 0, 0, 0, vrange_region_fd(r)).rc, 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_ge(peer_call(&b, OP_PURGE, 0, 0, 0, -1).rc, (int64_t)(4 * ps));
	/* B takes page 1 back and writes it: plain data for A, no signal. */
	ck_assert_int_eq(peer_call(&b, OP_UNMARK, ps, ps, 0, -1).rc, VRANGE_PURGED);
	peer_call(&b, OP_WRITE, ps, ps, 'b', -1);
	ck_assert_int_eq(try_read(p + ps + 5, &v), 0);
	ck_assert_int_eq(v, 'b');

	sig = try_read(p + 2 * ps + 9, &v);
	expect_lost(sig, in_page(bus_addr, p + 2 * ps), bus_tid == (pid_t)syscall(SYS_gettid), v);
	bus_count = bus_purged = 0;
	v = recover_read(p + 3 * ps, 'R');
	if (sigbus_mode()) {
		ck_assert_int_eq(v, 'R');
		ck_assert_int_eq(bus_count, 1);
		ck_assert_int_eq(bus_purged, 1);
	} else {
		ck_assert_int_eq(v, 0);
		ck_assert_int_eq(bus_count, 0);
	}
	ck_assert_int_eq(try_read(p + 6 * ps, &v), 0);
	ck_assert_int_eq(v, 'a');
	peer_stop(&b);
	vrange_region_destroy(r);
}
END_TEST

/* The application's own MAP_SHARED mapping of the region's file, passed to
 * vrange(): signals where B purged; the stale marker of A's own purge
 * goes once B unmarked and rewrote (D6 of the model test). */
START_TEST(app_mapping_other_process)
{
	struct peer b;
	vrange_region *r;
	unsigned char *m, v;
	int purged = -1, sig;

	catch_bus();
	b = peer_start();
	r = region();
	m = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED,
		 vrange_region_fd(r), 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 'a', 8 * ps);
	ck_assert_int_eq(peer_call(&b, OP_ADOPT, 0, 0, 0, vrange_region_fd(r)).rc, 0);
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(peer_call(&b, OP_PURGE, 0, 0, 0, -1).rc, (int64_t)(4 * ps));
	sig = try_read(m + 2 * ps, &v);
	expect_lost(sig, in_page(bus_addr, m + 2 * ps), 1, v);
	bus_count = 0;
	v = recover_read(m + 3 * ps, 'R');
	ck_assert_int_eq(v, sigbus_mode() ? 'R' : 0);
	ck_assert_int_eq(bus_count, sigbus_mode());

	/* A purges (poisoning its own mapping), B unmarks and rewrites. */
	memset(m + 4 * ps, 'c', ps);
	ck_assert_int_eq(vrange(m + 4 * ps, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(peer_call(&b, OP_UNMARK, 4 * ps, ps, 0, -1).rc, VRANGE_PURGED);
	peer_call(&b, OP_WRITE, 4 * ps, ps, 'b', -1);
	ck_assert_int_eq(try_read(m + 4 * ps, &v), 0);
	ck_assert_int_eq(v, 'b');
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	peer_stop(&b);
	ck_assert_int_eq(munmap(m, PAGES * ps), 0);
	vrange_region_destroy(r);
}
END_TEST

/* Memory mapped later where marked, purged memory was: a newcomer. */
START_TEST(newcomer_at_old_address)
{
	int fd = memfd_create("sigbus-everywhere-old", MFD_CLOEXEC);
	int fd2 = memfd_create("sigbus-everywhere-new", MFD_CLOEXEC);
	unsigned char *m, *n, v;

	catch_bus();
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(fd2, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(PAGES * ps)), 0);
	ck_assert_int_eq(ftruncate(fd2, (off_t)(PAGES * ps)), 0);
	m = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 'o', PAGES * ps);
	ck_assert_int_eq(vrange(m, PAGES * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(PAGES * ps));
	n = mmap(m, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd2, 0);
	ck_assert_ptr_eq(n, m);
	for (size_t i = 0; i < PAGES; i++) {
		ck_assert_int_eq(try_read(n + i * ps, &v), 0);
		ck_assert_int_eq(v, 0);
	}
	n[ps] = 'n';
	ck_assert_int_eq(vrange(n, PAGES * ps, VRANGE_NONVOLATILE, NULL), 0);
	ck_assert_int_eq(munmap(n, PAGES * ps), 0);
	close(fd);
	close(fd2);
}
END_TEST

/* A mapping of a read-only descriptor cannot be armed: vrange() works,
 * the mapping reads zeros where a purge punched, and the stats say so. */
START_TEST(read_only_falls_back)
{
	int fd = memfd_create("sigbus-everywhere-ro", MFD_CLOEXEC), ro;
	struct vrange_stats st;
	char path[64];
	unsigned char *m, v, buf[4096];

	catch_bus();
	ck_assert_int_ge(fd, 0);
	memset(buf, 'q', sizeof(buf));
	for (size_t i = 0; i < PAGES * ps; i += sizeof(buf))
		ck_assert_int_eq(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(ro, 0);
	m = mmap(NULL, PAGES * ps, PROT_READ, MAP_SHARED, ro, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_get_stats(&st), 0);
	if (sigbus_mode()) {
		ck_assert_uint_eq(st.sigbus_fallbacks, 1);
		ck_assert_msg(strstr(st.sigbus_fallback, "EPERM"), "reason '%s'",
			      st.sigbus_fallback);
	} else {
		ck_assert_uint_eq(st.sigbus_fallbacks, 0);
		ck_assert_str_eq(st.sigbus_fallback, "");
	}
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
	ck_assert_int_eq(try_read(m + 2 * ps, &v), 0);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(try_read(m + 6 * ps, &v), 0);
	ck_assert_int_eq(v, 'q');
	ck_assert_int_eq(munmap(m, PAGES * ps), 0);
	ck_assert_int_eq(vrange_get_stats(&st), 0);
	ck_assert_uint_eq(st.sigbus_fallbacks, 0);
	close(ro);
	close(fd);
}
END_TEST

#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1 << 12)
#endif

/* A range the application registered with its own userfaultfd (here for
 * write protection, which leaves holes to the kernel): EBUSY for ours. */
START_TEST(app_uffd_falls_back)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM };
	int fd = memfd_create("sigbus-everywhere-wp", MFD_CLOEXEC);
	int ufd = (int)syscall(__NR_userfaultfd, O_CLOEXEC);
	struct vrange_stats st;
	unsigned char *m, v;

	catch_bus();
	if (!sigbus_mode())
		TEST_SKIP("no userfaultfd for the library here");
	if (ufd < 0 || ioctl(ufd, UFFDIO_API, &api) < 0)
		TEST_SKIP("no userfaultfd with shmem write protection for the test");
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(PAGES * ps)), 0);
	m = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 'w', PAGES * ps);
	{
		struct uffdio_register reg = {
			.range = { (uintptr_t)m, PAGES * ps },
			.mode = UFFDIO_REGISTER_MODE_WP,
		};

		if (ioctl(ufd, UFFDIO_REGISTER, &reg) < 0)
			TEST_SKIP("UFFDIO_REGISTER_MODE_WP on shmem: %s", strerror(errno));
	}
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_get_stats(&st), 0);
	ck_assert_uint_eq(st.sigbus_fallbacks, 1);
	ck_assert_msg(strstr(st.sigbus_fallback, "EBUSY"), "reason '%s'",
		      st.sigbus_fallback);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
	ck_assert_int_eq(try_read(m + ps, &v), 0);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(try_read(m + 5 * ps, &v), 0);
	ck_assert_int_eq(v, 'w');
	ck_assert_int_eq(munmap(m, PAGES * ps), 0);
	close(ufd);
	close(fd);
}
END_TEST

/* A fork child's copy of a region signals where the parent purged after
 * the fork; what the child unmarked and wrote is data for the parent. */
START_TEST(fork_child_signals)
{
	vrange_region *r;
	unsigned char *p, v;
	int go[2], done[2], st;
	pid_t pid;
	char c;

	catch_bus();
	r = region();
	p = vrange_region_base(r);
	memset(p, 'a', 8 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int bad = 0, sig;

		alarm(30);
		if (read(go[0], &c, 1) != 1)
			_exit(10);
		sig = try_read(p + 2 * ps, &v);
		if (sigbus_mode())
			bad |= (sig != 1 || !in_page(bus_addr, p + 2 * ps));
		else
			bad |= (sig != 0 || v != 0);
		bad |= (vrange_mark_nonvolatile(r, ps, ps) != VRANGE_PURGED) << 1;
		memset(p + ps, 'k', ps);
		bad |= (try_read(p + 5 * ps, &v) != 0 || v != 'a') << 2;
		if (write(done[1], "x", 1) != 1)
			bad |= 8;
		_exit(bad);
	}
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
	ck_assert_int_eq(write(go[1], "x", 1), 1);
	ck_assert_int_eq(read(done[0], &c, 1), 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	ck_assert_int_eq(try_read(p + ps, &v), 0);
	ck_assert_int_eq(v, 'k');
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
	vrange_region_destroy(r);
}
END_TEST

/* ---- one file, two access modes ------------------------------------------ */

/*
 * Page 2 of a SIGBUS region, purged by another process, is read through a
 * ZERO-mode mapping of the same file first: that fills the hole for every
 * mapping of the file.  The SIGBUS mappings - the region's, an application
 * mapping passed to vrange() - must still signal (contract 6: one file, two
 * access modes), and nothing falls back.
 */
static void expect_sigbus_after_zero_read(vrange_region *r, unsigned char *m)
{
	struct vrange_stats st;
	unsigned char *p = vrange_region_base(r), v = 1;
	int purged = 0;

	ck_assert_int_eq(try_read(p + 2 * ps + 3, &v), sigbus_mode());
	if (sigbus_mode())
		ck_assert(in_page(bus_addr, p + 2 * ps));
	else
		ck_assert_int_eq(v, 0);
	ck_assert_int_eq(try_read(m + 2 * ps + 5, &v), sigbus_mode());
	if (sigbus_mode())
		ck_assert(in_page(bus_addr, m + 2 * ps));
	/* Untouched by the purge: data, no signal. */
	ck_assert_int_eq(try_read(p + 6 * ps, &v), 0);
	ck_assert_int_eq(v, 'a');
	ck_assert_int_eq(vrange_get_stats(&st), 0);
	ck_assert_uint_eq(st.sigbus_fallbacks, 0);
	/* Taken back: a page again, no signal, in both. */
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps, ps), VRANGE_PURGED);
	ck_assert_int_eq(try_read(p + 2 * ps, &v), 0);
	ck_assert_int_eq(try_read(m + 2 * ps, &v), 0);
	ck_assert_int_eq(vrange(m + 3 * ps, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
}

/* The ZERO-mode mapping in this process, the purge in another. */
START_TEST(zero_adopter_here_other_purges)
{
	struct peer b;
	vrange_region *r, *z = NULL;
	unsigned char *m, *zp, v = 1;

	catch_bus();
	b = peer_start();
	r = region();
	memset(vrange_region_base(r), 'a', 8 * ps);
	m = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED,
		 vrange_region_fd(r), 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	ck_assert_int_eq(vrange_region_adopt(vrange_region_fd(r), VRANGE_ACCESS_ZERO, &z), 0);
	ck_assert_uint_eq(vrange_region_access(z), VRANGE_ACCESS_ZERO);
	zp = vrange_region_base(z);
	ck_assert_int_eq(peer_call(&b, OP_ADOPT, 0, 0, 0, vrange_region_fd(r)).rc, 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(peer_call(&b, OP_PURGE, 0, 0, 0, -1).rc, (int64_t)(4 * ps));
	ck_assert_int_eq(try_read(zp + 2 * ps + 1, &v), 0);
	ck_assert_int_eq(v, 0);
	expect_sigbus_after_zero_read(r, m);
	peer_stop(&b);
	ck_assert_int_eq(munmap(m, PAGES * ps), 0);
	vrange_region_destroy(z);
	vrange_region_destroy(r);
}
END_TEST

/* The ZERO-mode mapping in the process that purged. */
START_TEST(zero_adopter_purges)
{
	struct peer b;
	vrange_region *r;
	unsigned char *m;
	struct rep a;

	catch_bus();
	b = peer_start();
	r = region();
	memset(vrange_region_base(r), 'a', 8 * ps);
	m = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED,
		 vrange_region_fd(r), 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	ck_assert_int_eq(peer_call(&b, OP_ADOPT, 0, VRANGE_ACCESS_ZERO, 0,
				   vrange_region_fd(r)).rc, 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(peer_call(&b, OP_PURGE, 0, 0, 0, -1).rc, (int64_t)(4 * ps));
	a = peer_call(&b, OP_READ, 2 * ps + 1, 0, 0, -1);
	ck_assert_int_eq(a.sig, 0);
	ck_assert_int_eq(a.val, 0);
	expect_sigbus_after_zero_read(r, m);
	peer_stop(&b);
	ck_assert_int_eq(munmap(m, PAGES * ps), 0);
	vrange_region_destroy(r);
}
END_TEST

/*
 * The parent maps a SIGBUS region's file itself, passes the mapping to
 * vrange() and purges; a fork child reads a purged page through its copy
 * (zeros: not armed yet), passes the copy to vrange() again and reads it
 * again: SIGBUS from that call on (libvrange(7), Fork).
 */
START_TEST(fork_child_app_mapping_vrange)
{
	vrange_region *r;
	unsigned char *m, v;
	int st;
	pid_t pid;

	catch_bus();
	r = region();
	m = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_SHARED,
		 vrange_region_fd(r), 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 'a', 8 * ps);
	ck_assert_int_eq(vrange(m, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int bad = 0, sig;

		alarm(30);
		/* Before: the copy is not armed yet, and reading the hole
		 * maps a page of zeros into it (documented). */
		bad |= (try_read(m + 2 * ps, &v) != 0 || v != 0) << 3;
		bad |= vrange(m, 4 * ps, VRANGE_VOLATILE, NULL) != 0;
		sig = try_read(m + 2 * ps, &v);
		if (sigbus_mode())
			bad |= (sig != 1 || !in_page(bus_addr, m + 2 * ps)) << 1;
		else
			bad |= (sig != 0 || v != 0) << 1;
		bad |= (try_read(m + 5 * ps, &v) != 0 || v != 'a') << 2;
		_exit(bad);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	/* The parent's mapping signals still. */
	ck_assert_int_eq(try_read(m + 2 * ps, &v), sigbus_mode());
	ck_assert_int_eq(munmap(m, PAGES * ps), 0);
	vrange_region_destroy(r);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("sigbus-everywhere");
	TCase *tc = tcase_create("processes");

	ps = (size_t)sysconf(_SC_PAGESIZE);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, a_purges_b_signals);
	tcase_add_test(tc, b_purges_a_signals);
	tcase_add_test(tc, app_mapping_other_process);
	tcase_add_test(tc, newcomer_at_old_address);
	tcase_add_test(tc, fork_child_signals);
	tcase_add_test(tc, fork_child_app_mapping_vrange);
	suite_add_tcase(s, tc);
	tc = tcase_create("two access modes");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, zero_adopter_here_other_purges);
	tcase_add_test(tc, zero_adopter_purges);
	suite_add_tcase(s, tc);
	tc = tcase_create("fallbacks");
	tcase_add_test(tc, read_only_falls_back);
	tcase_add_test(tc, app_uffd_falls_back);
	suite_add_tcase(s, tc);
	return s;
}
