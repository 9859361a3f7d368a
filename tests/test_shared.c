/* SPDX-License-Identifier: MIT */
/*
 * test_shared.c - volatile state shared between processes (issue 7): files
 * the library creates carry their state inside the file, every process that
 * maps them shares it, a process that dies at any moment wedges nobody, and
 * hostile metadata is an error, never a crash or a hang.
 *
 * Every case runs in its own forked process (CK_FORK) and forks or execs
 * further processes itself.  "Helpers" are fresh copies of this very binary
 * (fork + exec of /proc/self/exe) started in helper mode by an environment
 * variable: they hold no library state inherited from the test, receive the
 * region's descriptor over a Unix socket (SCM_RIGHTS) and obey one command
 * per message.  Every wait is bounded by alarm(): a hang is a failure
 * (SIGALRM), not a stuck test run.
 *
 * Pages are always written before they are marked volatile: only allocated
 * pages are certain to be discarded by a purge.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#include "fd_pass.h"
#include "test_main.h"

#define HELPER_ENV "VRANGE_TEST_SHARED_HELPER"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	/* Check's runner leaves its SIGALRM handler (which kills the whole
	 * process group) installed in the forked case: our alarms must
	 * kill only the process that hangs. */
	signal(SIGALRM, SIG_DFL);
}

/* ------------------------------------------------------------------------ */
/* Small tools                                                               */

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return 0;
	return 1;
}

/* ------------------------------------------------------------------------ */
/* The stress worker: shared by forked children and exec'd helpers          */

struct work_cfg {
	uint32_t id, nprocs;     /* this process owns slices s with s % nprocs == id */
	uint32_t slices;         /* slices in the region */
	uint32_t slice_pages;
	uint64_t steps;          /* 0: until *stop */
	uint64_t seed;
	uint32_t purge_permille; /* chance per step of a vrange_purge */
	uint32_t use_alarm;      /* bound every step by alarm() */
};

struct work_res {
	_Atomic uint64_t cycles;     /* mark ... unmark cycles completed */
	_Atomic uint64_t intact;     /* of those, VRANGE_INTACT (checksum matched) */
	_Atomic uint64_t purged;     /* of those, VRANGE_PURGED */
	_Atomic uint64_t violations; /* INTACT with changed bytes, or data of a
				      * non-volatile slice changed, or a page
				      * neither zero nor as written */
	_Atomic uint64_t errors;     /* a call returned -errno */
	_Atomic uint64_t purges;     /* vrange_purge calls that freed something */
	_Atomic uint64_t steps;
};

/* A plain (non-atomic) copy for sending over a socket. */
struct work_sum {
	uint64_t cycles, intact, purged, violations, errors, purges, steps;
};

static void sum_add(struct work_sum *s, struct work_res *r)
{
	s->cycles += atomic_load(&r->cycles);
	s->intact += atomic_load(&r->intact);
	s->purged += atomic_load(&r->purged);
	s->violations += atomic_load(&r->violations);
	s->errors += atomic_load(&r->errors);
	s->purges += atomic_load(&r->purges);
	s->steps += atomic_load(&r->steps);
}

static void fill_page(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = xorshift(&s);

		memcpy(p + i, &v, 8);
	}
	/* Never an all-zero page: a purged page must not look written. */
	p[0] |= 1;
}

/*
 * Each step picks one owned slice: a non-volatile one is checked (nobody may
 * have touched it), rewritten with fresh contents and marked volatile; a
 * volatile one is marked non-volatile and, if VRANGE_INTACT, must hold
 * exactly what was written; if VRANGE_PURGED, every page must be either
 * zeros or as written.  Now and then the process purges (vrange_purge),
 * which discards the oldest volatile pages of the file whichever process
 * marked them.
 */
static void work(vrange_region *r, const struct work_cfg *c, struct work_res *res,
		 _Atomic int *stop)
{
	unsigned char *base = vrange_region_base(r);
	size_t slice_bytes = (size_t)c->slice_pages * ps;
	uint32_t owned = 0;
	uint32_t *mine = calloc(c->slices, sizeof(*mine));
	uint64_t *expect = calloc((size_t)c->slices * c->slice_pages, sizeof(*expect));
	uint8_t *vol = calloc(c->slices, 1);
	uint8_t *written = calloc(c->slices, 1);
	uint64_t rng = c->seed * 0x9e3779b97f4a7c15ull + c->id + 1;

	if (!mine || !expect || !vol || !written) {
		atomic_fetch_add(&res->errors, 1);
		goto out;
	}
	for (uint32_t s = c->id; s < c->slices; s += c->nprocs)
		mine[owned++] = s;
	/* Take the slices over: a predecessor that was killed may have left
	 * them volatile, and writing to a volatile page is the caller's risk. */
	for (uint32_t k = 0; k < owned; k++)
		if (vrange_mark_nonvolatile(r, (size_t)mine[k] * slice_bytes, slice_bytes) < 0)
			atomic_fetch_add(&res->errors, 1);
	for (uint64_t step = 0; owned && (c->steps ? step < c->steps : !atomic_load(stop));
	     step++) {
		uint32_t s = mine[xorshift(&rng) % owned];
		unsigned char *p = base + (size_t)s * slice_bytes;
		uint64_t *e = &expect[(size_t)s * c->slice_pages];
		int ret;

		if (c->use_alarm)
			alarm(10);
		if (!vol[s]) {
			if (written[s])
				for (uint32_t i = 0; i < c->slice_pages; i++)
					if (hash_bytes(p + i * ps, ps) != e[i])
						atomic_fetch_add(&res->violations, 1);
			for (uint32_t i = 0; i < c->slice_pages; i++) {
				fill_page(p + i * ps, ps, xorshift(&rng));
				e[i] = hash_bytes(p + i * ps, ps);
			}
			written[s] = 1;
			ret = vrange_mark_volatile(r, (size_t)s * slice_bytes, slice_bytes);
			if (ret < 0)
				atomic_fetch_add(&res->errors, 1);
			else
				vol[s] = 1;
		} else {
			ret = vrange_mark_nonvolatile(r, (size_t)s * slice_bytes, slice_bytes);
			if (ret < 0) {
				atomic_fetch_add(&res->errors, 1);
				continue;
			}
			vol[s] = 0;
			if (ret == VRANGE_INTACT) {
				for (uint32_t i = 0; i < c->slice_pages; i++)
					if (hash_bytes(p + i * ps, ps) != e[i])
						atomic_fetch_add(&res->violations, 1);
				atomic_fetch_add(&res->intact, 1);
			} else if (ret == VRANGE_PURGED) {
				for (uint32_t i = 0; i < c->slice_pages; i++)
					if (!all_bytes(p + i * ps, ps, 0) &&
					    hash_bytes(p + i * ps, ps) != e[i])
						atomic_fetch_add(&res->violations, 1);
				atomic_fetch_add(&res->purged, 1);
				written[s] = 0; /* to be rewritten wholesale */
			} else {
				atomic_fetch_add(&res->errors, 1);
			}
			atomic_fetch_add(&res->cycles, 1);
		}
		if (xorshift(&rng) % 1000 < c->purge_permille) {
			ssize_t n = vrange_purge((1 + xorshift(&rng) % (2 * c->slice_pages)) * ps);

			if (n < 0)
				atomic_fetch_add(&res->errors, 1);
			else if (n > 0)
				atomic_fetch_add(&res->purges, 1);
		}
		if (xorshift(&rng) % 8 == 0)
			sched_yield();
		atomic_fetch_add(&res->steps, 1);
	}
	/* Leave nothing volatile behind, checking as above. */
	for (uint32_t k = 0; k < owned && c->steps; k++) {
		uint32_t s = mine[k];
		unsigned char *p = base + (size_t)s * slice_bytes;
		uint64_t *e = &expect[(size_t)s * c->slice_pages];
		int ret;

		if (!vol[s])
			continue;
		ret = vrange_mark_nonvolatile(r, (size_t)s * slice_bytes, slice_bytes);
		if (ret == VRANGE_INTACT) {
			for (uint32_t i = 0; i < c->slice_pages; i++)
				if (hash_bytes(p + i * ps, ps) != e[i])
					atomic_fetch_add(&res->violations, 1);
			atomic_fetch_add(&res->intact, 1);
		} else if (ret == VRANGE_PURGED) {
			atomic_fetch_add(&res->purged, 1);
		} else {
			atomic_fetch_add(&res->errors, 1);
		}
		atomic_fetch_add(&res->cycles, 1);
	}
	if (c->use_alarm)
		alarm(0);
out:
	free(mine);
	free(expect);
	free(vol);
	free(written);
}

/* ------------------------------------------------------------------------ */
/* Helpers: commands over a SOCK_SEQPACKET socket                            */

enum {
	OP_ADOPT = 1, /* fd passed; a = flags.  ret: 0 or -errno */
	OP_MARK,      /* a = off, b = len */
	OP_UNMARK,
	OP_ISVOL,
	OP_FD_MARK,   /* the file layer, on the adopted descriptor */
	OP_FD_UNMARK,
	OP_FD_ISVOL,
	OP_PURGE,     /* vrange_purge(a); a = 0 means SIZE_MAX */
	OP_FILL,      /* memset(base + a, c, b) */
	OP_CHECK,     /* 1 if every byte of [a, a + b) is c */
	OP_SIZE,      /* vrange_region_size */
	OP_STRESS,    /* run work() with cfg; reply carries the sums */
	OP_DESTROY,
	OP_OPEN_SHM,  /* open foreign_shm_name(getppid()) itself, adopt it; a = flags */
	OP_EXIT,
};

struct cmd {
	int32_t op;
	uint32_t pad;
	uint64_t a, b, c;
	struct work_cfg cfg;
};

struct reply {
	int64_t ret;
	struct work_sum sum;
};

/* The /dev/shm name a test process and its helper both open. */
static void foreign_shm_name(char *buf, size_t n, pid_t test_pid)
{
	snprintf(buf, n, "/dev/shm/vrange-test-foreign-%d", (int)test_pid);
}

