/* SPDX-License-Identifier: MIT */
/*
 * model_exec.c - carries out one model-test operation in this process.
 *
 * Every process of the model test (the coordinator and its peers) keeps its
 * own table of objects - regions and mappings - and of file descriptors,
 * both indexed by the ids the coordinator hands out.  The executor calls
 * the library exactly as an application would and reports return codes and
 * what the touched pages hold; it judges nothing (test_model.c does).
 *
 * Pages are read and written under a SIGBUS guard: touching a purged
 * volatile page in SIGBUS mode is an expected outcome, reported as
 * CLS_SIGBUS.  The guard is installed before the library's first call, so
 * the library's own SIGBUS handler (installed with the first SIGBUS-mode
 * region) chains to it.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "model.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

struct lobj {
	int kind;            /* 0 free, 1 region, 2 mapping */
	vrange_region *r;
	char *base;
	size_t len;
	int file;            /* -1: anonymous */
};

static struct lobj lo[M_MAXOBJ];
static int lfd[M_MAXFILE];
static size_t ps;
static unsigned char *scratch;
static unsigned shm_seq, shm_nonce;

/*
 * What this process mapped where, and when (its count of executed
 * operations): a registration left at the end of a seed is looked up
 * here, so the violation says whose memory it is.
 */
#define ADDR_LOG 4096
static struct addr_event {
	uintptr_t a, b;
	uint64_t at;
	char what;
} addr_log[ADDR_LOG];
static uint64_t addr_logged, exec_count;

static void log_addr(const void *p, size_t len, char what)
{
	struct addr_event *e = &addr_log[addr_logged++ % ADDR_LOG];

	*e = (struct addr_event){ (uintptr_t)p, (uintptr_t)p + len, exec_count, what };
}

void model_exec_addr_history(uintptr_t a, uintptr_t b, FILE *out)
{
	uint64_t first = addr_logged > ADDR_LOG ? addr_logged - ADDR_LOG : 0;

	fprintf(out, "  this process's mappings at or next to [%#lx, %#lx) "
		"(operation count %" PRIu64 " now; M map, U unmap, R region, "
		"B bad-mapping probe, H hole filled by something else):\n",
		(unsigned long)a, (unsigned long)b, exec_count);
	for (uint64_t i = first; i < addr_logged; i++) {
		const struct addr_event *e = &addr_log[i % ADDR_LOG];

		if (e->a <= b && a <= e->b) /* overlapping or adjacent */
			fprintf(out, "    %c [%#lx, %#lx) at %" PRIu64 "\n", e->what,
				(unsigned long)e->a, (unsigned long)e->b, e->at);
	}
}

