/* SPDX-License-Identifier: MIT */
/*
 * test_model_ashmem.c - randomized model test of the ashmem shim's ioctls
 * from two processes (run with LD_PRELOAD=libvrange-ashmem.so; the contract
 * is section 4 of the API, the driver's behaviour).
 *
 * Two processes share ashmem areas (one creates, the other receives the fd
 * over SCM_RIGHTS or inherits it through fork) and take turns: PIN, UNPIN,
 * GET_PIN_STATUS, PURGE_ALL_CACHES, writes and reads, in lockstep, against
 * a model of every page: pinned or not, the pattern last written, whether a
 * purge took it.  Checks: ASHMEM_NOT_PURGED => every byte as it was left; a
 * pinned byte never changes; ASHMEM_WAS_PURGED only where a purge ran;
 * PURGE_ALL_CACHES returns the unpinned pages it found; the driver's errors
 * for bad offsets.  Environment: VRANGE_MODEL_SEED, VRANGE_MODEL_OPS,
 * VRANGE_MODEL_VERBOSE, VRANGE_TEST_QUICK as for test_model.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fd_pass.h"

struct ashmem_pin {
	uint32_t offset, len;
};

#define ASHMEM_NAME_LEN 256
#define __ASHMEMIOC 0x77
#define ASHMEM_SET_NAME _IOW(__ASHMEMIOC, 1, char[ASHMEM_NAME_LEN])
#define ASHMEM_SET_SIZE _IOW(__ASHMEMIOC, 3, size_t)
#define ASHMEM_PIN _IOW(__ASHMEMIOC, 7, struct ashmem_pin)
#define ASHMEM_UNPIN _IOW(__ASHMEMIOC, 8, struct ashmem_pin)
#define ASHMEM_GET_PIN_STATUS _IO(__ASHMEMIOC, 9)
#define ASHMEM_PURGE_ALL_CACHES _IO(__ASHMEMIOC, 10)

#define MAXPG 8
#define MAXAREA 12

enum { A_CREATE, A_SHARE, A_GIVE, A_CLOSE, A_WRITE, A_READ, A_PIN, A_UNPIN,
       A_STATUS, A_PURGE, A_BAD, A_EXIT };

struct aop {
	int type, area, npg, pg, seed;
	uint32_t off, len;
	uint32_t exp[MAXPG];
};

struct ares {
	long rc;
	int err;
	uint8_t cls[MAXPG]; /* 0 match, 1 zero, 2 other */
};

struct apage {
	uint32_t seed;
	uint8_t pinned, purged; /* purged: certainly (PURGE_ALL ran) */
	uint8_t maybe;          /* a purge in a process that let go of it */
	uint8_t unpinned_by;    /* the process that last unpinned it, and when */
	uint64_t unpinned_ns;
};

struct area {
	int used, npg;
	int held[2]; /* which processes hold an fd and a mapping */
	struct apage pg[MAXPG];
};

/* Per process: the fd and mapping of each area. */
static int afd[MAXAREA];
static char *amap[MAXAREA];
static size_t ps;

static struct area A[MAXAREA];
/* Unpinned pages of areas every process closed, which a process that held
 * them may still count (its state of the file lingers until a sweep). */
static long ghost[2];
static uint64_t rng, seed0, nops, total;
static unsigned opn;
static int verbose, sock = -1;
static pid_t peer;
static char last[32][160];

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng * 0x2545f4914f6cdd1dull;
}