/* Serve commands until OP_EXIT or the socket closes.  Exit status 0. */
static int serve(int sock)
{
	vrange_region *r = NULL;
	int fd = -1;

	for (;;) {
		struct cmd c;
		struct reply rep;
		int pfd;
		ssize_t n = fd_pass_recv(sock, &c, sizeof(c), &pfd);
		unsigned char *base = r ? vrange_region_base(r) : NULL;

		if (n != (ssize_t)sizeof(c))
			break;
		memset(&rep, 0, sizeof(rep));
		switch (c.op) {
		case OP_ADOPT:
			if (r)
				vrange_region_destroy(r);
			r = NULL;
			if (fd >= 0)
				close(fd);
			fd = pfd;
			pfd = -1;
			rep.ret = vrange_region_adopt(fd, (unsigned int)c.a, &r);
			break;
		case OP_MARK:
			rep.ret = vrange_mark_volatile(r, c.a, c.b);
			break;
		case OP_UNMARK:
			rep.ret = vrange_mark_nonvolatile(r, c.a, c.b);
			break;
		case OP_ISVOL:
			rep.ret = vrange_is_volatile(r, c.a, c.b);
			break;
		case OP_FD_MARK:
			rep.ret = vrange_fd_mark_volatile(fd, (off_t)c.a, (off_t)c.b);
			break;
		case OP_FD_UNMARK:
			rep.ret = vrange_fd_mark_nonvolatile(fd, (off_t)c.a, (off_t)c.b);
			break;
		case OP_FD_ISVOL:
			rep.ret = vrange_fd_is_volatile(fd, (off_t)c.a, (off_t)c.b);
			break;
		case OP_PURGE:
			rep.ret = vrange_purge(c.a ? c.a : SIZE_MAX);
			break;
		case OP_FILL:
			if (!base || c.a + c.b > vrange_region_size(r)) {
				rep.ret = -EINVAL;
				break;
			}
			memset(base + c.a, (int)c.c, c.b);
			break;
		case OP_CHECK:
			if (!base || c.a + c.b > vrange_region_size(r)) {
				rep.ret = -EINVAL;
				break;
			}
			rep.ret = all_bytes(base + c.a, c.b, (unsigned char)c.c);
			break;
		case OP_SIZE:
			rep.ret = (int64_t)vrange_region_size(r);
			break;
		case OP_STRESS: {
			struct work_res res;

			memset(&res, 0, sizeof(res));
			if (!r) {
				rep.ret = -EINVAL;
				break;
			}
			work(r, &c.cfg, &res, NULL);
			sum_add(&rep.sum, &res);
			break;
		}
		case OP_DESTROY:
			rep.ret = vrange_region_destroy(r);
			r = NULL;
			break;
		case OP_OPEN_SHM: {
			char name[64];

			vrange_region_destroy(r);
			r = NULL;
			if (fd >= 0)
				close(fd);
			foreign_shm_name(name, sizeof(name), getppid());
			fd = open(name, O_RDWR | O_CLOEXEC);
			rep.ret = fd < 0 ? -errno
					 : vrange_region_adopt(fd, (unsigned int)c.a, &r);
			break;
		}
		case OP_EXIT:
			goto out;
		default:
			rep.ret = -EINVAL;
		}
		if (pfd >= 0)
			close(pfd);
		if (fd_pass_send(sock, &rep, sizeof(rep), -1) < 0)
			break;
	}
out:
	vrange_region_destroy(r);
	if (fd >= 0)
		close(fd);
	return 0;
}

static void victim_main(void) __attribute__((noreturn));

/* Helper mode: runs before Check's main when the environment asks for it. */
__attribute__((constructor)) static void helper_entry(void)
{
	const char *s = getenv(HELPER_ENV);

	if (!s)
		return;
	ps = (size_t)sysconf(_SC_PAGESIZE);
	if (*s == 'v')
		victim_main();
	_exit(serve(atoi(s)));
}

struct helper {
	pid_t pid;
	int sock;
};

/*
 * Start a helper.  exec_fresh: fork + exec this binary (no library state
 * inherited); else a plain fork that serves at once (it inherits whatever
 * the test process had, so call it before creating regions).
 */
static struct helper helper_start(int exec_fresh)
{
	struct helper h;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	h.pid = fork();
	ck_assert_int_ge(h.pid, 0);
	if (h.pid == 0) {
		char num[16];

		close(sv[0]);
		if (!exec_fresh)
			_exit(serve(sv[1]));
		if (fcntl(sv[1], F_SETFD, 0) < 0)
			_exit(126);
		snprintf(num, sizeof(num), "%d", sv[1]);
		setenv(HELPER_ENV, num, 1);
		execl("/proc/self/exe", "test-shared-helper", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	h.sock = sv[0];
	return h;
}

static struct reply helper_call_full(struct helper *h, int fd, const struct cmd *c)
{
	struct reply rep;
	int rfd;

	ck_assert_int_eq(fd_pass_send(h->sock, c, sizeof(*c), fd), 0);
	ck_assert_int_eq(fd_pass_recv(h->sock, &rep, sizeof(rep), &rfd), (ssize_t)sizeof(rep));
	if (rfd >= 0)
		close(rfd);
	return rep;
}

static int64_t helper_call(struct helper *h, int op, uint64_t a, uint64_t b, uint64_t c)
{
	struct cmd cm = { .op = op, .a = a, .b = b, .c = c };

	return helper_call_full(h, -1, &cm).ret;
}

static int64_t helper_adopt(struct helper *h, int fd, unsigned int flags)
{
	struct cmd cm = { .op = OP_ADOPT, .a = flags };

	return helper_call_full(h, fd, &cm).ret;
}

/* Tell the helper to exit and check that it exited cleanly. */
static void helper_stop(struct helper *h)
{
	struct cmd cm = { .op = OP_EXIT };
	int st;

	fd_pass_send(h->sock, &cm, sizeof(cm), -1);
	close(h->sock);
	ck_assert_int_eq(waitpid(h->pid, &st, 0), h->pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "helper ended with status 0x%x", st);
}

/* ------------------------------------------------------------------------ */
/* Visibility and purging across processes                                   */

static vrange_region *make_region(size_t size, unsigned int flags)
{
	vrange_region *r = NULL;

	ck_assert_int_eq(vrange_region_create("test-shared", size, flags, &r), 0);
	ck_assert_ptr_nonnull(r);
	return r;
}

/*
 * Marking in one process is seen by the next call in another, through the
 * region and through the file layer, in both directions.
 */
START_TEST(marks_seen_across_exec)
{
	vrange_region *r = make_region(8 * ps, 0);
	int fd = vrange_region_fd(r);
	struct helper h;

	alarm(60);
	h = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h, fd, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_SIZE, 0, 0, 0), (int64_t)(8 * ps));

	/* Here → there. */
	memset(vrange_region_base(r), 0x33, 8 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, 2 * ps), 0);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 2 * ps, ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 3 * ps, ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 2 * ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 4 * ps, 4 * ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, 2 * ps, 1, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, 5 * ps, ps, 0), 0);

	/* There → here: region layer and file layer. */
	ck_assert_int_eq(helper_call(&h, OP_MARK, 6 * ps, ps, 0), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 6 * ps, ps), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(6 * ps), (off_t)ps), 1);
	ck_assert_int_eq(helper_call(&h, OP_FD_MARK, 7 * ps, ps, 0), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 7 * ps, ps), 1);

	/* Unmarking there is seen here at once, and vice versa. */
	ck_assert_int_eq(helper_call(&h, OP_UNMARK, 2 * ps, 2 * ps, 0), VRANGE_INTACT);
	ck_assert_int_eq(vrange_is_volatile(r, 2 * ps, 2 * ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 6 * ps, 2 * ps), VRANGE_INTACT);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 8 * ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_CHECK, 0, 8 * ps, 0x33), 1);

	helper_stop(&h);
	vrange_region_destroy(r);
}
END_TEST

/*
 * A purge in process A of a range that B marked volatile: B's unmark says
 * VRANGE_PURGED (once), the bytes read zeros in both; A's unmark of the same
 * range afterwards finds nothing purged.  Then the other way round.
 */
START_TEST(purge_elsewhere_reported)
{
	vrange_region *r = make_region(4 * ps, 0);
	unsigned char *base = vrange_region_base(r);
	struct helper h;

	alarm(60);
	h = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h, vrange_region_fd(r), 0), 0);
	memset(base, 0x5c, 4 * ps);

	/* B marks, A purges. */
	ck_assert_int_eq(helper_call(&h, OP_MARK, ps, 2 * ps, 0), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_is_volatile(r, ps, ps), 1);
	ck_assert_int_eq(helper_call(&h, OP_UNMARK, ps, 2 * ps, 0), VRANGE_PURGED);
	ck_assert_int_eq(helper_call(&h, OP_UNMARK, ps, 2 * ps, 0), VRANGE_INTACT);
	ck_assert_int_eq(helper_call(&h, OP_CHECK, ps, 2 * ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_CHECK, 0, ps, 0x5c), 1);
	ck_assert_int_eq(helper_call(&h, OP_CHECK, 3 * ps, ps, 0x5c), 1);

	/* A marks, B purges; only A's range goes. */
	ck_assert_int_eq(helper_call(&h, OP_FILL, 0, 4 * ps, 0x6d), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 3 * ps, ps), 0);
	ck_assert_int_eq(helper_call(&h, OP_PURGE, 0, 0, 0), (int64_t)ps);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_PURGED);
	ck_assert(all_bytes(base + 3 * ps, ps, 0));
	ck_assert(all_bytes(base, 3 * ps, 0x6d));

	/* Nothing volatile: B's purge frees nothing, and nothing is lost. */
	ck_assert_int_eq(helper_call(&h, OP_PURGE, 0, 0, 0), 0);
	ck_assert(all_bytes(base, 3 * ps, 0x6d));

	helper_stop(&h);
	vrange_region_destroy(r);
}
END_TEST

/*
 * A page that process A purged (in the default access mode, SIGBUS where
 * userfaultfd works) and that process B then marked non-volatile and wrote
 * is ordinary data again: A reads B's bytes, with no signal.  The contract:
 * "after mark_nonvolatile the same pages fault in ... without any signal",
 * and a non-volatile page never raises SIGBUS.
 */