static sigjmp_buf guard_jb;
static volatile sig_atomic_t guard_on;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	if (guard_on) {
		guard_on = 0;
		siglongjmp(guard_jb, 1);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * With address reuse gated off (model.h, MAP_ARENA) mappings are carved
 * from a reserved range, never handed out twice, and "unmapping" covers
 * the old mapping with an inaccessible one so the kernel cannot place
 * anything else there either.
 */
static char *arena;
static size_t arena_size, arena_used;
static int retired_fd = -1; /* see retire() */

/*
 * Reserved before the library's first use and kept for the process's life:
 * no address in it was ever anything else.
 */
static void arena_reserve(void)
{
	for (arena_size = (size_t)16 << 30; !arena && arena_size >= (64u << 20);
	     arena_size /= 4) {
		arena = mmap(NULL, arena_size, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (arena == MAP_FAILED)
			arena = NULL;
	}
}

static void *arena_take(size_t len)
{
	if (!arena)
		return NULL;
	if (arena_used + len + ps > arena_size)
		arena_used = 0; /* wraps after millions of mappings */
	arena_used += len + ps; /* a guard page keeps neighbours apart */
	return arena + arena_used - len - ps;
}

void model_exec_init(size_t page_size)
{
	struct sigaction sa;

	ps = page_size;
	for (int i = 0; i < M_MAXFILE; i++)
		lfd[i] = -1;
	memset(lo, 0, sizeof(lo));
	if (!scratch)
		scratch = malloc(ps);
	if (!arena)
		arena_reserve();
	if (retired_fd < 0)
		retired_fd = memfd_create("vrange-model-retired", MFD_CLOEXEC);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void model_fill(void *page, uint32_t seed)
{
	uint64_t *w = page;

	if (seed == 0) {
		memset(page, 0, ps);
		return;
	}
	for (size_t k = 0; k < ps / 8; k++)
		w[k] = mix(((uint64_t)seed << 32) ^ k) | 1; /* never a zero word */
}

/* Compare one page with the pattern `exp` under the SIGBUS guard. */
static uint8_t observe_page(const char *p, uint32_t exp)
{
	static volatile uint8_t out;
	const volatile uint64_t *w = (const volatile uint64_t *)p;
	int zero = 1;

	if (sigsetjmp(guard_jb, 1))
		return CLS_SIGBUS;
	guard_on = 1;
	for (size_t k = 0; k < ps / 8; k++) {
		if (w[k]) {
			zero = 0;
			break;
		}
	}
	if (exp != 0 && exp != SEED_UNKNOWN && !zero) {
		const uint64_t *s = (const uint64_t *)(void *)scratch;
		size_t k = 0, n = ps / 8;

		/*
		 * One pass, word by word.  A purge in flight (a monitor
		 * thread enforcing the budget, another process) may discard
		 * the page while it is read: the words read after that are
		 * zeros, the ones before match.  That is a discard observed
		 * (judged as zeros are), not bytes never written; the
		 * pattern has no zero word, so the two cannot be confused.
		 */
		model_fill(scratch, exp);
		while (k < n && w[k] == s[k])
			k++;
		if (k == n) {
			out = CLS_MATCH;
		} else {
			while (k < n && w[k] == 0)
				k++;
			out = k == n ? CLS_ZERO : CLS_OTHER;
		}
	} else if (exp == SEED_UNKNOWN) {
		out = zero ? CLS_ZERO : CLS_MATCH;
	} else if (zero) {
		out = exp == 0 ? CLS_MATCH : CLS_ZERO;
	} else {
		out = CLS_OTHER;
	}
	guard_on = 0;
	return out;
}

uint8_t model_observe(const void *page, uint32_t exp)
{
	return observe_page(page, exp);
}

static int write_page(char *p, uint32_t seed)
{
	if (sigsetjmp(guard_jb, 1))
		return -1;
	model_fill(scratch, seed);
	guard_on = 1;
	memcpy(p, scratch, ps);
	guard_on = 0;
	return 0;
}

static void observe(const struct m_op *op, struct m_res *res)
{
	const struct lobj *o = &lo[op->obj];

	for (int i = 0; i < op->npg && i < M_MAXPG; i++)
		res->cls[i] = observe_page(o->base + (op->pg0 + i) * ps,
					   op->exp[i]);
}

static int file_fd(const struct lobj *o)
{
	return o->file >= 0 ? lfd[o->file] : -1;
}

static int64_t do_mark(const struct m_op *op, struct m_res *res, int unmark)
{
	struct lobj *o = &lo[op->obj];
	int purged = -1, rc = -1;

	switch (op->arg & 3) {
	case HOW_REGION:
		/* A quarter of the marks carry a cost (contract 10), chosen
		 * from what the step drew already: the seeds' operations
		 * stay as they were.  Costs change the order, never what a
		 * purge may take or what an unmark reports. */
		if (unmark)
			rc = vrange_mark_nonvolatile(o->r, op->off, op->len);
		else if ((((uint64_t)op->off / ps) ^ (uint64_t)op->len) % 4 == 0)
			rc = vrange_mark_volatile_cost(o->r, op->off, op->len,
				1 + (uint32_t)(((uint64_t)op->off / ps) % 5) * 25000);
		else
			rc = vrange_mark_volatile(o->r, op->off, op->len);
		break;
	case HOW_VRANGE:
		rc = vrange(o->base + op->off, op->len,
			    unmark ? VRANGE_NONVOLATILE : VRANGE_VOLATILE,
			    (op->arg & 4) ? NULL : &purged);
		if (rc == 0 && unmark && !(op->arg & 4))
			rc = purged;
		break;
	case HOW_FD:
		rc = unmark ? vrange_fd_mark_nonvolatile(file_fd(o),
							 (off_t)op->off,
							 (off_t)op->len)
			    : vrange_fd_mark_volatile(file_fd(o), (off_t)op->off,
						      (off_t)op->len);
		break;
	}
	res->purged = purged;
	return rc;
}

static int64_t do_isvol(const struct m_op *op)
{
	struct lobj *o = &lo[op->obj];

	if ((op->arg & 3) == HOW_FD)
		return vrange_fd_is_volatile(file_fd(o), (off_t)op->off,
					     (off_t)op->len);
	return vrange_is_volatile(o->r, op->off, op->len);
}

static int64_t do_newfile(const struct m_op *op)
{
	char name[96];
	int fd;

	if (op->arg == 0) {
		fd = memfd_create("vrange-model", MFD_CLOEXEC);
	} else {
		/* The pid alone is not unique: a soak in a PID namespace of
		 * its own has the same small pids as any other there. */
		if (!shm_nonce && getrandom(&shm_nonce, sizeof(shm_nonce), 0) < 0)
			shm_nonce = (unsigned)time(NULL);
		snprintf(name, sizeof(name), "/dev/shm/vrange-model-%d-%x-%u",
			 (int)getpid(), shm_nonce, shm_seq++);
		fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			unlink(name);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)(op->npg * ps)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	lfd[op->file] = fd;
	return 0;
}

static int64_t do_region(const struct m_op *op, struct m_res *res)
{
	struct lobj *o = &lo[op->obj];
	vrange_region *r = NULL;
	int rc;

	if (op->type == OP_CREATE)
		rc = vrange_region_create(op->a2 ? "vrange-model" : NULL,
					  op->npg * ps, (unsigned)op->arg, &r);
	else
		rc = vrange_region_adopt(lfd[op->file], (unsigned)op->arg, &r);
	if (rc < 0)
		return rc;
	if (op->type == OP_CREATE) {
		lfd[op->file] = fcntl(vrange_region_fd(r), F_DUPFD_CLOEXEC, 3);
		if (lfd[op->file] < 0) {
			vrange_region_destroy(r);
			return -10000;
		}
	}
	o->kind = 1;
	o->r = r;
	o->base = vrange_region_base(r);
	o->len = vrange_region_size(r);
	log_addr(o->base, o->len, 'R');
	o->file = op->file;
	res->aux = (int)vrange_region_access(r);
	res->addr = (uintptr_t)o->base;
	return o->len == op->npg * ps ? 0 : -10001;
}

/*
 * Cover an arena mapping with an inaccessible one: its address is spent.
 * The cover is a private mapping of an empty file - a kind vrange() refuses
 * - not anonymous memory, which would merge with the reservation around it
 * and which the library may take on as the newcomer at a known address
 * (new defect D8: it then takes the whole merged reservation for its own).
 */
static int retire(void *p, size_t len)
{
	/* At the file offset of its place in the arena, guard page included
	 * (never handed out): retired neighbours then merge into one VMA.
	 * At offset 0 each stayed a VMA of its own - 27,500 after 5.8
	 * million soak steps (the bad-mapping probes), every mmap, fork and
	 * PROCMAP_QUERY slower for it, and vm.max_map_count not far off. */
	size_t off = 0;

	if (arena && (char *)p >= arena && (char *)p < arena + arena_size) {
		off = (size_t)((char *)p - arena);
		if ((char *)p + len + ps <= arena + arena_size)
			len += ps;
	}
	return mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_FIXED, retired_fd,
		    (off_t)off) == MAP_FAILED ? -errno : 0;
}

static int64_t do_unmap(const struct m_op *op)
{
	struct lobj *o = &lo[op->obj];
	int64_t rc = 0;

	log_addr(o->base, o->len, 'U');
	if (op->arg & MAP_ARENA)
		rc = retire(o->base, o->len);
	else if (munmap(o->base, o->len)) {
		rc = -errno;
	}
	memset(o, 0, sizeof(*o));
	return rc;
}

static int64_t do_map(const struct m_op *op, struct m_res *res)
{
	struct lobj *o = &lo[op->obj];
	size_t len = op->npg * ps;
	int shared = op->arg & 1;
	int flags = shared ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS;
	int fd = shared ? lfd[op->file] : -1;
	void *p = MAP_FAILED, *at;

	if (op->arg & MAP_ARENA) {
		at = arena_take(len);
		if (at)
			p = mmap(at, len, PROT_READ | PROT_WRITE,
				 flags | MAP_FIXED, fd, 0);
	} else if (op->a2)
		p = mmap((void *)(uintptr_t)op->a2, len, PROT_READ | PROT_WRITE,
			 flags | MAP_FIXED_NOREPLACE, fd, 0);
	if (!(op->arg & MAP_ARENA) && p != MAP_FAILED &&
	    p != (void *)(uintptr_t)op->a2) {
		munmap(p, len); /* an old kernel took it as a hint */
		p = MAP_FAILED;
	}
	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	o->kind = 2;
	o->base = p;
	o->len = len;
	log_addr(p, len, 'M');
	o->file = shared ? op->file : -1;
	res->addr = (uintptr_t)p;
	return 0;
}

static int64_t do_drop(const struct m_op *op)
{
	int64_t rc = vrange_fd_forget(lfd[op->file]);

	close(lfd[op->file]);
	lfd[op->file] = -1;
	return rc;
}

/* ---- bad inputs: each returns what the call returned (or a marker) ---- */

static int64_t bad_null(void)
{
	int64_t rc = 0;

	if (vrange_mark_volatile(NULL, 0, ps) != -EINVAL)
		rc = -20001;
	else if (vrange_mark_nonvolatile(NULL, 0, ps) != -EINVAL)
		rc = -20002;
	else if (vrange_is_volatile(NULL, 0, ps) != -EINVAL)
		rc = -20003;
	else if (vrange_region_purge(NULL) != -EINVAL)
		rc = -20004;
	else if (vrange_region_set_priority(NULL, 1) != -EINVAL)
		rc = -20005;
	else if (vrange_region_destroy(NULL) != 0)
		rc = -20006;
	else if (vrange_region_base(NULL) || vrange_region_size(NULL) ||
		 vrange_region_access(NULL))
		rc = -20007;
	else if (vrange_region_fd(NULL) != -EINVAL)
		rc = -20008;
	else if (vrange_mark_volatile_cost(NULL, 0, ps, 5) != -EINVAL ||
		 vrange_region_set_cost(NULL, 5) != -EINVAL)
		rc = -20009;
	return rc;
}

static int64_t bad_fd_call(int fd, off_t off, off_t len, int which)
{
	switch (which % 3) {
	case 0:
		return vrange_fd_mark_volatile(fd, off, len);
	case 1:
		return vrange_fd_mark_nonvolatile(fd, off, len);
	default:
		return vrange_fd_is_volatile(fd, off, len);
	}
}

static int64_t bad_region_call(vrange_region *r, size_t off, size_t len,
			       int which)
{
	switch (which % 3) {
	case 0:
		return vrange_mark_volatile(r, off, len);
	case 1:
		return vrange_mark_nonvolatile(r, off, len);
	default:
		return vrange_is_volatile(r, off, len);
	}
}

static int64_t bad_misc_fd(int kind)
{
	int p[2], fd;
	int64_t rc;
	vrange_region *r = NULL;

	switch (kind) {
	case BAD_CLOSED_FD:
		/* A number far above the ones in use: the library's threads
		 * (a monitor opening /proc/meminfo) take the lowest free
		 * number, and took a low one between the close and the
		 * forget below (soak, seed 300059: -20010). */
		fd = fcntl(0, F_DUPFD_CLOEXEC, 900);
		close(fd);
		rc = vrange_fd_mark_volatile(fd, 0, (off_t)ps);
		if (rc == -EBADF && vrange_fd_forget(fd) != -EBADF)
			rc = -20010;
		return rc;
	case BAD_NOT_SHM_FD:
		if (pipe2(p, O_CLOEXEC) < 0)
			return -20011;
		rc = vrange_fd_mark_volatile(p[0], 0, (off_t)ps);
		close(p[0]);
		close(p[1]);
		return rc;
	case BAD_FORGET_NOSTATE:
		fd = memfd_create("vrange-model-nostate", MFD_CLOEXEC);
		rc = vrange_fd_forget(fd);
		close(fd);
		return rc;
	default: /* BAD_ADOPT_EMPTY */
		fd = memfd_create("vrange-model-empty", MFD_CLOEXEC);
		rc = vrange_region_adopt(fd, 0, &r);
		if (rc == 0)
			vrange_region_destroy(r);
		close(fd);
		return rc;
	}
}

static uint64_t hole_filled;


uint64_t model_exec_hole_filled(void)
{
	return hole_filled;
}

static int64_t bad_mapping(int kind)
{
	int64_t rc;
	char *p;
	int fd;

	if (kind == BAD_PRIVATE_FILE_MAP) {
		fd = memfd_create("vrange-model-private", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)ps) < 0)
			return -20012;
		p = mmap(arena_take(ps), ps, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_FIXED, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			return -20013;
		rc = vrange(p, ps, VRANGE_VOLATILE, NULL);
		retire(p, ps);
		if (rc == -EOPNOTSUPP) {
			void *vdso = (void *)getauxval(AT_SYSINFO_EHDR);

			if (vdso && vrange(vdso, ps, VRANGE_VOLATILE, NULL) !=
					    -EOPNOTSUPP)
				rc = -20014;
		}
		return rc;
	}
	/* BAD_VRANGE_UNMAPPED: a hole in the middle of the range */
	p = mmap(arena_take(3 * ps), 3 * ps, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p == MAP_FAILED)
		return -20015;
	munmap(p + ps, ps);
	log_addr(p, 3 * ps, 'B');
	rc = vrange(p, 3 * ps, VRANGE_VOLATILE, NULL);
	if (rc == 0 && msync(p + ps, ps, MS_ASYNC) == 0) {
		/*
		 * The hole was filled while the call ran: the library's own
		 * allocation (a grown table) landed there, so the range was
		 * wholly mapped when it was marked.  Take the mark back.
		 */
		vrange(p, 3 * ps, VRANGE_NONVOLATILE, NULL);
		hole_filled++;
		log_addr(p + ps, ps, 'H');
		retire(p, ps); /* not the middle page: it is the library's */
		retire(p + 2 * ps, ps);
		return -ENOENT;
	}
	retire(p, 3 * ps);
	return rc;
}

static int64_t do_bad(const struct m_op *op)
{
	struct lobj *o = &lo[op->obj];
	int purged = 0, which = (int)op->a2;
	vrange_region *r = NULL;
	int64_t rc;

	switch (op->arg) {
	case BAD_LEN0_REGION_MARK:
		return vrange_mark_volatile(o->r, op->off, 0);
	case BAD_LEN0_REGION_UNMARK:
		return vrange_mark_nonvolatile(o->r, op->off, 0);
	case BAD_LEN0_REGION_ISVOL:
		return vrange_is_volatile(o->r, op->off, 0);
	case BAD_LEN0_FD_MARK:
		return bad_fd_call(file_fd(o), (off_t)op->off, 0, which);
	case BAD_LEN0_FD_UNMARK:
		return vrange_fd_mark_nonvolatile(file_fd(o), (off_t)op->off, 0);
	case BAD_LEN0_VRANGE:
		rc = vrange(o->base + op->off, 0, which & 1, &purged);
		return rc == 0 && purged ? -20020 : rc;
	case BAD_PAST_END_REGION:
		return bad_region_call(o->r, o->len - ps + op->off % ps,
				       2 * ps, which);
	case BAD_PAST_END_FD:
		return bad_fd_call(file_fd(o), (off_t)(o->len - ps),
				   (off_t)(2 * ps), which);
	case BAD_OVERFLOW_REGION:
		return bad_region_call(o->r, SIZE_MAX - ps, 4 * ps, which);
	case BAD_OVERFLOW_FD:
		return bad_fd_call(file_fd(o), INT64_MAX - (off_t)ps,
				   (off_t)(4 * ps), which);
	case BAD_NEG_FD:
		return bad_fd_call(file_fd(o), (which & 4) ? 0 : -(off_t)ps,
				   (which & 4) ? -(off_t)ps : (off_t)ps, which);
	case BAD_NULL_REGION:
		return bad_null();
	case BAD_VRANGE_NULL:
		return vrange(NULL, ps, which & 1, &purged);
	case BAD_VRANGE_MODE:
		return vrange(o->base, ps, 2 + which % 5, &purged);
	case BAD_VRANGE_WRAP:
		return vrange((void *)(UINTPTR_MAX - ps + 1), 2 * ps,
			      which & 1, &purged);
	case BAD_CREATE_SIZE0:
		rc = vrange_region_create(NULL, 0, 0, &r);
		if (rc == -EINVAL)
			rc = vrange_region_create(NULL, ps, 0, NULL);
		if (rc == -EINVAL)
			rc = vrange_region_create(NULL, ps, 1u << 7, &r);
		if (rc == 0)
			vrange_region_destroy(r);
		return rc;
	case BAD_CREATE_BOTHFLAGS:
		rc = vrange_region_create(NULL, ps,
					  VRANGE_ACCESS_ZERO |
						  VRANGE_ACCESS_SIGBUS, &r);
		if (rc == 0)
			vrange_region_destroy(r);
		return rc;
	case BAD_PURGE0:
		rc = vrange_purge(0);
		if (rc == 0)
			rc = vrange_region_purge(NULL) == -EINVAL ? 0 : -20021;
		return rc;
	case BAD_VRANGE_SPAN_REGION:
		return vrange(o->base + o->len - ps, 2 * ps, which & 1,
			      &purged);
	case BAD_PRIVATE_FILE_MAP:
	case BAD_VRANGE_UNMAPPED:
		return bad_mapping(op->arg);
	default:
		return bad_misc_fd(op->arg);
	}
}

static int64_t do_budget(const struct m_op *op)
{
	struct vrange_monitor_opts mo = {
		.struct_size = sizeof(mo),
		.flags = VRANGE_MONITOR_NO_PSI | VRANGE_MONITOR_NO_CGROUP,
	};
	int rc;

	if (op->a2 == 0) {
		rc = vrange_set_budget(0);
		return rc ? rc : vrange_monitor_stop();
	}
	rc = vrange_monitor_start(&mo);
	if (rc < 0 && rc != -EALREADY)
		return rc;
	return vrange_set_budget(op->a2);
}

void model_exec(const struct m_op *op, int recv_fd, struct m_res *res)
{
	struct lobj *o = &lo[op->obj];
	int64_t rc = 0;

	memset(res, 0, sizeof(*res));
	exec_count++;
	switch (op->type) {
	case OP_NEWFILE:
		rc = do_newfile(op);
		break;
	case OP_CREATE:
	case OP_ADOPT:
		rc = do_region(op, res);
		break;
	case OP_DESTROY:
		rc = vrange_region_destroy(o->r);
		memset(o, 0, sizeof(*o));
		break;
	case OP_MAP:
		rc = do_map(op, res);
		break;
	case OP_UNMAP:
		rc = do_unmap(op);
		break;
	case OP_MARK:
		rc = do_mark(op, res, 0);
		break;
	case OP_UNMARK:
		rc = do_mark(op, res, 1);
		observe(op, res);
		break;
	case OP_ISVOL:
		rc = do_isvol(op);
		break;
	case OP_WRITE:
		rc = write_page(o->base + op->pg0 * ps, op->seed);
		break;
	case OP_READ:
		observe(op, res);
		break;
	case OP_PURGE:
		rc = vrange_purge(op->a2);
		break;
	case OP_RPURGE:
		rc = vrange_region_purge(o->r);
		break;
	case OP_PRIO:
		rc = vrange_region_set_priority(o->r, op->arg);
		break;
	case OP_BUDGET:
		rc = do_budget(op);
		break;
	case OP_DROPFILE:
		rc = do_drop(op);
		break;
	case OP_RECVFILE:
		lfd[op->file] = recv_fd;
		rc = recv_fd >= 0 ? 0 : -EBADF;
		break;
	case OP_BAD:
		rc = do_bad(op);
		break;
	case OP_FORGET:
		rc = vrange_fd_forget(lfd[op->file]);
		break;
	case OP_STATS: {
		struct vrange_stats st;

		rc = vrange_get_stats(&st);
		if (rc == 0) {
			rc = (int64_t)st.pressure_events;
			res->addr = st.purges;
			memcpy(res->cls, st.pressure_source, sizeof(res->cls));
		}
		break;
	}
	default:
		break;
	}
	res->rc = rc;
}

int model_exec_fd(int file)
{
	return lfd[file];
}

void model_exec_reset(void)
{
	for (int i = 0; i < M_MAXOBJ; i++) {
		if (lo[i].kind == 1)
			vrange_region_destroy(lo[i].r);
		else if (lo[i].kind == 2)
			munmap(lo[i].base, lo[i].len);
	}
	memset(lo, 0, sizeof(lo));
	for (int i = 0; i < M_MAXFILE; i++) {
		if (lfd[i] >= 0) {
			vrange_fd_forget(lfd[i]);
			close(lfd[i]);
		}
		lfd[i] = -1;
	}
}