static unsigned rn(unsigned n)
{
	return n ? (unsigned)(rnd() % n) : 0;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last[opn % 32], sizeof(last[0]), fmt, ap);
	va_end(ap);
	if (verbose)
		fprintf(stderr, "%s\n", last[opn % 32]);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "\nASHMEM MODEL VIOLATION at operation %u (seed %" PRIu64
			"): ", opn, seed0);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nlast operations (oldest first):\n");
	for (unsigned i = opn + 1; i <= opn + 32; i++)
		if (last[i % 32][0])
			fprintf(stderr, "  %s\n", last[i % 32]);
	fprintf(stderr, "replay: VRANGE_MODEL_SEED=%" PRIu64
			" VRANGE_MODEL_OPS=%u VRANGE_MODEL_VERBOSE=1 "
			"LD_PRELOAD=<build>/shim/libvrange-ashmem.so "
			"<build>/shim/test-model-ashmem\n", seed0, opn + 1);
	if (peer > 0)
		kill(peer, SIGKILL);
	exit(1);
}

static void fill(void *p, uint32_t seed)
{
	uint32_t *w = p;

	for (size_t k = 0; k < ps / 4; k++)
		w[k] = seed ? (seed * 2654435761u) ^ (uint32_t)k ^ 0x80000000u : 0;
}

static uint8_t classify(const char *p, uint32_t seed)
{
	static char *buf;
	int zero = 1;

	if (!buf)
		buf = malloc(ps);
	for (size_t k = 0; k < ps && zero; k++)
		zero = p[k] == 0;
	if (zero)
		return seed == 0 ? 0 : 1;
	fill(buf, seed);
	return memcmp(p, buf, ps) ? 2 : 0;
}

/* ---- messages with an optional fd ---- */

/* ---- the executor (both processes) ---- */

static long pin_call(int fd, unsigned long req, uint32_t off, uint32_t len,
		     int *err)
{
	struct ashmem_pin pin = {off, len};
	long r = ioctl(fd, req, &pin);

	*err = r < 0 ? errno : 0;
	return r;
}

static void observe(const struct aop *op, struct ares *res)
{
	for (int i = 0; i < op->npg; i++)
		res->cls[i] = classify(amap[op->area] + (op->pg + i) * ps,
				       op->exp[i]);
}

static void exec_op(const struct aop *op, int fd_in, struct ares *res)
{
	int a = op->area;

	memset(res, 0, sizeof(*res));
	switch (op->type) {
	case A_CREATE:
		afd[a] = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
		if (afd[a] < 0 || ioctl(afd[a], ASHMEM_SET_NAME, "model") < 0 ||
		    ioctl(afd[a], ASHMEM_SET_SIZE, (size_t)op->npg * ps) < 0) {
			res->rc = -1;
			res->err = errno;
			break;
		}
		/* before the first mmap, pin/unpin/status are EINVAL */
		res->rc = pin_call(afd[a], ASHMEM_UNPIN, 0, 0, &res->err);
		__attribute__((fallthrough));
	case A_SHARE:
		if (op->type == A_SHARE)
			afd[a] = fd_in;
		amap[a] = mmap(NULL, op->npg * ps, PROT_READ | PROT_WRITE,
			       MAP_SHARED, afd[a], 0);
		if (amap[a] == MAP_FAILED)
			res->rc = -2;
		break;
	case A_CLOSE:
		munmap(amap[a], op->npg * ps);
		close(afd[a]);
		afd[a] = -1;
		break;
	case A_WRITE:
		fill(amap[a] + op->pg * ps, (uint32_t)op->seed);
		break;
	case A_READ:
		observe(op, res);
		break;
	case A_PIN:
		res->rc = pin_call(afd[a], ASHMEM_PIN, op->off, op->len, &res->err);
		observe(op, res);
		break;
	case A_UNPIN:
		res->rc = pin_call(afd[a], ASHMEM_UNPIN, op->off, op->len,
				   &res->err);
		break;
	case A_STATUS:
		res->rc = pin_call(afd[a], ASHMEM_GET_PIN_STATUS, op->off,
				   op->len, &res->err);
		break;
	case A_PURGE:
		res->rc = ioctl(afd[a], ASHMEM_PURGE_ALL_CACHES);
		res->err = res->rc < 0 ? errno : 0;
		break;
	case A_BAD:
		res->rc = pin_call(afd[a], op->seed ? ASHMEM_UNPIN : ASHMEM_PIN,
				   op->off, op->len, &res->err);
		break;
	}
}