START_TEST(purged_then_reclaimed_elsewhere_reads_fine)
{
	vrange_region *r = make_region(2 * ps, 0);
	volatile unsigned char *base = vrange_region_base(r);
	struct helper h;

	alarm(60);
	h = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h, vrange_region_fd(r), 0), 0);
	memset((void *)base, 0x21, 2 * ps);
	ck_assert_int_eq(helper_call(&h, OP_MARK, 0, ps, 0), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(helper_call(&h, OP_UNMARK, 0, ps, 0), VRANGE_PURGED);
	ck_assert_int_eq(helper_call(&h, OP_FILL, 0, ps, 0x42), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 0);
	/* SIGBUS here kills the case: that is the failure. */
	ck_assert_int_eq(base[0], 0x42);
	ck_assert_int_eq(base[ps - 1], 0x42);
	ck_assert_int_eq(base[ps], 0x21);
	helper_stop(&h);
	vrange_region_destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Concurrent stress: fork, SCM_RIGHTS to a pre-forked child, exec'd helpers */

static void print_sum(const char *what, const struct work_sum *s)
{
	printf("%s: cycles %llu intact %llu purged %llu violations %llu "
	       "errors %llu purges %llu\n", what,
	       (unsigned long long)s->cycles, (unsigned long long)s->intact,
	       (unsigned long long)s->purged, (unsigned long long)s->violations,
	       (unsigned long long)s->errors, (unsigned long long)s->purges);
	fflush(stdout);
}

static void check_sum(const char *what, const struct work_sum *s)
{
	print_sum(what, s);
	ck_assert_uint_eq(s->violations, 0);
	ck_assert_uint_eq(s->errors, 0);
	ck_assert_uint_gt(s->cycles, 0);
	/* Both outcomes must have happened, or the run proved nothing. */
	ck_assert_uint_gt(s->intact, 0);
	ck_assert_uint_gt(s->purged, 0);
}

static uint64_t stress_steps(void)
{
	return test_quick() ? 1500 : 20000;
}

/* Four processes over plain fork: each child inherits the region. */
START_TEST(stress_fork)
{
	const uint32_t nprocs = 4, slices = 32, slice_pages = 4;
	vrange_region *r = make_region((size_t)slices * slice_pages * ps, 0);
	struct work_res *res = mmap(NULL, nprocs * sizeof(*res), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct work_sum sum = { 0 };
	pid_t pids[4];

	ck_assert_ptr_ne(res, MAP_FAILED);
	memset(res, 0, nprocs * sizeof(*res));
	alarm(100);
	for (uint32_t i = 0; i < nprocs; i++) {
		struct work_cfg c = { .id = i, .nprocs = nprocs, .slices = slices,
				      .slice_pages = slice_pages, .steps = stress_steps(),
				      .seed = 1234 + i, .purge_permille = 250 };

		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			work(r, &c, &res[i], NULL);
			_exit(0);
		}
	}
	for (uint32_t i = 0; i < nprocs; i++) {
		int st;

		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker %u ended with status 0x%x", i, st);
		sum_add(&sum, &res[i]);
	}
	check_sum("stress over fork (4 processes)", &sum);
	ck_assert_int_eq(vrange_is_volatile(r, 0, vrange_region_size(r)), 0);
	vrange_region_destroy(r);
}
END_TEST

/*
 * The region travels over a socket: to two fresh exec'd helpers and to one
 * child forked before the region existed; the test process works too.
 */
START_TEST(stress_scm_rights)
{
	const uint32_t nprocs = 4, slices = 32, slice_pages = 4;
	struct helper h[3];
	vrange_region *r;
	struct work_res mine;
	struct work_sum sum = { 0 };

	alarm(100);
	h[0] = helper_start(0); /* forked before the region exists */
	h[1] = helper_start(1);
	h[2] = helper_start(1);
	r = make_region((size_t)slices * slice_pages * ps, 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(helper_adopt(&h[i], vrange_region_fd(r), 0), 0);
		ck_assert_int_eq(helper_call(&h[i], OP_SIZE, 0, 0, 0),
				 (int64_t)vrange_region_size(r));
	}
	/* Start all three, then work here, then collect. */
	for (uint32_t i = 0; i < 3; i++) {
		struct cmd c = { .op = OP_STRESS,
				 .cfg = { .id = i + 1, .nprocs = nprocs, .slices = slices,
					  .slice_pages = slice_pages,
					  .steps = stress_steps(), .seed = 99 + i,
					  .purge_permille = 250 } };

		ck_assert_int_eq(fd_pass_send(h[i].sock, &c, sizeof(c), -1), 0);
	}
	{
		struct work_cfg c = { .id = 0, .nprocs = nprocs, .slices = slices,
				      .slice_pages = slice_pages, .steps = stress_steps(),
				      .seed = 98, .purge_permille = 250 };

		memset(&mine, 0, sizeof(mine));
		work(r, &c, &mine, NULL);
		sum_add(&sum, &mine);
	}
	for (int i = 0; i < 3; i++) {
		struct reply rep;
		int rfd;

		ck_assert_int_eq(fd_pass_recv(h[i].sock, &rep, sizeof(rep), &rfd),
				 (ssize_t)sizeof(rep));
		ck_assert_int_eq(rep.ret, 0);
		sum.cycles += rep.sum.cycles;
		sum.intact += rep.sum.intact;
		sum.purged += rep.sum.purged;
		sum.violations += rep.sum.violations;
		sum.errors += rep.sum.errors;
		sum.purges += rep.sum.purges;
	}
	check_sum("stress over SCM_RIGHTS (1 pre-forked, 2 exec'd, 1 creator)", &sum);
	for (int i = 0; i < 3; i++)
		helper_stop(&h[i]);
	ck_assert_int_eq(vrange_is_volatile(r, 0, vrange_region_size(r)), 0);
	vrange_region_destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* SIGKILL mid-operation                                                     */

/*
 * Three children hammer mark/unmark/purge on one region, without end; the
 * test SIGKILLs one at a random moment and starts a fresh one in its place,
 * many times.  Every step of every child is bounded by alarm(): a process
 * wedged by a lock that a dead process held dies of SIGALRM, which fails the
 * case.  Counters live in shared memory, so a killed child's finished
 * cycles still count; a child killed mid-step only loses that step.
 */
START_TEST(sigkill_loop)
{
	const uint32_t nprocs = 3, slices = 24, slice_pages = 2;
	const int iterations = test_quick() ? 20 : 150;
	vrange_region *r = make_region((size_t)slices * slice_pages * ps, 0);
	struct shm {
		_Atomic int stop;
		struct work_res res;
	} *shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct work_sum sum = { 0 };
	pid_t pids[3];
	uint64_t rng = 0xdeadbeef;
	int kills = 0;

	ck_assert_ptr_ne(shm, MAP_FAILED);
	memset(shm, 0, sizeof(*shm));
	alarm(200);
	for (int it = -1; it < iterations; it++) {
		for (uint32_t i = 0; i < nprocs; i++) {
			struct work_cfg c = { .id = i, .nprocs = nprocs, .slices = slices,
					      .slice_pages = slice_pages, .steps = 0,
					      .seed = (uint64_t)it * 7 + i,
					      .purge_permille = 300, .use_alarm = 1 };

			if (it >= 0 && pids[i] > 0)
				continue;
			/* A fresh owner of slice set i: it starts from
			 * scratch, so leftover volatile slices of its dead
			 * predecessor are simply rewritten. */
			pids[i] = fork();
			ck_assert_int_ge(pids[i], 0);
			if (pids[i] == 0) {
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				work(r, &c, &shm->res, &shm->stop);
				_exit(0);
			}
		}
		if (it < 0)
			continue;
		{
			struct timespec ts = { 0, (long)(xorshift(&rng) % 3000000) };
			uint32_t victim = (uint32_t)(xorshift(&rng) % nprocs);
			int st;

			nanosleep(&ts, NULL);
			kill(pids[victim], SIGKILL);
			ck_assert_int_eq(waitpid(pids[victim], &st, 0), pids[victim]);
			ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
				      "worker ended with status 0x%x before the kill", st);
			pids[victim] = 0;
			kills++;
		}
		/* The test process itself keeps working meanwhile. */
		alarm(10);
		ck_assert_int_ge(vrange_is_volatile(r, 0, vrange_region_size(r)), 0);
		alarm(200);
	}
	atomic_store(&shm->stop, 1);
	for (uint32_t i = 0; i < nprocs; i++) {
		int st;

		if (pids[i] <= 0)
			continue;
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker ended with status 0x%x", st);
	}
	sum_add(&sum, &shm->res);
	printf("sigkill loop: %d kills, %llu steps\n", kills,
	       (unsigned long long)sum.steps);
	check_sum("sigkill loop (3 hammering processes)", &sum);
	/* After all that, the state works normally here.  Unmarked before it
	 * is written: a slice the workers left volatile and purged raises
	 * SIGBUS here too (contract 5: every process's region mappings). */
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, vrange_region_size(r)) >= 0, 1);
	memset(vrange_region_base(r), 0x77, vrange_region_size(r));
	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, ps), VRANGE_INTACT);
	ck_assert(all_bytes(vrange_region_base(r), vrange_region_size(r), 0x77));
	vrange_region_destroy(r);
}
END_TEST

/*
 * A process killed while it holds the shared lock (stopped there with
 * SIGSTOP first, so the moment is certain): the next caller elsewhere is not
 * wedged.  The holder is caught by stopping a child that spins on
 * mark/unmark at a random moment: it is inside the critical section a good
 * share of the time, and the case repeats many times.
 */
START_TEST(sigkill_lock_holder)
{
	vrange_region *r = make_region(64 * ps, 0);
	int rounds = test_quick() ? 10 : 40;

	memset(vrange_region_base(r), 0x11, 64 * ps);
	for (int i = 0; i < rounds; i++) {
		pid_t pid = fork();
		struct timespec t0, t1;
		int st;

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(30);
			for (size_t k = 0;; k = (k + 1) % 32) {
				vrange_mark_volatile(r, (32 + k) * ps, ps);
				vrange_mark_nonvolatile(r, (32 + k) * ps, ps);
			}
		}
		usleep(2000 + (unsigned int)(i * 373) % 5000);
		kill(pid, SIGSTOP);
		ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		alarm(10);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ck_assert_int_eq(vrange_mark_volatile(r, (size_t)(i % 32) * ps, ps), 0);
		ck_assert_int_ge(vrange_mark_nonvolatile(r, (size_t)(i % 32) * ps, ps), 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		alarm(0);
		/* Far less than the 5 s lock timeout: recovered, not timed out. */
		ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 2);
	}
	ck_assert(all_bytes(vrange_region_base(r), 32 * ps, 0x11));
	vrange_region_destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Recognition: library files join the shared state, foreign ones do not    */

START_TEST(recognise_library_file)
{
	vrange_region *r = make_region(3 * ps + 100, 0);
	struct stat st;
	struct helper h;

	alarm(60);
	ck_assert_int_eq(fstat(vrange_region_fd(r), &st), 0);
	/* The metadata is elsewhere: the file is the user's size, page-rounded. */
	ck_assert_int_eq(st.st_size, (off_t)(4 * ps));
	h = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h, vrange_region_fd(r), 0), 0);
	/* Adopt gives the user size, not st_size. */
	ck_assert_int_eq(helper_call(&h, OP_SIZE, 0, 0, 0), (int64_t)(4 * ps));
	/* The file layer sees the user size too: past it is out of range. */
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, 4 * ps, 1, 0), -EINVAL);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, 0, 4 * ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_MARK, 0, 4 * ps, 0), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 3 * ps, 1), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_INTACT);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 4 * ps, 0), 0);
	helper_stop(&h);
	vrange_region_destroy(r);
}
END_TEST

/*
 * A memfd the application made itself: its state belongs to the file
 * (contract 1) in every process that uses it - marks made in one are seen
 * in the other, a purge in one is reported VRANGE_PURGED in the other.
 * The file keeps its size and the application's own attributes.
 */
START_TEST(foreign_memfd_shared)
{
	int fd = memfd_create("foreign", MFD_CLOEXEC);
	vrange_region *r = NULL;
	struct helper h;
	struct stat st;
	char app[8] = { 0 };

	alarm(60);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(4 * ps)), 0);
	ck_assert_int_eq(fsetxattr(fd, "user.app", "mine", 4, 0), 0);
	/* ZERO: the purged pages are read below (SIGBUS mode would signal). */
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)(4 * ps));
	ck_assert_uint_eq(vrange_region_size(r), 4 * ps);
	h = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h, fd, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_SIZE, 0, 0, 0), (int64_t)(4 * ps));
	memset(vrange_region_base(r), 0x44, 4 * ps);

	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, ps, ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 2 * ps, 2 * ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_MARK, 2 * ps, ps, 0), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 2 * ps, ps), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 3 * ps, ps), 0);
	/* The helper's purge reaches every page the two marked. */
	ck_assert_int_ge(helper_call(&h, OP_PURGE, 0, 0, 0), (int64_t)(3 * ps));
	ck_assert(all_bytes(vrange_region_base(r), 3 * ps, 0));
	ck_assert(all_bytes((unsigned char *)vrange_region_base(r) + 3 * ps, ps, 0x44));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, ps), VRANGE_PURGED);
	ck_assert_int_eq(helper_call(&h, OP_UNMARK, ps, 2 * ps, 0), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_INTACT);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 4 * ps, 0), 0);
	helper_stop(&h);
	vrange_region_destroy(r);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)(4 * ps));
	ck_assert_int_eq(fgetxattr(fd, "user.app", app, sizeof(app)), 4);
	ck_assert_str_eq(app, "mine");
	close(fd);
}
END_TEST

/*
 * fork: parent and child share a foreign file's state.  The child purges
 * what the parent marked (through the file layer and through vrange() on
 * the parent's own mapping): the parent is told VRANGE_PURGED, never
 * VRANGE_INTACT over zeros.  What the child marks, the parent sees.
 */
START_TEST(foreign_fork_child_purges)
{
	int fd = memfd_create("foreign-fork", MFD_CLOEXEC), purged = -1, st;
	unsigned char *m;
	pid_t pid;

	alarm(60);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(4 * ps)), 0);
	m = mmap(NULL, 4 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 0x55, 4 * ps);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange(m + 2 * ps, ps, VRANGE_VOLATILE, NULL), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		ssize_t got = vrange_purge(SIZE_MAX);

		if (vrange_fd_mark_volatile(fd, (off_t)(3 * ps), (off_t)ps) < 0)
			_exit(2);
		_exit(got >= (ssize_t)(3 * ps) ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(3 * ps), (off_t)ps), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange(m + ps, 2 * ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	/* Read only now: while volatile, m (known to vrange()) would signal. */
	ck_assert(all_bytes(m, 3 * ps, 0));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(4 * ps)), VRANGE_INTACT);
	ck_assert(all_bytes(m + 3 * ps, ps, 0x55));
	munmap(m, 4 * ps);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
}
END_TEST

/* A /dev/shm file each process opens by its name shares one state. */
START_TEST(foreign_shm_name_two_processes)
{
	vrange_region *r = NULL;
	struct helper h;
	char name[64];
	int fd;

	alarm(60);
	foreign_shm_name(name, sizeof(name), getpid());
	fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_region_adopt(fd, 0, &r), 0);
	memset(vrange_region_base(r), 0x66, 2 * ps);
	h = helper_start(1);
	/* ZERO: the helper reads the purged pages (SIGBUS mode would signal). */
	ck_assert_int_eq(helper_call(&h, OP_OPEN_SHM, VRANGE_ACCESS_ZERO, 0, 0), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 2 * ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_MARK, ps, ps, 0), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)ps, (off_t)ps), 1);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(helper_call(&h, OP_CHECK, 0, 2 * ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_UNMARK, 0, ps, 0), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, ps), VRANGE_PURGED);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 2 * ps, 0), 0);
	helper_stop(&h);
	vrange_region_destroy(r);
	vrange_fd_forget(fd);
	unlink(name);
	close(fd);
}
END_TEST

/*
 * A foreign file's state grows with it: the file is enlarged after
 * another process attached, and marked in more pieces than its first
 * arena holds.  The other process follows, and so does a new one.
 */
START_TEST(foreign_state_grows)
{
	const size_t npg = 20000;
	int fd = memfd_create("foreign-grow", MFD_CLOEXEC), st;
	struct helper h;
	pid_t pid;

	alarm(120);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	h = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h, fd, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, 0, ps, 0), 1);
	/* Larger, and marked every other page (untouched: costs nothing). */
	ck_assert_int_eq(ftruncate(fd, (off_t)(npg * ps)), 0);
	for (size_t i = 0; i < npg; i += 2)
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(i * ps), (off_t)ps), 0);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, (npg - 2) * ps, ps, 0), 1);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, (npg - 1) * ps, ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_FD_MARK, (npg - 1) * ps, ps, 0), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)((npg - 1) * ps), (off_t)ps), 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(vrange_fd_is_volatile(fd, (off_t)((npg - 3) * ps), (off_t)ps) == 0 &&
		      vrange_fd_is_volatile(fd, (off_t)((npg - 4) * ps), (off_t)ps) == 1 &&
		      vrange_fd_mark_volatile(fd, (off_t)((npg - 3) * ps), (off_t)ps) == 0
			      ? 0 : 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, (npg - 3) * ps, ps, 0), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(npg * ps)), VRANGE_INTACT);
	ck_assert_int_eq(helper_call(&h, OP_FD_ISVOL, 0, npg * ps, 0), 0);
	helper_stop(&h);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
}
END_TEST

/*
 * Where the file takes no attribute (here: a tmpfs with no room left for
 * one), a foreign file keeps process-local state, as documented: it works
 * within the process, carries no attribute, and another process does not
 * see its marks.
 */
START_TEST(foreign_xattr_refused_local)
{
	char dir[] = "/tmp/vrange-noxattr-XXXXXX", path[96], xa[8];
	struct helper h;
	unsigned char *m;
	int fd;

	h = helper_start(1); /* in the real mount namespace (see no_named_files) */
	if (!mkdtemp(dir)) {
		helper_stop(&h);
		TEST_SKIP("mkdtemp: %s", strerror(errno));
	}
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "nr_inodes=2,size=1m") < 0) {
		helper_stop(&h);
		rmdir(dir);
		TEST_SKIP("cannot mount a private tmpfs: %s", strerror(errno));
	}
	alarm(60);
	snprintf(path, sizeof(path), "%s/f", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	if (fsetxattr(fd, "user.probe", "x", 1, 0) == 0 || errno != ENOSPC) {
		helper_stop(&h);
		TEST_SKIP("this tmpfs still takes an xattr");
	}
	ck_assert_int_eq(ftruncate(fd, (off_t)(2 * ps)), 0);
	m = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 0x77, 2 * ps);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(fgetxattr(fd, "user.vrange", xa, sizeof(xa)), -1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)ps), 1);
	ck_assert_int_eq(helper_adopt(&h, fd, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, 0, 2 * ps, 0), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(all_bytes(m, 2 * ps, 0));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)), VRANGE_PURGED);
	helper_stop(&h);
	munmap(m, 2 * ps);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* User-visible size                                                         */

START_TEST(user_size_unchanged)
{
	const size_t sizes[] = { 1, ps - 1, ps, ps + 1, 5 * ps, 1u << 20 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t want = (sizes[i] + ps - 1) / ps * ps;
		vrange_region *r = make_region(sizes[i], 0), *a = NULL;
		unsigned char *base = vrange_region_base(r), *m;
		int fd = vrange_region_fd(r);
		struct stat st;

		ck_assert_uint_eq(vrange_region_size(r), want);
		ck_assert_int_eq(fstat(fd, &st), 0);
		ck_assert_int_eq(st.st_size, (off_t)want);
		/* The whole user range is usable through the region ... */
		memset(base, 0xa5, want);
		ck_assert_int_eq(vrange_mark_volatile(r, 0, want), 0);
		ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, want), VRANGE_INTACT);
		ck_assert_int_eq(vrange_mark_volatile(r, want - ps, ps + 1), -EINVAL);
		/* ... and through an mmap of [0, size) of the fd. */
		m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		ck_assert_ptr_ne(m, MAP_FAILED);
		ck_assert(all_bytes(m, want, 0xa5));
		m[want - 1] = 0x5a;
		ck_assert_int_eq(base[want - 1], 0x5a);
		munmap(m, want);
		/* Adopting it in this process gives the user size as well. */
		ck_assert_int_eq(vrange_region_adopt(fd, 0, &a), 0);
		ck_assert_uint_eq(vrange_region_size(a), want);
		ck_assert_int_eq(((unsigned char *)vrange_region_base(a))[want - 1], 0x5a);
		/* Same file: same state. */
		ck_assert_int_eq(vrange_mark_volatile(a, 0, ps), 0);
		ck_assert_int_eq(vrange_is_volatile(r, 0, 1), 1);
		ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, ps), VRANGE_INTACT);
		vrange_region_destroy(a);
		vrange_region_destroy(r);
	}
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Nobody gets in: no named files                                            */