static void peer_loop(void)
{
	struct aop op;
	struct ares res;
	int fd;

	for (;;) {
		if (fd_pass_recv(sock, &op, sizeof(op), &fd) != sizeof(op) ||
		    op.type == A_EXIT)
			_exit(0);
		exec_op(&op, fd, &res);
		/* A_GIVE: the answer carries this process's fd of the area */
		if (fd_pass_send(sock, &res, sizeof(res), op.type == A_GIVE ? afd[op.area] : -1) < 0)
			_exit(2);
	}
}

/* Run op in process p; returns a descriptor the answer carried, or -1. */
static int run(int p, struct aop *op, struct ares *res, int fd)
{
	total++;
	if (p == 0) {
		exec_op(op, fd, res);
		return -1;
	}
	if (fd_pass_send(sock, op, sizeof(*op), fd) < 0 ||
	    fd_pass_recv(sock, res, sizeof(*res), &fd) != sizeof(*res))
		fail("the other process does not answer");
	return fd;
}

/* ---- the model side ---- */

static int pick_area(int p)
{
	int c[MAXAREA], n = 0;

	for (int a = 0; a < MAXAREA; a++)
		if (A[a].used && A[a].held[p])
			c[n++] = a;
	return n ? c[rn(n)] : -1;
}

static void pick_range(int npg, struct aop *op, int *a, int *b)
{
	*a = (int)rn((unsigned)npg);
	*b = *a + 1 + (int)rn((unsigned)(npg - *a));
	op->off = (uint32_t)(*a * ps);
	op->len = (uint32_t)((*b - *a) * ps);
	if (*b == npg && rn(4) == 0)
		op->len = 0; /* "to the end" */
}

static void check_pages(int p, int a, int pg0, const struct ares *res, int n,
			int was_purged)
{
	for (int i = 0; i < n; i++) {
		struct apage *g = &A[a].pg[pg0 + i];
		int c = res->cls[i];

		if (c == 2)
			fail("p%d area %d page %d holds bytes never written", p,
			     a, pg0 + i);
		if (c == 1 && !g->purged && !g->maybe)
			fail("p%d area %d page %d reads zeros: %s", p, a, pg0 + i,
			     g->pinned ? "a pinned page lost its data"
				       : "no purge took it");
		if (c == 0 && g->purged && g->seed)
			fail("p%d area %d page %d kept its data through "
			     "PURGE_ALL_CACHES", p, a, pg0 + i);
		if (was_purged == 0 && c == 1 && g->seed)
			fail("ASHMEM_NOT_PURGED but page %d was purged", pg0 + i);
	}
}