static size_t list_dir(const char *path, char names[][64], size_t max)
{
	DIR *d = opendir(path);
	struct dirent *e;
	size_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(names[n++], 64, "%.63s", e->d_name);
	}
	closedir(d);
	return n;
}

/*
 * In a private mount namespace with empty tmpfs mounts on /tmp and /dev/shm
 * (so other test programs running meanwhile cannot disturb the listing), a
 * region's whole life leaves both empty, and every descriptor the library
 * holds is an anonymous memfd or an anon inode, never a named file.
 */
START_TEST(no_named_files)
{
	static char names[64][64];
	uint64_t before[16] = { 0 };
	char path[64], link[256];
	vrange_region *r, *a = NULL;
	struct helper h;
	DIR *d;
	struct dirent *e;
	int fd;

	/*
	 * The helper starts first, in the real mount namespace: the build (its
	 * library) may itself live under /tmp, which the empty tmpfs hides.
	 */
	h = helper_start(1);
	if (unshare(CLONE_NEWNS) < 0) {
		helper_stop(&h);
		TEST_SKIP("unshare(CLONE_NEWNS): %s", strerror(errno));
	}
	if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") < 0 ||
	    mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777") < 0) {
		helper_stop(&h);
		TEST_SKIP("cannot mount private tmpfs: %s", strerror(errno));
	}
	setenv("TMPDIR", "/tmp", 1);
	alarm(60);
	/* Descriptors open before the library is used (Check's own). */
	for (fd = 0; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			before[fd / 64] |= 1ull << (fd % 64);
	r = make_region(16 * ps, 0);
	memset(vrange_region_base(r), 1, 16 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 8 * ps), 0);
	ck_assert_int_ge(vrange_purge(4 * ps), 0);
	ck_assert_int_eq(vrange_region_adopt(vrange_region_fd(r), 0, &a), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(vrange_region_fd(r), 0, (off_t)ps), 0);
	ck_assert_int_eq(helper_adopt(&h, vrange_region_fd(r), 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_MARK, 8 * ps, ps, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_PURGE, 0, 0, 0) >= 0, 1);
	ck_assert_uint_eq(list_dir("/tmp", names, 64), 0);
	ck_assert_uint_eq(list_dir("/dev/shm", names, 64), 0);
	/* Every descriptor here: ours (std streams, the socket) or anonymous. */
	d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		fd = atoi(e->d_name);
		if (fd == h.sock || fd == dirfd(d) ||
		    (fd < 1024 && (before[fd / 64] >> (fd % 64)) & 1))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%.32s", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = 0;
		ck_assert_msg(!strncmp(link, "/memfd:", 7) || !strncmp(link, "anon_inode:", 11) ||
			      !strncmp(link, "pipe:", 5) || !strncmp(link, "socket:", 7),
			      "descriptor %d is %s", fd, link);
	}
	closedir(d);
	helper_stop(&h);
	vrange_region_destroy(a);
	vrange_region_destroy(r);
	ck_assert_uint_eq(list_dir("/tmp", names, 64), 0);
	ck_assert_uint_eq(list_dir("/dev/shm", names, 64), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Hostile metadata                                                          */

/*
 * Where the metadata is (shared_file.h): a companion memfd, named by the
 * attribute user.vrange on the region's file (its device and inode, and the
 * processes holding it: pid and descriptor).  Layout of the attribute and of
 * the metadata file's header as in shared_file.c; the tests use them only to
 * find what to scribble on.
 */
#define XA_MAX_HOLDERS 16
struct xa {
	char magic[8];
	uint32_t version;
	uint32_t nholders;
	uint64_t user_size;
	uint64_t meta_dev, meta_ino;
	struct {
		int32_t pid, fd;
	} h[XA_MAX_HOLDERS];
};
/* Bytes of the header before the lock: magic, version, page size, sizes. */
#define HDR_LOCK_OFF 40
#define LOCK_AREA 80

struct meta {
	int user_fd;    /* the region's file */
	int meta_fd;    /* the metadata file, opened afresh */
	off_t arena_len;
	off_t hdr;      /* offset of the header page in the metadata file */
	size_t user;
	struct xa xa;   /* the attribute as it was */
	ssize_t xa_len;
};

static struct meta find_meta(int user_fd, size_t user)
{
	struct meta m = { .user_fd = user_fd, .meta_fd = -1, .user = user };
	struct stat st;
	DIR *d;
	struct dirent *e;

	m.xa_len = fgetxattr(user_fd, "user.vrange", &m.xa, sizeof(m.xa));
	ck_assert_msg(m.xa_len > 0, "no user.vrange attribute: %s", strerror(errno));
	d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) && m.meta_fd < 0) {
		char path[64];
		int fd = atoi(e->d_name);

		if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) < 0)
			continue;
		if ((uint64_t)st.st_dev != m.xa.meta_dev || (uint64_t)st.st_ino != m.xa.meta_ino)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		m.meta_fd = open(path, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	ck_assert_int_ge(m.meta_fd, 0);
	ck_assert_int_eq(fstat(m.meta_fd, &st), 0);
	m.hdr = st.st_size - (off_t)ps;
	m.arena_len = m.hdr;
	ck_assert_int_gt(m.arena_len, 0);
	return m;
}

/* A return value of a marking or query call: 0/1 or -errno. */
static int valid_ret(long long r)
{
	return r == 0 || r == 1 || (r < 0 && r > -4096);
}

/*
 * Every entry point on a region whose metadata may be hostile: each must
 * return a valid value (else exit 10 + the call), none may crash or hang
 * (the caller's alarm).  Runs in a victim process, outside Check.
 */
static void exercise(vrange_region *r, int fd, size_t size)
{
	size_t offs[] = { 0, ps, 3 * ps, size - ps };
	struct vrange_stats st;

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		long long v[6];

		v[0] = vrange_mark_volatile(r, offs[i], 2 * ps < size - offs[i] ?
					    2 * ps : size - offs[i]);
		v[1] = vrange_is_volatile(r, offs[i], ps);
		v[2] = vrange_fd_is_volatile(fd, (off_t)offs[i], (off_t)ps);
		v[3] = vrange_purge(ps) >= 0 ? 0 : -1;
		v[4] = vrange_mark_nonvolatile(r, offs[i], ps);
		v[5] = vrange_fd_mark_volatile(fd, 0, (off_t)size);
		for (int k = 0; k < 6; k++)
			if (!valid_ret(v[k]))
				_exit(10 + k);
	}
	if (vrange_region_purge(r) <= -4096)
		_exit(20);
	if (vrange_get_stats(&st) != 0)
		_exit(21);
	if (!valid_ret(vrange_mark_nonvolatile(r, 0, size)))
		_exit(22);
}

/* Adopt, then read every page the region claims: no SIGBUS past the file. */
static vrange_region *adopt_and_touch(int fd)
{
	vrange_region *r = NULL;
	struct stat st;
	volatile unsigned char *p;
	int ret = vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r);

	if (ret < 0) {
		if (ret <= -4096)
			_exit(5);
		return NULL;
	}
	if (fstat(fd, &st) < 0 || vrange_region_size(r) > (size_t)st.st_size)
		_exit(6);
	p = vrange_region_base(r);
	for (size_t i = 0; i < vrange_region_size(r); i += ps)
		(void)p[i];
	return r;
}

/*
 * The victim: a fresh copy of this binary (no library state, and none of
 * the test process's locks: see fork_then_adopt_works for why a plain fork
 * would not do) that writes the hostile bytes, before or after it attaches,
 * then calls everything.  Arguments in the environment:
 * VRANGE_TEST_VICTIM="user_fd meta_fd where offset after hex", where
 * "where" is m (metadata file), x (the attribute, whole) or p/q (a lock
 * word naming this process / its parent, at offset).
 */
static void victim_main(void)
{
	const char *a = getenv("VRANGE_TEST_VICTIM");
	int user_fd, meta_fd, after, pos = 0;
	char where;
	long long at;
	unsigned char bytes[4096];
	size_t n = 0;
	vrange_region *r = NULL;

	if (!a || sscanf(a, "%d %d %c %lld %d %n", &user_fd, &meta_fd, &where, &at,
			 &after, &pos) < 5)
		_exit(2);
	for (const char *h = a + pos; h[0] && h[1] && n < sizeof(bytes); h += 2) {
		unsigned int v;

		if (sscanf(h, "%2x", &v) != 1)
			_exit(2);
		bytes[n++] = (unsigned char)v;
	}
	if (where == 'p' || where == 'q') {
		uint32_t w = (uint32_t)(where == 'p' ? getpid() : getppid());

		memcpy(bytes, &w, 4);
		n = 4;
	}
	if (after && !(r = adopt_and_touch(user_fd)))
		_exit(3);
	if (where == 'x') {
		if (fsetxattr(user_fd, "user.vrange", bytes, n, 0) < 0)
			_exit(4);
	} else if (pwrite(meta_fd, bytes, n, (off_t)at) != (ssize_t)n) {
		_exit(4);
	}
	if (!after && !(r = adopt_and_touch(user_fd)))
		_exit(0);
	exercise(r, user_fd, vrange_region_size(r));
	vrange_region_destroy(r);
	_exit(0);
}

/* Start a victim (see victim_main); its pid. */
static pid_t victim_start(const struct meta *m, char where, off_t at, const void *bytes,
			  size_t n, int after_attach, unsigned int alarm_s)
{
	size_t len = 64 + 2 * n;
	char *arg = malloc(len);
	pid_t pid;
	int k;

	ck_assert_ptr_nonnull(arg);
	k = snprintf(arg, len, "%d %d %c %lld %d ", m->user_fd, m->meta_fd, where,
		     (long long)at, after_attach);
	for (size_t i = 0; i < n; i++)
		k += snprintf(arg + k, len - (size_t)k, "%02x", ((const unsigned char *)bytes)[i]);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (fcntl(m->user_fd, F_SETFD, 0) < 0 || fcntl(m->meta_fd, F_SETFD, 0) < 0)
			_exit(126);
		setenv(HELPER_ENV, "v", 1);
		setenv("VRANGE_TEST_VICTIM", arg, 1);
		alarm(alarm_s); /* survives exec */
		execl("/proc/self/exe", "test-shared-victim", (char *)NULL);
		_exit(127);
	}
	free(arg);
	return pid;
}

static void victim_wait(pid_t pid, const char *what, long long at, size_t n, int after)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "%s at %lld (%zu bytes, %s attach): status 0x%x%s", what, at, n,
		      after ? "after" : "before", st,
		      WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (hang)" : "");
}

/* Run one mutation of the metadata file in a victim, before or after attach. */
static void mutate_in_child(const struct meta *m, off_t at, const void *bytes,
			    size_t n, int after_attach, unsigned int alarm_s)
{
	pid_t pid = victim_start(m, 'm', at, bytes, n, after_attach, alarm_s);

	victim_wait(pid, "metadata mutation", (long long)at, n, after_attach);
}

/*
 * A library file with a few ranges in it, and no library state for it in
 * this process (the region is destroyed), so that children attach afresh;
 * this process keeps the metadata alive at the descriptor number the
 * attribute names, as the region had it.  *pristine gets the metadata.
 */
static struct meta hostile_setup(size_t npages, unsigned char **pristine)
{
	vrange_region *r = make_region(npages * ps, VRANGE_ACCESS_ZERO);
	int fd = dup(vrange_region_fd(r));
	struct meta m;
	int holder_fd = -1;

	ck_assert_int_ge(fd, 0);
	memset(vrange_region_base(r), 0x3c, npages * ps);
	for (size_t i = 0; i < npages; i += 3)
		ck_assert_int_eq(vrange_mark_volatile(r, i * ps, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, ps), 0);
	ck_assert_int_eq(vrange_region_purge(r) > 0, 1);
	ck_assert_int_eq(vrange_mark_volatile(r, 4 * ps, 2 * ps), 0);
	m = find_meta(fd, npages * ps);
	for (uint32_t i = 0; i < m.xa.nholders && i < XA_MAX_HOLDERS; i++)
		if (m.xa.h[i].pid == getpid())
			holder_fd = m.xa.h[i].fd;
	ck_assert_int_ge(holder_fd, 0);
	vrange_region_destroy(r);
	ck_assert_int_eq(dup3(m.meta_fd, holder_fd, O_CLOEXEC), holder_fd);
	*pristine = malloc((size_t)(m.hdr + (off_t)ps));
	ck_assert_ptr_nonnull(*pristine);
	ck_assert_int_eq(pread(m.meta_fd, *pristine, (size_t)(m.hdr + (off_t)ps), 0),
			 m.hdr + (off_t)ps);
	return m;
}

static void restore(const struct meta *m, const unsigned char *pristine)
{
	ck_assert_int_eq(pwrite(m->meta_fd, pristine, (size_t)(m->hdr + (off_t)ps), 0),
			 m->hdr + (off_t)ps);
	ck_assert_int_eq(fsetxattr(m->user_fd, "user.vrange", &m->xa, (size_t)m->xa_len, 0), 0);
}

/*
 * Word by word over the part of the arena in use (its header and the first
 * nodes): out-of-range indexes, small indexes (cycles, a node its own child,
 * links into free slots), and random words; each in a child before it
 * attaches or after.
 */
START_TEST(hostile_arena_words)
{
	const size_t npages = 16;
	const uint32_t vals[] = { 0xffffffffu, 0x7fffffffu, 1, 2, 3, 0 };
	unsigned int stride = test_quick() ? 3 : 1;
	unsigned char *pristine;
	struct meta m = hostile_setup(npages, &pristine);
	uint64_t rng = 42;
	size_t words = 1024 / 4, runs = 0;

	for (size_t w = 0; w < words; w += stride) {
		for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]); k++) {
			uint32_t v = vals[k], old;

			memcpy(&old, pristine + w * 4, 4);
			if (k == 5)
				v = (uint32_t)xorshift(&rng);
			if (v == old)
				continue;
			mutate_in_child(&m, (off_t)(w * 4), &v, 4, (int)((w + k) & 1), 20);
			restore(&m, pristine);
			runs++;
		}
	}
	printf("hostile arena words: %zu mutations survived\n", runs);
	free(pristine);
}
END_TEST

/* Random bytes over the arena, the header's fields, or everything. */
START_TEST(hostile_random_blocks)
{
	const size_t npages = 16;
	unsigned char *pristine, *junk;
	struct meta m = hostile_setup(npages, &pristine);
	uint64_t rng = 7;
	int rounds = test_quick() ? 20 : 100;

	junk = malloc((size_t)(m.hdr + (off_t)ps));
	ck_assert_ptr_nonnull(junk);
	for (int i = 0; i < rounds; i++) {
		size_t n = (size_t)(m.hdr + (off_t)ps);
		off_t at = 0;

		for (size_t k = 0; k + 8 <= n; k += 8) {
			uint64_t v = xorshift(&rng);

			memcpy(junk + k, &v, 8);
		}
		switch (i % 4) {
		case 0: /* the arena's first page */
			n = ps;
			break;
		case 1: /* the header's fields, keeping the magic, not the lock */
			memcpy(junk, pristine + m.hdr, 16);
			at = m.hdr;
			n = HDR_LOCK_OFF;
			break;
		case 2: /* one random stretch of the arena's header and nodes */
			at = (off_t)(xorshift(&rng) % 512);
			n = 1 + xorshift(&rng) % 64;
			break;
		default: /* the arena, all of it */
			n = (size_t)m.hdr;
			break;
		}
		mutate_in_child(&m, at, junk, n, i & 1, 30);
		restore(&m, pristine);
	}
	free(junk);
	free(pristine);
}
END_TEST

/*
 * The attribute: malformed, too many holders, holders that are dead, not
 * the metadata, or this very file; a user size that is not the file's.
 * Adopting may fail (-errno) or make the file foreign; it may not crash,
 * hang, or give a region larger than the file (touching it would SIGBUS).
 */
/*
 * A foreign file's metadata names its arena's present size in its header
 * (page 0 of the metadata file; offsets as in shared_file.c): a size that
 * shrinks, or that the file does not hold, is -EIO for this process and
 * for one that attaches - never a crash - and the file works again once
 * the header is right.
 */
#define FOREIGN_CUR_ARENA_OFF 56
START_TEST(foreign_hostile_arena_size)
{
	int fd = memfd_create("foreign-hostile", MFD_CLOEXEC), mfd = -1;
	uint64_t good, bad[3];
	struct xa x;
	struct stat st;
	struct helper h;
	DIR *d;
	struct dirent *e;

	alarm(60);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(4 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_gt(fgetxattr(fd, "user.vrange", &x, sizeof(x)), 0);
	ck_assert_uint_eq(x.user_size, 0); /* a foreign file's: its own size */
	d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) && mfd < 0) {
		char path[64];
		int n = atoi(e->d_name);

		if (e->d_name[0] == '.' || n == dirfd(d) || fstat(n, &st) < 0 ||
		    (uint64_t)st.st_dev != x.meta_dev || (uint64_t)st.st_ino != x.meta_ino)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", n);
		mfd = open(path, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	ck_assert_int_ge(mfd, 0);
	ck_assert_int_eq(pread(mfd, &good, sizeof(good), FOREIGN_CUR_ARENA_OFF),
			 (ssize_t)sizeof(good));
	ck_assert_int_eq(fstat(mfd, &st), 0);
	ck_assert_uint_eq(good + ps, (uint64_t)st.st_size);
	bad[0] = good / 2;                /* shrinks */
	bad[1] = good * 2;                /* more than the file holds */
	bad[2] = UINT64_MAX - ps + 1;     /* absurd */
	h = helper_start(1);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(pwrite(mfd, &bad[i], sizeof(bad[i]), FOREIGN_CUR_ARENA_OFF),
				 (ssize_t)sizeof(bad[i]));
		ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)ps), -EIO);
		ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), -EIO);
		if (i == 0)
			ck_assert_int_eq(helper_adopt(&h, fd, 0), -EIO);
		ck_assert_int_eq(pwrite(mfd, &good, sizeof(good), FOREIGN_CUR_ARENA_OFF),
				 (ssize_t)sizeof(good));
		ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)ps), 1);
	}
	ck_assert_int_eq(helper_adopt(&h, fd, 0), 0);
	ck_assert_int_eq(helper_call(&h, OP_ISVOL, ps, ps, 0), 1);
	helper_stop(&h);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(4 * ps)), VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(mfd);
	close(fd);
}
END_TEST

START_TEST(hostile_xattr)
{
	const size_t npages = 8;
	unsigned char *pristine;
	struct meta m = hostile_setup(npages, &pristine);
	uint64_t rng = 99;

	for (int v = 0; v < 12; v++) {
		struct xa x = m.xa;
		size_t len = (size_t)m.xa_len;
		pid_t pid;
		struct stat ust;

		ck_assert_int_eq(fstat(m.user_fd, &ust), 0);
		switch (v) {
		case 0: /* random bytes, right length */
			for (size_t k = 0; k < len; k++)
				((unsigned char *)&x)[k] = (unsigned char)xorshift(&rng);
			break;
		case 1: /* random bytes, keeping the magic and version */
			for (size_t k = 16; k < len; k++)
				((unsigned char *)&x)[k] = (unsigned char)xorshift(&rng);
			break;
		case 2:
			x.nholders = 0xffffffffu;
			break;
		case 3:
			len = 10;
			break;
		case 4: /* a holder that does not exist */
			x.h[0].pid = 0x3ffffe;
			x.nholders = 1;
			break;
		case 5: /* a holder descriptor that is not the metadata */
			x.h[0].pid = getpid();
			x.h[0].fd = 0;
			x.nholders = 1;
			break;
		case 6: /* "the metadata is the user's file itself" */
			x.h[0].pid = getpid();
			x.h[0].fd = m.user_fd;
			x.nholders = 1;
			x.meta_dev = (uint64_t)ust.st_dev;
			x.meta_ino = (uint64_t)ust.st_ino;
			break;
		case 7: /* a user size far past the file */
			x.user_size = 1ull << 40;
			break;
		case 8: /* a user size past the file by a page */
			x.user_size += ps;
			break;
		case 9: /* a user size shorter than the file */
			x.user_size = 1;
			break;
		case 10: /* a user size of zero */
			x.user_size = 0;
			break;
		default: /* negative descriptors and pids */
			x.h[0].pid = -1;
			x.h[0].fd = -5;
			break;
		}
		pid = victim_start(&m, 'x', 0, &x, len, 0, 30);
		victim_wait(pid, "attribute variant", v, len, 0);
		restore(&m, pristine);
	}
	free(pristine);
}
END_TEST