static void step(void)
{
	int p = (int)rn(2), a = pick_area(p), lo, hi, fd = -1;
	struct aop op = {0};
	struct ares res;
	unsigned r = rn(100);

	opn++;
	last[opn % 32][0] = 0;
	if (a < 0 || r < 6) {
		for (a = 0; a < MAXAREA && A[a].used; a++)
			;
		if (a == MAXAREA)
			return;
		op.type = A_CREATE;
		op.area = a;
		op.npg = 1 + (int)rn(MAXPG);
		note("#%u p%d CREATE area %d %d pages", opn, p, a, op.npg);
		run(p, &op, &res, -1);
		if (res.rc != -1 || res.err != EINVAL)
			fail("UNPIN before mmap: %ld errno %d, not EINVAL",
			     res.rc, res.err);
		memset(&A[a], 0, sizeof(A[a]));
		A[a].used = 1;
		A[a].npg = op.npg;
		A[a].held[p] = 1;
		for (int i = 0; i < op.npg; i++)
			A[a].pg[i].pinned = 1;
		return;
	}
	op.area = a;
	op.npg = A[a].npg;
	if (r < 12 && !A[a].held[!p]) {
		/* the other process receives the fd (SCM_RIGHTS) and maps it */
		note("#%u p%d -> p%d SCM_RIGHTS area %d", opn, p, !p, a);
		if (p == 1) {
			op.type = A_GIVE;
			fd = run(1, &op, &res, -1);
			if (fd < 0)
				fail("no descriptor came back");
		} else {
			fd = afd[a];
		}
		op.type = A_SHARE;
		run(!p, &op, &res, fd);
		if (res.rc)
			fail("mapping a received area failed");
		A[a].held[!p] = 1;
		return;
	}
	if (r < 16) {
		op.type = A_CLOSE;
		note("#%u p%d CLOSE area %d", opn, p, a);
		run(p, &op, &res, -1);
		A[a].held[p] = 0;
		if (!A[a].held[!p]) {
			for (int i = 0; i < A[a].npg; i++)
				if (!A[a].pg[i].pinned && !A[a].pg[i].purged) {
					ghost[0]++;
					ghost[1]++;
				}
			A[a].used = 0;
		}
		return;
	}
	if (r < 36) {
		int i = (int)rn((unsigned)A[a].npg);

		if (!A[a].pg[i].pinned)
			return;
		op.type = A_WRITE;
		op.pg = i;
		op.seed = (int)(1 + rn(1u << 30));
		note("#%u p%d WRITE area %d page %d", opn, p, a, i);
		run(p, &op, &res, -1);
		A[a].pg[i].seed = (uint32_t)op.seed;
		return;
	}
	if (r < 46) {
		pick_range(A[a].npg, &op, &lo, &hi);
		op.type = A_READ;
		op.pg = lo;
		op.npg = hi - lo;
		for (int i = lo; i < hi; i++)
			op.exp[i - lo] = A[a].pg[i].seed;
		note("#%u p%d READ area %d [%d,%d)", opn, p, a, lo, hi);
		run(p, &op, &res, -1);
		check_pages(p, a, lo, &res, hi - lo, -1);
		return;
	}
	pick_range(A[a].npg, &op, &lo, &hi);
	if (r < 64) {
		int could = 0, maybe = 0;

		op.type = A_PIN;
		op.pg = lo;
		op.npg = hi - lo;
		for (int i = lo; i < hi; i++) {
			op.exp[i - lo] = A[a].pg[i].seed;
			could |= !A[a].pg[i].pinned && A[a].pg[i].purged;
			maybe |= !A[a].pg[i].pinned && A[a].pg[i].maybe;
		}
		note("#%u p%d PIN area %d [%d,%d)", opn, p, a, lo, hi);
		run(p, &op, &res, -1);
		if (res.rc != 0 && res.rc != 1)
			fail("PIN returned %ld errno %d", res.rc, res.err);
		if (res.rc == 1 && !could && !maybe)
			fail("ASHMEM_WAS_PURGED but no purge took those pages");
		if (res.rc == 0 && could)
			fail("ASHMEM_NOT_PURGED over pages PURGE_ALL_CACHES took");
		check_pages(p, a, lo, &res, hi - lo, (int)res.rc);
		for (int i = lo; i < hi; i++) {
			struct apage *g = &A[a].pg[i];

			if (res.cls[i - lo] == 1)
				g->seed = 0;
			g->pinned = 1;
			g->purged = g->maybe = 0;
		}
	} else if (r < 82) {
		op.type = A_UNPIN;
		note("#%u p%d UNPIN area %d [%d,%d)", opn, p, a, lo, hi);
		run(p, &op, &res, -1);
		if (res.rc != 0)
			fail("UNPIN returned %ld errno %d", res.rc, res.err);
		for (int i = lo; i < hi; i++) {
			struct apage *g = &A[a].pg[i];

			/* unpinning again refreshes the page's age */
			g->unpinned_by = (uint8_t)p;
			g->unpinned_ns = now_ns();
			g->pinned = 0;
		}
	} else if (r < 92) {
		int any = 0;

		op.type = A_STATUS;
		for (int i = lo; i < hi; i++)
			any |= !A[a].pg[i].pinned;
		note("#%u p%d STATUS area %d [%d,%d)", opn, p, a, lo, hi);
		run(p, &op, &res, -1);
		if (res.rc != (any ? 0 : 1))
			fail("GET_PIN_STATUS returned %ld, model says %s", res.rc,
			     any ? "unpinned" : "pinned");
	} else if (r < 96) {
		long want = 0, other = 0;

		/*
		 * The driver counts every unpinned page of the system; the
		 * shim those of the areas this process holds, and perhaps of
		 * one it let go of while another process still holds it.
		 */
		op.type = A_PURGE;
		for (int b = 0; b < MAXAREA; b++)
			for (int i = 0; A[b].used && i < A[b].npg; i++) {
				struct apage *g = &A[b].pg[i];

				if (g->pinned || g->purged)
					continue;
				if (A[b].held[p] && !g->maybe)
					want++;
				else
					other++;
			}
		note("#%u p%d PURGE_ALL_CACHES (model: %ld unpinned here, %ld "
		     "elsewhere)", opn, p, want, other);
		run(p, &op, &res, -1);
		if (res.rc < want || res.rc > want + other + ghost[p])
			fail("PURGE_ALL_CACHES returned %ld (errno %d), %ld pages "
			     "were unpinned in areas this process holds", res.rc,
			     res.err, want);
		ghost[p] = 0;
		for (int b = 0; b < MAXAREA; b++)
			for (int i = 0; A[b].used && i < A[b].npg; i++)
				if (!A[b].pg[i].pinned) {
					struct apage *g = &A[b].pg[i];

					if (A[b].held[p])
						g->purged = 1;
					else
						g->maybe = 1;
				}
	} else {
		op.type = A_BAD;
		op.seed = (int)rn(2);
		op.off = (uint32_t)(rn(2) ? lo * ps + 1 + rn((unsigned)ps - 1)
					  : (A[a].npg + rn(3)) * ps);
		op.len = (uint32_t)(rn(3) ? ps : ps + 7);
		if (op.off % ps == 0 && op.len == ps)
			op.len = 2 * ps; /* past the end */
		note("#%u p%d BAD %s off %#x len %#x", opn, p,
		     op.seed ? "UNPIN" : "PIN", op.off, op.len);
		run(p, &op, &res, -1);
		if (res.rc != -1 || res.err != EINVAL)
			fail("bad range: %ld errno %d, not EINVAL", res.rc,
			     res.err);
	}
}