/*
 * The lock itself: garbage over it, before attach.  Calls may wait for the
 * bounded lock timeout and then say -EIO; they may not hang or crash.  The
 * variants run in parallel (each on its own region) so the case takes about
 * one timeout, not one per variant.
 */
START_TEST(hostile_lock_word)
{
	enum { NV = 5 };
	struct meta m[NV];
	unsigned char *pristine[NV];
	pid_t pids[NV];

	for (int v = 0; v < NV; v++)
		m[v] = hostile_setup(8, &pristine[v]);
	for (int v = 0; v < NV; v++) {
		unsigned char lockbytes[LOCK_AREA];
		uint64_t rng = 1000 + (uint64_t)v;
		uint32_t w = 0x3ffffe;
		char where = 'm';

		memset(lockbytes, 0, sizeof(lockbytes));
		switch (v) {
		case 0: /* random bytes */
			for (size_t k = 0; k < sizeof(lockbytes); k++)
				lockbytes[k] = (unsigned char)xorshift(&rng);
			break;
		case 1: /* all ones */
			memset(lockbytes, 0xff, sizeof(lockbytes));
			break;
		case 2: /* a lock word naming a pid that does not exist */
			memcpy(lockbytes, &w, 4);
			break;
		case 3: /* a lock word naming the victim itself */
			where = 'p';
			break;
		default: /* a lock word naming a live other process */
			where = 'q';
			break;
		}
		pids[v] = victim_start(&m[v], where, m[v].hdr + HDR_LOCK_OFF, lockbytes,
				       sizeof(lockbytes), 0, 60);
	}
	for (int v = 0; v < NV; v++) {
		victim_wait(pids[v], "lock variant", v, LOCK_AREA, 0);
		free(pristine[v]);
	}
}
END_TEST

/*
 * A hostile process keeps scribbling over the lock while an honest one
 * works: the honest one may get -EIO, but it must not crash (a lock whose
 * bookkeeping lives in the shared page must never make its holder write
 * through pointers found there), hang, or corrupt its own memory.
 */
START_TEST(hostile_live_scribbler)
{
	vrange_region *r = make_region(16 * ps, VRANGE_ACCESS_ZERO);
	struct meta m = find_meta(vrange_region_fd(r), 16 * ps);
	unsigned char *hdr = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_SHARED,
				  m.meta_fd, m.hdr);
	pid_t pid;
	int st;
	long long calls = 0, eio = 0;
	struct timespec t0, t1;

	ck_assert_ptr_ne(hdr, MAP_FAILED);
	memset(vrange_region_base(r), 0x12, 16 * ps);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The scribbler: random bytes over the lock, all the time;
		 * now and then a lock word of 0 so that the victim gets the
		 * lock and holds it while the rest is overwritten. */
		uint64_t rng = 5;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(30);
		for (;;) {
			uint64_t v = xorshift(&rng);

			memcpy(hdr + HDR_LOCK_OFF + 8 * (v % (LOCK_AREA / 8)), &v, 8);
			if (v % 4 == 0)
				memset(hdr + HDR_LOCK_OFF, 0, 4);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		int ret;

		alarm(20);
		ret = vrange_mark_volatile(r, (size_t)(calls % 15) * ps, ps);
		ck_assert_msg(valid_ret(ret), "mark returned %d", ret);
		eio += ret == -EIO;
		ret = vrange_mark_nonvolatile(r, (size_t)(calls % 15) * ps, ps);
		ck_assert_msg(valid_ret(ret), "unmark returned %d", ret);
		eio += ret == -EIO;
		calls += 2;
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while (t1.tv_sec - t0.tv_sec < (test_quick() ? 2 : 4));
	alarm(0);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	printf("live scribbler: %lld calls, %lld -EIO\n", calls, eio);
	/* Nothing was purged: all intact. */
	ck_assert(all_bytes(vrange_region_base(r), 15 * ps, 0x12));
	munmap(hdr, ps);
	vrange_region_destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Dead lock holders: zombies, reused thread ids, a wedge that ends          */

/* The thread id in the shared lock word (its low 30 bits), 0 if free. */
static uint32_t lock_owner(const unsigned char *hdr)
{
	uint32_t w;

	memcpy(&w, hdr + HDR_LOCK_OFF, sizeof(w));
	return w & 0x3fffffffu;
}

/*
 * A child of this process that spins on mark/unmark of r, stopped at a
 * moment it holds r's shared lock (found by stopping it at random moments
 * until the lock word names it).  Its pid; the header page is mapped at
 * *hdr.  With a stop flag, it leaves its loop once the flag is set, sets it
 * to 2 and idles.
 */
static pid_t stopped_lock_holder_flag(vrange_region *r, unsigned char **hdr,
				      _Atomic int *stop)
{
	size_t size = vrange_region_size(r);
	struct meta m = find_meta(vrange_region_fd(r), size);
	pid_t pid;
	int st;

	*hdr = mmap(NULL, ps, PROT_READ, MAP_SHARED, m.meta_fd, m.hdr);
	ck_assert_ptr_ne(*hdr, MAP_FAILED);
	close(m.meta_fd);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(60);
		/* Two pages: a single page's mark takes no lock. */
		for (size_t k = 0; !stop || !atomic_load(stop); k = (k + 1) % 7) {
			vrange_mark_volatile(r, (size / ps - 8 + k) * ps, 2 * ps);
			vrange_mark_nonvolatile(r, (size / ps - 8 + k) * ps, 2 * ps);
		}
		atomic_store(stop, 2);
		for (;;)
			pause();
	}
	for (int tries = 0; tries < 5000; tries++) {
		usleep(200 + (unsigned int)(tries * 379) % 2000);
		kill(pid, SIGSTOP);
		ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
		if (lock_owner(*hdr) == (uint32_t)pid)
			return pid;
		kill(pid, SIGCONT);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	ck_abort_msg("never caught the child holding the lock");
	return -1;
}

static pid_t stopped_lock_holder(vrange_region *r, unsigned char **hdr)
{
	return stopped_lock_holder_flag(r, hdr, NULL);
}

/* The state letter of /proc/<pid>/stat, or 0 when there is none. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/* SIGKILL pid and wait until it is a zombie, without reaping it. */
static void kill_to_zombie(pid_t pid)
{
	kill(pid, SIGKILL);
	for (int i = 0; i < 2000 && proc_state(pid) != 'Z'; i++)
		usleep(1000);
	ck_assert_int_eq(proc_state(pid), 'Z');
}

/*
 * A process killed while it holds the shared lock, and not yet reaped (a
 * zombie): other processes take the lock over at once.  kill(pid, 0)
 * succeeds on a zombie, so asking only that waits out the timeout, gives
 * -EIO, and wedged the file for good.  After the reap, calls still work.
 */
START_TEST(zombie_lock_holder)
{
	vrange_region *r = make_region(16 * ps, VRANGE_ACCESS_ZERO);
	unsigned char *hdr;

	memset(vrange_region_base(r), 0x5a, 16 * ps);
	for (int round = 0; round < 3; round++) {
		pid_t pid = stopped_lock_holder(r, &hdr);
		int st;

		kill_to_zombie(pid);
		alarm(20);
		ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
		/* (PURGED is allowed: a torn tree is reset to all purged.) */
		ck_assert_int_ge(vrange_mark_nonvolatile(r, 0, 4 * ps), 0);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
		ck_assert_int_ge(vrange_mark_nonvolatile(r, 0, ps), 0);
		alarm(0);
		munmap(hdr, ps);
	}
	ck_assert(all_bytes(vrange_region_base(r), 8 * ps, 0x5a));
	vrange_region_destroy(r);
}
END_TEST

/*
 * A live holder that does not let go within the timeout makes the call
 * -EIO, but only while that lasts: once the holder has let go, or is gone,
 * the next call works (a "wedged" file used to stay -EIO for good).
 */
START_TEST(wedge_ends_with_its_cause)
{
	vrange_region *r = make_region(16 * ps, VRANGE_ACCESS_ZERO);
	_Atomic int *stop = mmap(NULL, sizeof(*stop), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	unsigned char *hdr;
	pid_t pid;
	int st;

	ck_assert_ptr_ne(stop, MAP_FAILED);
	memset(vrange_region_base(r), 0x6b, 16 * ps);
	alarm(60);
	/* Stopped holding the lock; then it runs on, lets go and idles. */
	/* Two pages take the lock; a single page's word needs none, so it
	 * is marked and unmarked even now (page_words.h). */
	pid = stopped_lock_holder(r, &hdr);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), -EIO);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), -EIO);
	ck_assert_int_eq(vrange_mark_volatile(r, 4 * ps, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 4 * ps, ps), VRANGE_INTACT);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_ge(vrange_mark_nonvolatile(r, 0, 2 * ps), 0);
	munmap(hdr, ps);

	/* The same, with a holder that resumes and lets go by itself. */
	atomic_store(stop, 0);
	pid = stopped_lock_holder_flag(r, &hdr, stop);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), -EIO);
	atomic_store(stop, 1);
	kill(pid, SIGCONT);
	while (atomic_load(stop) != 2)
		usleep(1000);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 2 * ps), VRANGE_INTACT);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	alarm(0);
	munmap(hdr, ps);
	munmap((void *)stop, sizeof(*stop));
	ck_assert(all_bytes(vrange_region_base(r), 8 * ps, 0x6b));
	vrange_region_destroy(r);
}
END_TEST

#ifndef CLONE_ARGS_SIZE_VER1
#define CLONE_ARGS_SIZE_VER1 80
#endif

/* A sleeping child with exactly this pid (clone3 set_tid), or -errno. */
static pid_t child_with_pid(pid_t want)
{
	struct {
		uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
			stack_size, tls, set_tid, set_tid_size;
	} args = { .exit_signal = SIGCHLD };
	pid_t tid = want;
	long r;

	args.set_tid = (uint64_t)(uintptr_t)&tid;
	args.set_tid_size = 1;
	r = syscall(SYS_clone3, &args, (size_t)CLONE_ARGS_SIZE_VER1);
	if (r == 0) {
		for (;;)
			pause();
	}
	return r < 0 ? -errno : (pid_t)r;
}

/*
 * The lock's owner died and was reaped, and its thread id now names
 * another, live, process: the owner is still gone.  Asking only "does this
 * id exist" waits out the timeout and gives -EIO.
 */
START_TEST(reused_tid_lock_holder)
{
	vrange_region *r = make_region(16 * ps, VRANGE_ACCESS_ZERO);
	unsigned char *hdr;
	pid_t pid, other = -1;
	int st;

	memset(vrange_region_base(r), 0x7c, 16 * ps);
	alarm(60);
	pid = stopped_lock_holder(r, &hdr);
	/* Start times are kept in clock ticks (10 ms): let the owner have
	 * lived longer than that, as any thread whose id wrapped around has. */
	usleep(30 * 1000);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	/* The kernel may hand the id out again only once the task is freed. */
	for (int i = 0; i < 200; i++) {
		other = child_with_pid(pid);
		if (other != -EEXIST && other != -EBUSY)
			break;
		usleep(5000);
	}
	if (other < 0) {
		munmap(hdr, ps);
		vrange_region_destroy(r);
		TEST_SKIP("cannot create a process with a chosen pid: %s",
			  strerror(-other));
	}
	ck_assert_int_eq(other, pid);
	ck_assert_int_eq(lock_owner(hdr), (uint32_t)pid);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_ge(vrange_mark_nonvolatile(r, 0, ps), 0);
	alarm(0);
	kill(other, SIGKILL);
	ck_assert_int_eq(waitpid(other, &st, 0), other);
	munmap(hdr, ps);
	ck_assert(all_bytes(vrange_region_base(r), 8 * ps, 0x7c));
	vrange_region_destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Holders: the shared state outlives the process that created it            */

/*
 * The creator hands the region on and exits before anyone else adopts it:
 * two processes that adopt it afterwards must still share one state.
 */
START_TEST(orphaned_file_stays_shared)
{
	int sv[2], fd, st;
	pid_t pid;
	struct helper h1, h2;
	char b;

	alarm(60);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		vrange_region *r = NULL;

		if (vrange_region_create("orphan", 4 * ps, 0, &r) < 0)
			_exit(3);
		memset(vrange_region_base(r), 0x19, 4 * ps);
		fd_pass_send(sv[1], "x", 1, vrange_region_fd(r));
		vrange_region_destroy(r);
		_exit(0);
	}
	close(sv[1]);
	ck_assert_int_eq(fd_pass_recv(sv[0], &b, 1, &fd), 1);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	h1 = helper_start(1);
	h2 = helper_start(1);
	ck_assert_int_eq(helper_adopt(&h1, fd, 0), 0);
	ck_assert_int_eq(helper_adopt(&h2, fd, 0), 0);
	ck_assert_int_eq(helper_call(&h1, OP_MARK, 0, 2 * ps, 0), 0);
	ck_assert_int_eq(helper_call(&h2, OP_ISVOL, 0, ps, 0), 1);
	ck_assert_int_eq(helper_call(&h2, OP_PURGE, 0, 0, 0), (int64_t)(2 * ps));
	ck_assert_int_eq(helper_call(&h1, OP_UNMARK, 0, 2 * ps, 0), VRANGE_PURGED);
	helper_stop(&h1);
	helper_stop(&h2);
	close(fd);
	close(sv[0]);
}
END_TEST

/*
 * A child forked from the creator shares the creator's state; when the
 * creator exits, a process that adopts the file afterwards must join that
 * same state, not start a private one (the child would then be unprotected
 * against its purges).
 */
START_TEST(forked_child_keeps_state_reachable)
{
	int sv[2], cv[2], fd, st;
	pid_t pid;
	vrange_region *r = NULL;
	struct helper child;
	char b;

	alarm(60);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, cv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		vrange_region *cr = NULL;
		pid_t c;

		if (vrange_region_create("forked", 4 * ps, 0, &cr) < 0)
			_exit(3);
		memset(vrange_region_base(cr), 0x29, 4 * ps);
		c = fork();
		if (c < 0)
			_exit(4);
		if (c == 0) {
			/* The creator's child: it serves commands, and
			 * adopts the fd it inherited (same file, same state). */
			close(sv[1]);
			prctl(PR_SET_PDEATHSIG, 0);
			_exit(serve(cv[1]));
		}
		fd_pass_send(sv[1], &c, sizeof(c), vrange_region_fd(cr));
		_exit(0);
	}
	close(sv[1]);
	close(cv[1]);
	{
		pid_t c;

		ck_assert_int_eq(fd_pass_recv(sv[0], &c, sizeof(c), &fd), (ssize_t)sizeof(c));
		child.pid = c;
	}
	child.sock = cv[0];
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	/* The child is not ours (its parent exited): helper_stop's waitpid
	 * would fail, so stop it by hand below. */
	ck_assert_int_eq(helper_adopt(&child, fd, 0), 0);
	ck_assert_int_eq(vrange_region_adopt(fd, 0, &r), 0);
	ck_assert_int_eq(helper_call(&child, OP_MARK, 0, 2 * ps, 0), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 1);
	ck_assert_int_eq(vrange_mark_volatile(r, 3 * ps, ps), 0);
	ck_assert_int_eq(helper_call(&child, OP_ISVOL, 3 * ps, ps, 0), 1);
	ck_assert_int_eq(helper_call(&child, OP_UNMARK, 0, 4 * ps, 0), VRANGE_INTACT);
	ck_assert_int_eq(helper_call(&child, OP_CHECK, 0, 4 * ps, 0x29), 1);
	{
		struct cmd cm = { .op = OP_EXIT };

		fd_pass_send(child.sock, &cm, sizeof(cm), -1);
		close(child.sock);
	}
	vrange_region_destroy(r);
	close(fd);
	(void)b;
}
END_TEST

/*
 * The holder list names processes by pid and descriptor.  A holder that
 * died but is not reaped yet (its pid still exists) no longer holds the
 * metadata: the next registration drops it, so the 16 slots stay for
 * processes that really hold the state.
 */
START_TEST(zombie_holders_dropped)
{
	vrange_region *r = make_region(4 * ps, VRANGE_ACCESS_ZERO);
	int fd = vrange_region_fd(r), st;
	pid_t z[3], last;
	struct xa x;
	ssize_t n;

	for (int i = 0; i < 3; i++) {
		z[i] = fork();
		ck_assert_int_ge(z[i], 0);
		if (z[i] == 0)
			_exit(0); /* registered by the fork handler, then gone */
		kill_to_zombie(z[i]);
	}
	last = fork();
	ck_assert_int_ge(last, 0);
	if (last == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(last, &st, 0), last);
	n = fgetxattr(fd, "user.vrange", &x, sizeof(x));
	ck_assert_int_gt(n, 0);
	for (uint32_t i = 0; i < x.nholders && i < XA_MAX_HOLDERS; i++)
		for (int k = 0; k < 3; k++)
			ck_assert_msg(x.h[i].pid != z[k], "zombie %d still a holder",
				      (int)z[k]);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(waitpid(z[k], &st, 0), z[k]);
	vrange_region_destroy(r);
}
END_TEST

/* VRANGE_TEST_ONLY=name runs just that case (for debugging). */
static void add_test(TCase *tc, const TTest *t, const char *name)
{
	const char *only = getenv("VRANGE_TEST_ONLY");

	if (!only || !strcmp(only, name))
		tcase_add_test(tc, t);
}
#define ADD(tc, fn) add_test(tc, fn, #fn)


Suite *test_suite(void)
{
	Suite *s = suite_create("shared");
	TCase *tc;

	tc = tcase_create("visibility");
	tcase_add_checked_fixture(tc, setup, NULL);
	ADD(tc, marks_seen_across_exec);
	tcase_add_test(tc, purge_elsewhere_reported);
	tcase_add_test(tc, purged_then_reclaimed_elsewhere_reads_fine);
	suite_add_tcase(s, tc);

	tc = tcase_create("stress");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 240);
	ADD(tc, stress_fork);
	ADD(tc, stress_scm_rights);
	ADD(tc, sigkill_loop);
	ADD(tc, sigkill_lock_holder);
	ADD(tc, zombie_lock_holder);
	ADD(tc, wedge_ends_with_its_cause);
	ADD(tc, reused_tid_lock_holder);
	suite_add_tcase(s, tc);

	tc = tcase_create("recognition");
	tcase_add_checked_fixture(tc, setup, NULL);
	ADD(tc, recognise_library_file);
	ADD(tc, user_size_unchanged);
	ADD(tc, no_named_files);
	suite_add_tcase(s, tc);

	tc = tcase_create("foreign");
	tcase_add_checked_fixture(tc, setup, NULL);
	ADD(tc, foreign_memfd_shared);
	ADD(tc, foreign_fork_child_purges);
	ADD(tc, foreign_shm_name_two_processes);
	ADD(tc, foreign_state_grows);
	ADD(tc, foreign_xattr_refused_local);
	suite_add_tcase(s, tc);

	tc = tcase_create("hostile");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, hostile_arena_words);
	tcase_add_test(tc, hostile_random_blocks);
	tcase_add_test(tc, hostile_lock_word);
	ADD(tc, hostile_xattr);
	ADD(tc, foreign_hostile_arena_size);
	tcase_add_test(tc, hostile_live_scribbler);
	suite_add_tcase(s, tc);

	tc = tcase_create("holders");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, orphaned_file_stays_shared);
	tcase_add_test(tc, forked_child_keeps_state_reachable);
	ADD(tc, zombie_holders_dropped);
	suite_add_tcase(s, tc);
	return s;
}