int main(void)
{
	const char *q = getenv("VRANGE_TEST_QUICK"), *s = getenv("VRANGE_MODEL_SEED");
	int sv[2], fd;

	ps = (size_t)sysconf(_SC_PAGESIZE);
	verbose = getenv("VRANGE_MODEL_VERBOSE") != NULL;
	nops = getenv("VRANGE_MODEL_OPS") ? strtoull(getenv("VRANGE_MODEL_OPS"), NULL, 0)
					  : (q && *q && *q != '0') ? 2000 : 20000;
	seed0 = s ? strtoull(s, NULL, 0) : 1;
	rng = seed0 * 0x9e3779b97f4a7c15ull + 77;
	fd = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		printf("SKIP: no /dev/ashmem (run with LD_PRELOAD=libvrange-ashmem.so)\n");
		return 77;
	}
	close(fd);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	for (int a = 0; a < MAXAREA; a++)
		afd[a] = -1;
	peer = fork();
	if (peer == 0) {
		close(sv[0]);
		sock = sv[1];
		peer_loop();
	}
	close(sv[1]);
	sock = sv[0];
	while (opn < nops)
		step();
	{
		struct aop op = {.type = A_EXIT};
		int st;

		fd_pass_send(sock, &op, sizeof(op), -1);
		if (waitpid(peer, &st, 0) != peer || st != 0)
			fail("the other process ended with status %#x", st);
	}
	printf("ashmem model test: %" PRIu64 " operations over 2 processes, "
	       "no violation\n", total);
	return 0;
}
