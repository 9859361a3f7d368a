/* SPDX-License-Identifier: MIT */
/*
 * test_fault_sweep.c - every failing system call and allocation of the
 * library, one at a time (built only with -Dfault_injection=true, linked
 * against libvrange_fault.so; see src/core/fault_inject.h).
 *
 * A scenario (one "cycle") touches every entry point: regions created in
 * ZERO, SIGBUS and refill mode, an adopted region, the file layer, vrange()
 * on mmap'd and malloc'd anonymous memory and on the application's own
 * MAP_SHARED mapping, a purgeable cache (put, reserve/commit/abort,
 * get/release, a value held across the purge, remove, stats, destroy),
 * region and global purges, priorities, budget, monitor start/stop, stats,
 * fork.  It checks as it goes: every result is >= 0 or a
 * negative errno; INTACT means every byte is as it was; non-volatile bytes
 * never change; a purged page reads whole (its bytes or zeros, never torn);
 * a page found purged reads without a signal once marked non-volatile; a
 * purged page of a SIGBUS-mode region never reads zeros while volatile; a
 * cache value read is exactly its bytes or a miss, a held one never
 * changes.
 *
 * 1. Reference: one child runs a cycle with counting on (how many calls of
 *    each site), then a second cycle, and measures descriptors, library
 *    mappings and userfaultfd registrations left over.
 * 2. One child per (site, N, errno): call N of that site fails with errno
 *    during the first cycle; then faults are off and a second cycle must
 *    pass strictly (the library keeps working), and no more descriptors,
 *    memfd mappings or MISSING registrations may be left than in the
 *    reference.  A child that crashes or hangs (timeout) is a failure.
 * 3. EINTR from real signals: cycles under a fast interval timer whose
 *    handler is installed without SA_RESTART, while another thread keeps
 *    the locks contended.
 *
 * Bounded by default (VRANGE_FAULT_BUDGET seconds, default 50: every site
 * and errno, the first calls of each site and a spread of the later ones);
 * VRANGE_FAULT_SWEEP=full tries every N of every site.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fault_inject.h"
#include "fd_pass.h"
#include "vrange.h"

#define PAGES 8            /* per buffer; the first half is made volatile */
#define MAX_SITES 64
#define RUN_TIMEOUT_S 20
#define STORM_CYCLES 20

static size_t pg;
static bool strict;        /* faults off: results must be the exact ones */
static bool in_fault_cycle;
static bool storming;      /* another thread purges at any moment */
static bool expect_sigbus; /* the reference had SIGBUS mode */
static bool saw_sigbus;    /* this process created a SIGBUS-mode region */
/* The injected errno is one by which the kernel says "no userfaultfd
 * here": falling back to ZERO mode for good is then the documented answer. */
static bool verdict_errno;
static int failures;

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "  FAIL (%s cycle): ", strict ? "clean" : "faulted");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	failures++;
}

/* A negative errno or success: anything else breaks the convention. */
static bool ok_result(const char *what, long r)
{
	if (r >= 0)
		return true;
	if (r < -4095)
		fail("%s returned %ld, not a negative errno", what, r);
	else if (strict)
		fail("%s failed with faults off: %s", what, strerror((int)-r));
	return false;
}

/* ---- SIGBUS probes -------------------------------------------------------- */

static sigjmp_buf probe_jmp;
static volatile sig_atomic_t probing;

/* "0x" and v in hex into out (at least 19 bytes); its length. */
static size_t hex_of(uintptr_t v, char *out)
{
	size_t n = 0;
	char tmp[16];

	do {
		tmp[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	out[0] = '0';
	out[1] = 'x';
	for (size_t i = 0; i < n; i++)
		out[2 + i] = tmp[n - 1 - i];
	return n + 2;
}

/* The line of /proc/self/maps that holds addr, to stderr (async-signal-
 * safe: open, read, write), so an unexpected signal says what memory
 * raised it. */
static void write_mapping_of(uintptr_t addr)
{
	char buf[4096], line[512];
	size_t len = 0;
	ssize_t n;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			uintptr_t lo = 0, hi = 0;
			const char *c;

			if (buf[i] != '\n') {
				if (len < sizeof(line) - 1)
					line[len++] = buf[i];
				continue;
			}
			line[len] = '\0';
			for (c = line; *c && *c != '-'; c++)
				lo = lo * 16 + (uintptr_t)(*c <= '9' ? *c - '0' : *c - 'a' + 10);
			for (c += *c == '-'; *c && *c != ' '; c++)
				hi = hi * 16 + (uintptr_t)(*c <= '9' ? *c - '0' : *c - 'a' + 10);
			if (addr >= lo && addr < hi) {
				line[len++] = '\n';
				write(2, "  in ", 5);
				write(2, line, len);
			}
			len = 0;
		}
	}
	if (fd >= 0)
		close(fd);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	static const char msg[] = "  FAIL: unexpected SIGBUS at ";
	char a[24], code[24];
	size_t an, cn;

	(void)sig;
	(void)uc;
	if (probing)
		siglongjmp(probe_jmp, 1);
	an = hex_of((uintptr_t)si->si_addr, a);
	cn = hex_of((uintptr_t)(unsigned int)si->si_code, code);
	write(2, msg, sizeof(msg) - 1);
	write(2, a, an);
	write(2, ", si_code ", 10);
	write(2, code, cn);
	write(2, "\n", 1);
	write_mapping_of((uintptr_t)si->si_addr);
	_exit(3);
}

enum look { L_DATA, L_ZERO, L_TORN, L_SIGBUS, L_OTHER };

/*
 * What page p holds: the byte v throughout, zeros, a mix, or a signal.
 * The whole read is under the probe: a purge running meanwhile (the
 * monitor enforcing the budget) may take a volatile page between two of
 * its bytes, and in SIGBUS mode the next byte then raises the signal the
 * mode promises (the sweep once took that for an unexpected SIGBUS).
 * A refill region's page taken while read reads its data, then the
 * callback's bytes (alt): its bytes are alt from then on.
 */
static enum look look_at(const unsigned char *p, unsigned char v, unsigned char alt,
			 unsigned char *seen)
{
	volatile const unsigned char *q = p;
	unsigned char first;
	bool torn = false, refilled = false;

	*seen = 0;
	probing = 1;
	if (sigsetjmp(probe_jmp, 1)) {
		probing = 0;
		return L_SIGBUS;
	}
	first = q[0];
	for (size_t i = 1; i < pg; i++) {
		unsigned char c = q[i];

		if (c == first)
			continue;
		if (alt && first == v && c == alt) {
			refilled = true;
		} else if (c != 0 && first != 0) {
			probing = 0;
			*seen = first;
			return L_OTHER; /* foreign bytes */
		} else {
			torn = true; /* data and zeros: punched while being read */
		}
	}
	probing = 0;
	*seen = refilled && !torn ? alt : first;
	if (torn)
		return refilled ? L_OTHER : L_TORN;
	if (refilled || first == v || (alt && first == alt))
		return L_DATA;
	return first == 0 ? L_ZERO : L_OTHER;
}

/* ---- the buffers a cycle works on ---------------------------------------- */

enum kind { K_REGION_ZERO, K_REGION_SIGBUS, K_REGION_REFILL, K_ADOPTED,
	    K_ANON, K_MALLOC, K_SHARED, K_FDLAYER, K_COUNT };
static const char *const kind_name[K_COUNT] = {
	"zero region", "sigbus region", "refill region", "adopted region",
	"anonymous mmap", "malloc'd memory", "shared mapping", "file layer",
};

struct buf {
	enum kind kind;
	bool live;
	unsigned char *base;
	vrange_region *r;
	int fd;
	void *alloc;
	bool fell_back; /* SIGBUS region the kernel would not register */
	bool partial;   /* SIGBUS region counted as signalling only in part */
	unsigned char want[PAGES]; /* the byte each page holds */
};

static unsigned char refill_byte(size_t page)
{
	return (unsigned char)(0xA0 + page);
}

static int refill_fn(vrange_region *r, size_t off, void *b, size_t len, void *arg)
{
	(void)r;
	(void)arg;
	memset(b, refill_byte(off / pg), len);
	return 0;
}

static bool sigbus_mode(const struct buf *b)
{
	return b->r && vrange_region_access(b->r) == VRANGE_ACCESS_SIGBUS &&
	       !b->fell_back;
}

/* Mappings in SIGBUS mode that fell back to zeros (vrange_get_stats). */
static uint64_t fallbacks(char *why, size_t size)
{
	struct vrange_stats st;

	if (vrange_get_stats(&st) < 0)
		return 0;
	if (why)
		snprintf(why, size, "%s", st.sigbus_fallback);
	return st.sigbus_fallbacks;
}

/*
 * A SIGBUS region's mapping that the kernel refused (an injected EBUSY or
 * EPERM reads as the documented read-only or application-uffd fallback)
 * reads zeros, and the stats must say so, with a reason.
 */
static void note_fell_back(struct buf *b, uint64_t before)
{
	char why[32] = "";

	if (!b->r || vrange_region_access(b->r) != VRANGE_ACCESS_SIGBUS ||
	    fallbacks(why, sizeof(why)) <= before)
		return;
	/* Registered around this process's purges only, or without minor
	 * faults (a failed uffd open, thread or registration left it so):
	 * it signals here, but not everywhere - counted, either is fine. */
	if (!strcmp(why, "UFFD_USER_MODE_ONLY") ||
	    !strcmp(why, "armed around purges only") ||
	    !strncmp(why, "EINVAL: no minor", 16) ||
	    !strcmp(why, "no minor faults on shmem")) {
		b->partial = true;
		return;
	}
	b->fell_back = true;
	if (!why[0])
		fail("%s: fell back to zeros without a reason in the stats",
		     kind_name[b->kind]);
}

static int memfd_of(const char *name, size_t pages)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	if (fd >= 0 && ftruncate(fd, (off_t)(pages * pg)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static bool buf_open(struct buf *b, enum kind k)
{
	static const unsigned int rflags[] = {
		[K_REGION_ZERO] = VRANGE_ACCESS_ZERO,
		[K_REGION_SIGBUS] = VRANGE_ACCESS_SIGBUS,
		[K_REGION_REFILL] = VRANGE_ACCESS_SIGBUS,
	};
	uint64_t before = fallbacks(NULL, 0);
	int r = 0;

	memset(b, 0, sizeof(*b));
	b->kind = k;
	b->fd = -1;
	switch (k) {
	case K_REGION_ZERO:
	case K_REGION_SIGBUS:
	case K_REGION_REFILL:
		r = vrange_region_create(kind_name[k], PAGES * pg, rflags[k], &b->r);
		if (r == -EOPNOTSUPP && k != K_REGION_ZERO) {
			/* No SIGBUS mode on this machine; but one fault must
			 * not take it away for good. */
			if (strict && expect_sigbus && !verdict_errno)
				fail("%s: SIGBUS mode gone after the fault", kind_name[k]);
			return false;
		}
		saw_sigbus |= r == 0 && k != K_REGION_ZERO;
		if (!ok_result("vrange_region_create", r))
			return false;
		if (k == K_REGION_REFILL &&
		    !ok_result("vrange_region_set_refill",
			       vrange_region_set_refill(b->r, refill_fn, NULL))) {
			vrange_region_destroy(b->r);
			return false;
		}
		b->base = vrange_region_base(b->r);
		break;
	case K_ADOPTED:
		b->fd = memfd_of("sweep-adopted", PAGES);
		if (b->fd < 0)
			return false;
		r = vrange_region_adopt(b->fd, 0, &b->r);
		close(b->fd);
		b->fd = -1;
		if (!ok_result("vrange_region_adopt", r))
			return false;
		b->base = vrange_region_base(b->r);
		break;
	case K_ANON:
		b->base = mmap(NULL, PAGES * pg, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (b->base == MAP_FAILED)
			return false;
		break;
	case K_MALLOC:
		if (posix_memalign(&b->alloc, pg, PAGES * pg))
			return false;
		b->base = b->alloc;
		break;
	case K_SHARED:
	case K_FDLAYER:
		b->fd = memfd_of(k == K_SHARED ? "sweep-shared" : "sweep-fd", PAGES);
		if (b->fd < 0)
			return false;
		b->base = mmap(NULL, PAGES * pg, PROT_READ | PROT_WRITE, MAP_SHARED,
			       b->fd, 0);
		if (b->base == MAP_FAILED) {
			close(b->fd);
			return false;
		}
		if (k == K_SHARED) {
			close(b->fd); /* the mapping is enough (contract 5) */
			b->fd = -1;
		}
		break;
	default:
		return false;
	}
	note_fell_back(b, before);
	if (b->fell_back && strict)
		fail("%s: fell back to zeros with faults off", kind_name[k]);
	for (size_t i = 0; i < PAGES; i++) {
		b->want[i] = (unsigned char)(0x11 + 16 * k + i);
		memset(b->base + i * pg, b->want[i], pg);
	}
	b->live = true;
	return true;
}

static void buf_close(struct buf *b)
{
	if (!b->live)
		return;
	if (b->r) {
		int r = vrange_region_destroy(b->r);

		ok_result("vrange_region_destroy", r);
	} else if (b->alloc) {
		int purged = 0;

		/* malloc'd memory goes back to the heap non-volatile. */
		ok_result("vrange(NONVOLATILE) before free",
			  vrange(b->base, PAGES * pg, VRANGE_NONVOLATILE, &purged));
		free(b->alloc);
	} else {
		if (b->kind == K_FDLAYER) {
			int r = vrange_fd_forget(b->fd);

			/* A failure is the caller's to retry, as any other. */
			if (r < 0 && r != -ENOENT && ok_result("vrange_fd_forget", r) == false)
				r = vrange_fd_forget(b->fd);
			if (r < 0 && r != -ENOENT)
				fail("vrange_fd_forget fails again after the fault: %s",
				     strerror(-r));
			close(b->fd);
		}
		/* The application's shared mapping goes too: the file keeps
		 * its state, the library's entry for the mapping stays until
		 * it next checks, and a failing call on it then must not be
		 * taken for a call on memory that went (nor the reverse), and
		 * later memory at its address is not the file's. */
		munmap(b->base, PAGES * pg);
	}
	b->live = false;
}

static int mark(struct buf *b, size_t first, size_t n, int mode, int *purged)
{
	size_t off = first * pg, len = n * pg;
	int r;

	switch (b->kind) {
	case K_REGION_ZERO: /* the address form */
	case K_ANON:
	case K_MALLOC:
	case K_SHARED:
		return vrange(b->base + off, len, mode, purged);
	case K_FDLAYER:
		if (mode == VRANGE_VOLATILE)
			return vrange_fd_mark_volatile(b->fd, (off_t)off, (off_t)len);
		r = vrange_fd_mark_nonvolatile(b->fd, (off_t)off, (off_t)len);
		break;
	default:
		if (mode == VRANGE_VOLATILE)
			return vrange_mark_volatile(b->r, off, len);
		r = vrange_mark_nonvolatile(b->r, off, len);
		break;
	}
	if (r >= 0)
		*purged = r == VRANGE_PURGED;
	return r < 0 ? r : 0;
}

static int is_volatile(struct buf *b, size_t first, size_t n)
{
	if (b->kind == K_FDLAYER)
		return vrange_fd_is_volatile(b->fd, (off_t)(first * pg), (off_t)(n * pg));
	if (b->r)
		return vrange_is_volatile(b->r, first * pg, n * pg);
	return 0;
}

/* The non-volatile half never changes, whatever happened. */
static void check_stable(struct buf *b, const char *when)
{
	unsigned char seen;

	for (size_t i = PAGES / 2; i < PAGES; i++) {
		enum look l = look_at(b->base + i * pg, b->want[i], 0, &seen);

		if (l != L_DATA)
			fail("%s: non-volatile page %zu changed %s (look %d, byte %#x)",
			     kind_name[b->kind], i, when, l, seen);
	}
}

/* A volatile page after the purge, still volatile. */
static void probe_volatile(struct buf *b, size_t i, bool purge_ok)
{
	unsigned char seen, alt = b->kind == K_REGION_REFILL ? refill_byte(i) : 0;
	enum look l = look_at(b->base + i * pg, b->want[i], alt, &seen);
	bool sigbus = sigbus_mode(b);

	/* A purge running meanwhile (the monitor enforces a budget) may
	 * punch the page while it is read: data, then zeros.  Never bytes
	 * of some other page, and never zeros in SIGBUS mode. */
	if (l == L_OTHER || (l == L_TORN && sigbus))
		fail("%s: volatile page %zu reads torn or foreign bytes (%#x)",
		     kind_name[b->kind], i, seen);
	else if (l == L_ZERO && sigbus)
		fail("%s: purged volatile page %zu reads zeros in SIGBUS mode",
		     kind_name[b->kind], i);
	else if (l == L_SIGBUS && b->r && !sigbus && !b->partial)
		fail("%s: SIGBUS in ZERO mode, page %zu", kind_name[b->kind], i);
	else if (l == L_SIGBUS && b->kind == K_REGION_REFILL && strict)
		fail("refill region: SIGBUS although the refill succeeds, page %zu", i);
	else if (strict && purge_ok && l == L_DATA && seen == b->want[i] &&
		 (b->kind == K_REGION_SIGBUS || b->kind == K_REGION_REFILL))
		fail("%s: volatile page %zu survived a full purge",
		     kind_name[b->kind], i);
	if (l == L_DATA && alt && seen == alt)
		b->want[i] = alt; /* refilled: these are its bytes now */
}

/* Mark the volatile half non-volatile again (retrying an injected
 * failure once) and check what it says against what the pages hold. */
static void unmark_and_check(struct buf *b, bool purge_ok)
{
	int purged = -1, r;
	unsigned char seen;

	r = mark(b, 0, PAGES / 2, VRANGE_NONVOLATILE, &purged);
	if (!ok_result("mark_nonvolatile", r)) /* the library must work again */
		r = mark(b, 0, PAGES / 2, VRANGE_NONVOLATILE, &purged);
	if (r < 0) {
		fail("%s: mark_nonvolatile fails again after the fault: %s",
		     kind_name[b->kind], strerror(-r));
		return;
	}
	if (purged != 0 && purged != 1) {
		fail("%s: *purged is %d", kind_name[b->kind], purged);
		return;
	}
	/* Every volatile page had data and a full purge ran: all purged,
	 * except refilled pages, which count as volatile again, and
	 * anonymous memory at an address reused since an earlier cycle,
	 * which a purge leaves alone until vrange() has seen it anew. */
	if (strict && purge_ok && !purged && b->kind != K_REGION_REFILL &&
	    b->kind != K_ANON && b->kind != K_MALLOC)
		fail("%s: INTACT after a successful full purge", kind_name[b->kind]);
	for (size_t i = 0; i < PAGES / 2; i++) {
		enum look l = look_at(b->base + i * pg, b->want[i], 0, &seen);

		if (l == L_SIGBUS)
			fail("%s: page %zu raises SIGBUS after mark_nonvolatile said %s",
			     kind_name[b->kind], i, purged ? "PURGED" : "INTACT");
		else if (l == L_TORN || l == L_OTHER)
			fail("%s: page %zu torn after mark_nonvolatile", kind_name[b->kind], i);
		else if (l == L_ZERO && !purged)
			fail("%s: page %zu lost its bytes after VRANGE_INTACT",
			     kind_name[b->kind], i);
		/* Non-volatile now: whatever it holds must stay. */
		b->want[i] = l == L_ZERO ? 0 : b->want[i];
		if (l == L_ZERO)
			memset(b->base + i * pg, b->want[i] = (unsigned char)(0xC1 + i), pg);
	}
}

/* ---- one cycle ----------------------------------------------------------- */

static void fork_child_check(struct buf *bufs)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return;
	if (pid == 0) {
		int purged;

		/* The child's copies are ordinary memory; never a signal. */
		for (int k = 0; k < K_COUNT; k++) {
			volatile unsigned char *p = bufs[k].base;

			for (size_t i = 0; bufs[k].live && i < PAGES; i++)
				(void)p[i * pg];
		}
		if (bufs[K_ANON].live) {
			vrange(bufs[K_ANON].base, PAGES * pg, VRANGE_VOLATILE, NULL);
			vrange(bufs[K_ANON].base, PAGES * pg, VRANGE_NONVOLATILE, &purged);
		}
		_exit(0);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail("forked child died (status %#x)", st);
}

/* ---- the purgeable cache ------------------------------------------------- */

#define CACHE_KEYS 6       /* small values, a large one, a reserved one */

struct cache_run {
	vrange_cache *c;
	bool stored[CACHE_KEYS];   /* put or commit succeeded */
	const void *held;          /* one value held across the purge */
	size_t held_key;
	unsigned char salt;        /* per cycle: a stale value shows */
};

static size_t cache_vlen(size_t k)
{
	return k == 1 ? 2 * pg + 10 : 100 + 37 * k; /* key 1 has pages of its own */
}

static unsigned char cache_byte(const struct cache_run *cr, size_t k, size_t i)
{
	return (unsigned char)(cr->salt + 29 * k + i % 251);
}

static bool cache_value_ok(const struct cache_run *cr, size_t k, const unsigned char *v,
			   size_t vlen)
{
	if (vlen != cache_vlen(k))
		return false;
	for (size_t i = 0; i < vlen; i++)
		if (v[i] != cache_byte(cr, k, i))
			return false;
	return true;
}

/* Store key k: put, or reserve and commit (key 2; key 3 is aborted). */
static void cache_store(struct cache_run *cr, size_t k)
{
	static unsigned char val[2 * 65536 + 64]; /* pages up to 64 KiB */
	unsigned char *buf = val;
	size_t vlen = cache_vlen(k);
	void *rb = NULL;
	int r;

	if (k == 2 || k == 3) {
		r = vrange_cache_reserve(cr->c, &k, sizeof(k), vlen, &rb);
		if (!ok_result("vrange_cache_reserve", r))
			return;
		buf = rb;
	}
	for (size_t i = 0; i < vlen; i++)
		buf[i] = cache_byte(cr, k, i);
	if (k == 3) {
		ok_result("vrange_cache_abort", vrange_cache_abort(cr->c, rb));
		return;
	}
	if (k == 2) {
		r = vrange_cache_commit(cr->c, rb);
		/* -ENOMEM leaves the reservation open: abort it. */
		if (!ok_result("vrange_cache_commit", r) &&
		    !ok_result("vrange_cache_abort after a failed commit",
			       vrange_cache_abort(cr->c, rb)))
			fail("a reservation whose commit failed cannot be aborted");
	} else {
		r = vrange_cache_put(cr->c, &k, sizeof(k), val, vlen);
		ok_result("vrange_cache_put", r);
	}
	cr->stored[k] = r == 0;
}

/* Look key k up: its exact bytes or a miss, never anything else; keep the
 * value held if hold, else release it. */
static void cache_lookup(struct cache_run *cr, size_t k, bool must_hit, bool hold)
{
	const void *v = NULL;
	size_t vlen = 0;
	int r = vrange_cache_get(cr->c, &k, sizeof(k), &v, &vlen);

	if (r == -ENOENT) {
		if (strict && must_hit && !storming && cr->stored[k])
			fail("cache: key %zu stored but missed before any purge", k);
		cr->stored[k] = false;
		return;
	}
	if (!ok_result("vrange_cache_get", r))
		return;
	if (!cr->stored[k])
		fail("cache: key %zu hit although it was never stored", k);
	else if (!cache_value_ok(cr, k, v, vlen))
		fail("cache: key %zu returned wrong bytes (%zu bytes)", k, vlen);
	if (hold && !cr->held) {
		cr->held = v;
		cr->held_key = k;
		return;
	}
	ok_result("vrange_cache_release", vrange_cache_release(cr->c, v));
}

/* Before the purge: a cache with every kind of value, one of them held. */
static void cache_fill(struct cache_run *cr, unsigned char salt)
{
	struct vrange_cache_opts o = { .struct_size = sizeof(o), .name = "sweep",
				       .priority = 1 };

	memset(cr, 0, sizeof(*cr));
	cr->salt = salt;
	if (!ok_result("vrange_cache_create", vrange_cache_create(&o, &cr->c)))
		return;
	for (size_t k = 0; k < CACHE_KEYS; k++)
		cache_store(cr, k);
	for (size_t k = 0; k < CACHE_KEYS; k++)
		cache_lookup(cr, k, true, k == 4);
}

/* After the purge: held bytes intact, the rest exact or missing; then
 * the cache goes, which must succeed once nothing is held. */
static void cache_check_close(struct cache_run *cr)
{
	struct vrange_cache_stats cs = { .struct_size = sizeof(cs) };
	int r;

	if (!cr->c)
		return;
	if (cr->held && !cache_value_ok(cr, cr->held_key, cr->held,
					cache_vlen(cr->held_key)))
		fail("cache: a held value changed across the purge");
	for (size_t k = 0; k < CACHE_KEYS; k++)
		cache_lookup(cr, k, false, false);
	r = vrange_cache_remove(cr->c, &(size_t){ 0 }, sizeof(size_t));
	if (r != -ENOENT)
		ok_result("vrange_cache_remove", r);
	ok_result("vrange_cache_get_stats", vrange_cache_get_stats(cr->c, &cs));
	if (cr->held)
		ok_result("vrange_cache_release (held)", vrange_cache_release(cr->c, cr->held));
	r = vrange_cache_destroy(cr->c);
	if (!ok_result("vrange_cache_destroy", r) && vrange_cache_destroy(cr->c) < 0)
		fail("vrange_cache_destroy fails again after the fault: %s", strerror(-r));
}

static void cycle(void)
{
	struct buf bufs[K_COUNT];
	struct vrange_monitor_opts mo = { .struct_size = sizeof(mo),
					  .flags = VRANGE_MONITOR_NO_PSI };
	struct vrange_stats st;
	struct cache_run cr;
	static unsigned char salt;
	bool purge_ok;
	ssize_t freed;
	int r;

	for (int k = 0; k < K_COUNT; k++)
		buf_open(&bufs[k], k);
	cache_fill(&cr, ++salt);
	r = vrange_monitor_start(&mo);
	if (r != -EALREADY)
		ok_result("vrange_monitor_start", r);
	for (int k = 0; k < K_COUNT; k++) {
		struct buf *b = &bufs[k];

		if (!b->live)
			continue;
		if (b->r)
			ok_result("vrange_region_set_priority",
				  vrange_region_set_priority(b->r, k % 3));
		r = mark(b, 0, PAGES / 2, VRANGE_VOLATILE, NULL);
		if (!ok_result("mark_volatile", r)) {
			r = mark(b, 0, PAGES / 2, VRANGE_VOLATILE, NULL);
			if (r < 0)
				fail("%s: mark_volatile fails again after the fault: %s",
				     kind_name[k], strerror(-r));
		}
		r = is_volatile(b, 0, PAGES);
		if (ok_result("is_volatile", r) && strict && b->r && r != 1)
			fail("%s: is_volatile says %d", kind_name[k], r);
	}
	ok_result("vrange_set_budget", vrange_set_budget(PAGES * pg));
	if (bufs[K_REGION_ZERO].live)
		ok_result("vrange_region_purge", vrange_region_purge(bufs[K_REGION_ZERO].r));
	freed = vrange_purge(SIZE_MAX);
	purge_ok = ok_result("vrange_purge", freed);
	ok_result("vrange_get_stats", vrange_get_stats(&st));
	cache_check_close(&cr);
	for (int k = 0; k < K_COUNT; k++) {
		if (!bufs[k].live)
			continue;
		check_stable(&bufs[k], "after the purge");
		probe_volatile(&bufs[k], 0, purge_ok);
		probe_volatile(&bufs[k], 1, purge_ok);
	}
	for (int k = 0; k < K_COUNT; k++) {
		if (!bufs[k].live)
			continue;
		unmark_and_check(&bufs[k], purge_ok);
		check_stable(&bufs[k], "after mark_nonvolatile");
	}
	ok_result("vrange_set_budget(0)", vrange_set_budget(0));
	fork_child_check(bufs);
	ok_result("vrange_monitor_stop", vrange_monitor_stop());
	for (int k = 0; k < K_COUNT; k++)
		buf_close(&bufs[k]);
}

/* ---- the shim's cycle ------------------------------------------------------ */

/*
 * Shim mode (argument "shim", libvrange-ashmem-fault.so preloaded): the
 * same sweep over an ashmem area's life.  The preloaded shim's
 * vrange_fault_* come first in the lookup order, so they steer its copy of
 * the library and its own calls.
 */
static bool shim_mode;

struct ashmem_pin {
	uint32_t offset, len;
};
#define ASHMEM_SET_NAME _IOW(0x77, 1, char[256])
#define ASHMEM_SET_SIZE _IOW(0x77, 3, size_t)
#define ASHMEM_PIN _IOW(0x77, 7, struct ashmem_pin)
#define ASHMEM_UNPIN _IOW(0x77, 8, struct ashmem_pin)
#define ASHMEM_GET_PIN_STATUS _IO(0x77, 9)
#define ASHMEM_PURGE_ALL_CACHES _IO(0x77, 10)

/* An ioctl's answer (-1 and errno) as the library's convention. */
static long io(long r)
{
	return r < 0 ? -errno : r;
}

static long ioctl_retry(const char *what, int fd, unsigned long req, void *arg)
{
	long r = io(ioctl(fd, req, arg));

	if (!ok_result(what, r))
		r = io(ioctl(fd, req, arg));
	if (r < 0)
		fail("%s fails again after the fault: %s", what, strerror((int)-r));
	return r;
}

static void shim_check(const unsigned char *p, const unsigned char *want, size_t first,
		       size_t n, bool zero_ok, const char *when)
{
	unsigned char seen;

	for (size_t i = first; i < first + n; i++) {
		enum look l = look_at(p + i * pg, want[i], 0, &seen);

		if (l != L_DATA && !(l == L_ZERO && zero_ok))
			fail("ashmem page %zu %s: look %d, byte %#x", i, when, l, seen);
	}
}

/* Send fd over sock (SCM_RIGHTS); receive one from it: the descriptor, or
 * -1 (the peer sent none). */
static bool send_fd(int sock, int fd)
{
	return fd_pass_send(sock, "x", 1, fd) == 0;
}

static int recv_fd(int sock)
{
	char byte;
	int fd;

	return fd_pass_recv(sock, &byte, 1, &fd) == 1 ? fd : -1;
}

/* A forked child's new area, filled and sent over a socket (it ends once
 * the parent has it). */
static void area_sender(int sock)
{
	int fd = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
	unsigned char *q;
	char c;

	if (fd >= 0 && ioctl(fd, ASHMEM_SET_SIZE, (void *)(uintptr_t)(PAGES * pg)) == 0) {
		q = mmap(NULL, PAGES * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (q != MAP_FAILED) {
			for (size_t i = 0; i < PAGES; i++)
				memset(q + i * pg, 0x61 + (int)i, pg);
			munmap(q, PAGES * pg);
			/* Sent: wait until the parent has it (its close). */
			if (send_fd(sock, fd))
				while (read(sock, &c, 1) < 0 && errno == EINTR)
					;
		}
	}
	_exit(0);
}

/* An area another process made arrives over a socket (the shim takes it
 * on in recvmsg): its bytes, then an unpin, purge and pin through it. */
static void shim_received(void)
{
	struct ashmem_pin lo = { 0, (uint32_t)(PAGES / 2 * pg) };
	unsigned char want[PAGES], *p;
	int sv[2], fd, st;
	long purged, r;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		close(sv[1]); /* its end waits for the parent's close */
		area_sender(sv[0]);
	}
	close(sv[0]);
	fd = pid > 0 ? recv_fd(sv[1]) : -1;
	close(sv[1]);
	if (pid > 0) {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (fd < 0) {
		/* The sender met the fault (it runs the same wrappers). */
		if (strict)
			fail("no ashmem area arrived from the sending child");
		return;
	}
	p = mmap(NULL, PAGES * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ok_result("mmap of a received ashmem fd", -errno);
		goto out;
	}
	for (size_t i = 0; i < PAGES; i++)
		want[i] = (unsigned char)(0x61 + i);
	shim_check(p, want, 0, PAGES, false, "as received");
	if (ioctl_retry("ASHMEM_UNPIN (received)", fd, ASHMEM_UNPIN, &lo) < 0)
		goto unmap;
	purged = io(ioctl(fd, ASHMEM_PURGE_ALL_CACHES));
	if (purged != -EPERM)
		ok_result("ASHMEM_PURGE_ALL_CACHES", purged);
	shim_check(p, want, PAGES / 2, PAGES / 2, false, "received, pinned, after a purge");
	r = ioctl_retry("ASHMEM_PIN (received)", fd, ASHMEM_PIN, &lo);
	if (r < 0)
		goto unmap;
	if (strict && purged > 0 && r != 1)
		fail("ASHMEM_PIN (received) says NOT_PURGED after a successful purge");
	shim_check(p, want, 0, PAGES / 2, r == 1, "received, after PIN");
unmap:
	munmap(p, PAGES * pg);
out:
	close(fd);
}

static void cycle_shim(void)
{
	struct ashmem_pin lo = { 0, (uint32_t)(PAGES / 2 * pg) };
	unsigned char want[PAGES], *p;
	char name[256] = "sweep";
	long purged, r;
	int fd, st;
	pid_t pid;

	fd = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ok_result("open(/dev/ashmem)", -errno);
		return;
	}
	ok_result("ASHMEM_SET_NAME", io(ioctl(fd, ASHMEM_SET_NAME, name)));
	if (ioctl_retry("ASHMEM_SET_SIZE", fd, ASHMEM_SET_SIZE,
			(void *)(uintptr_t)(PAGES * pg)) < 0)
		goto out;
	p = mmap(NULL, PAGES * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ok_result("mmap of an ashmem fd", -errno);
		goto out;
	}
	for (size_t i = 0; i < PAGES; i++)
		memset(p + i * pg, want[i] = (unsigned char)(0x31 + i), pg);
	if (ioctl_retry("ASHMEM_UNPIN", fd, ASHMEM_UNPIN, &lo) < 0)
		goto unmap;
	r = io(ioctl(fd, ASHMEM_GET_PIN_STATUS, &lo));
	if (ok_result("ASHMEM_GET_PIN_STATUS", r) && strict && r != 0)
		fail("GET_PIN_STATUS says %ld for an unpinned range", r);
	purged = io(ioctl(fd, ASHMEM_PURGE_ALL_CACHES));
	if (purged != -EPERM)
		ok_result("ASHMEM_PURGE_ALL_CACHES", purged);
	shim_check(p, want, PAGES / 2, PAGES / 2, false, "pinned, after a purge");
	shim_check(p, want, 0, PAGES / 2, true, "unpinned, after a purge");
	r = ioctl_retry("ASHMEM_PIN", fd, ASHMEM_PIN, &lo);
	if (r < 0)
		goto unmap;
	if (strict && purged > 0 && r != 1)
		fail("ASHMEM_PIN says NOT_PURGED after a successful purge");
	/* NOT_PURGED: every byte as it was. */
	shim_check(p, want, 0, PAGES / 2, r == 1, "after PIN");
	shim_check(p, want, PAGES / 2, PAGES / 2, false, "pinned all along");
	r = dup(fd);
	if (r >= 0)
		close((int)r);
	pid = fork();
	if (pid == 0) {
		volatile unsigned char *q = p;

		for (size_t i = 0; i < PAGES; i++)
			(void)q[i * pg];
		_exit(0);
	}
	if (pid > 0) {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			fail("forked child died (status %#x)", st);
	}
unmap:
	munmap(p, PAGES * pg);
out:
	close(fd);
	shim_received();
}

/* ---- what is left over ---------------------------------------------------- */

struct leftovers {
	long fds, memfd_maps, missing_regs;
};

static bool verbose; /* VRANGE_FAULT_ONE: say what is left over */

static long count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], to[256];
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		ssize_t k;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		k = readlink(path, to, sizeof(to) - 1);
		to[k > 0 ? k : 0] = '\0';
		/* The library keeps a descriptor for every file whose shared
		 * mapping vrange() has seen (its state outlives the mapping,
		 * contract 5): that one is not a leak, and which cycle's file
		 * it is depends on address reuse. */
		if (!strstr(to, "/memfd:sweep-shared"))
			n++;
		if (verbose)
			fprintf(stderr, "  fd %s -> %s\n", e->d_name, to);
	}
	closedir(d);
	return n - 1; /* the directory's own */
}

static void measure(struct leftovers *l)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];

	l->fds = count_fds();
	l->memfd_maps = l->missing_regs = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "/memfd:") && !strstr(line, "/memfd:sweep-shared"))
			l->memfd_maps++;
		if (!strncmp(line, "VmFlags:", 8) && strstr(line, " um"))
			l->missing_regs++;
	}
	fclose(f);
}

/* ---- runs ---------------------------------------------------------------- */

struct shared_out {
	uint64_t counts[MAX_SITES];
	struct leftovers left;
	int fired;
	int sigbus;
};

static struct shared_out *out; /* MAP_SHARED: children report here */

/* One child: optionally a fault in the first cycle, then a clean one. */
static int child_run(int site, uint64_t nth, int err)
{
	vrange_fault_reset();
	if (site >= 0)
		vrange_fault_arm((unsigned)site, nth, err);
	verdict_errno = site >= 0 && (err == EPERM || err == EACCES || err == ENOSYS ||
				      err == EINVAL || err == EOPNOTSUPP);
	strict = site < 0;
	in_fault_cycle = true;
	shim_mode ? cycle_shim() : cycle();
	in_fault_cycle = false;
	out->fired = vrange_fault_fired();
	for (unsigned s = 0; s < vrange_fault_nsites() && s < MAX_SITES; s++)
		out->counts[s] = vrange_fault_count(s);
	vrange_fault_reset(); /* disarms */
	if (verbose) {
		struct leftovers l;

		fprintf(stderr, "after the faulted cycle:\n");
		measure(&l);
		fprintf(stderr, "after the clean cycle:\n");
	}
	strict = true;
	shim_mode ? cycle_shim() : cycle();
	measure(&out->left);
	out->sigbus = saw_sigbus;
	return failures ? 1 : 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Fork a run and wait for it (with a timeout); 0 if it passed. */
static int run(int site, uint64_t nth, int err, const char *label)
{
	double t0 = now();
	pid_t pid = fork();
	int st = 0;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		alarm(RUN_TIMEOUT_S + 5);
		_exit(child_run(site, nth, err));
	}
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			break;
		if (now() - t0 > RUN_TIMEOUT_S) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fprintf(stderr, "FAIL %s: hung (killed after %d s)\n", label,
				RUN_TIMEOUT_S);
			return 1;
		}
		usleep(2000);
	}
	if (WIFSIGNALED(st)) {
		fprintf(stderr, "FAIL %s: killed by signal %d\n", label, WTERMSIG(st));
		return 1;
	}
	if (WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL %s: exit %d (reasons above)\n", label,
			WEXITSTATUS(st));
		return 1;
	}
	return 0;
}

/* ---- vrange_region_fd: what its errors mean ------------------------------ */

static int site_of(const char *name)
{
	for (unsigned s = 0; s < vrange_fault_nsites(); s++)
		if (!strcmp(vrange_fault_site_name(s), name))
			return (int)s;
	return -1;
}

/*
 * vrange_region_fd() moves the region's state into shared metadata: an
 * interrupted ftruncate there is retried (nothing was done), never passed
 * on as -EINTR; a file system with no room for the attribute is -ENOSPC,
 * documented, and the region keeps working: the next call succeeds
 * (issue 25, item 9).  In a forked child: the library starts fresh.
 */
static int region_fd_child(void)
{
	int ft = site_of("ftruncate"), xa = site_of("fsetxattr"), bad = 0, r;
	vrange_region *a = NULL, *b = NULL;

	if (ft < 0 || xa < 0)
		return 77;
	if (vrange_region_create("fd-eintr", PAGES * pg, VRANGE_ACCESS_ZERO, &a) ||
	    vrange_region_create("fd-enospc", PAGES * pg, VRANGE_ACCESS_ZERO, &b))
		return 2;
	memset(vrange_region_base(a), 1, PAGES * pg);
	if (vrange_mark_volatile(a, 0, PAGES * pg / 2))
		return 2;
	vrange_fault_reset();
	vrange_fault_arm((unsigned)ft, 1, EINTR);
	r = vrange_region_fd(a);
	if (!vrange_fault_fired()) {
		fprintf(stderr, "FAIL vrange_region_fd: no ftruncate to interrupt\n");
		bad = 1;
	} else if (r < 0) {
		fprintf(stderr, "FAIL vrange_region_fd: %s from an interrupted "
			"ftruncate, not retried\n", strerror(-r));
		bad = 1;
	}
	if (vrange_mark_nonvolatile(a, 0, PAGES * pg / 2) != VRANGE_INTACT) {
		fprintf(stderr, "FAIL after the interrupted ftruncate: pages not intact\n");
		bad = 1;
	}
	vrange_fault_reset();
	vrange_fault_arm((unsigned)xa, 1, ENOSPC);
	r = vrange_region_fd(b);
	if (vrange_fault_fired() && r != -ENOSPC) {
		fprintf(stderr, "FAIL vrange_region_fd: %d when the attribute "
			"found no room, -ENOSPC documented\n", r);
		bad = 1;
	}
	vrange_fault_reset();
	r = vrange_region_fd(b);
	if (r < 0) {
		fprintf(stderr, "FAIL vrange_region_fd after -ENOSPC: %s\n",
			strerror(-r));
		bad = 1;
	}
	vrange_region_destroy(a);
	vrange_region_destroy(b);
	return bad;
}

static int region_fd_errors(void)
{
	pid_t pid = fork();
	int st = 0;

	if (pid < 0)
		return 1;
	if (pid == 0) {
		alarm(RUN_TIMEOUT_S);
		_exit(region_fd_child());
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 77)) {
		fprintf(stderr, "FAIL vrange_region_fd errors (status %#x)\n", st);
		return 1;
	}
	printf("vrange_region_fd: EINTR retried, ENOSPC documented%s\n",
	       WEXITSTATUS(st) == 77 ? " (skipped: no such sites)" : "");
	return 0;
}

/* ---- EINTR from real signals --------------------------------------------- */

static volatile sig_atomic_t ticks;
static _Atomic bool storm_over;

static void on_tick(int sig)
{
	(void)sig;
	ticks++;
}

/* Marks a region of its own over and over while the cycles run, so locks
 * are contended and waits happen while the signals arrive. */
static void *contender(void *arg)
{
	vrange_region *r = arg;
	int bad = 0;

	while (!storm_over) {
		int v = vrange_mark_volatile(r, 0, PAGES * pg);
		int n = vrange_mark_nonvolatile(r, 0, PAGES * pg);

		bad += v < 0 || n < 0;
		vrange_purge(pg);
	}
	return (void *)(intptr_t)bad;
}

static int signal_storm(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		struct sigaction sa = { .sa_handler = on_tick }; /* no SA_RESTART */
		struct itimerval it = { { 0, 200 }, { 0, 200 } };

		vrange_region *r = NULL;
		pthread_t t;
		void *bad = NULL;
		bool threaded;

		sigaction(SIGALRM, &sa, NULL);
		sigaction(SIGUSR1, &sa, NULL);
		alarm(0);
		setitimer(ITIMER_REAL, &it, NULL);
		strict = true;
		storming = true;
		/* Purged last: a pass stops at the first range marked after it
		 * began, and the contender's always is. */
		threaded = !shim_mode &&
			   vrange_region_create("contender", PAGES * pg, 0, &r) == 0 &&
			   vrange_region_set_priority(r, 1000) == 0 &&
			   pthread_create(&t, NULL, contender, r) == 0;
		for (int i = 0; i < STORM_CYCLES; i++)
			shim_mode ? cycle_shim() : cycle();
		storm_over = true;
		if (threaded && (pthread_join(t, &bad) || bad))
			fail("contending thread: %ld calls failed", (long)(intptr_t)bad);
		vrange_region_destroy(r);
		it = (struct itimerval){ { 0, 0 }, { 0, 0 } };
		setitimer(ITIMER_REAL, &it, NULL);
		fprintf(stderr, "signal storm: %ld signals during %d cycles\n", (long)ticks,
			STORM_CYCLES);
		_exit(failures ? 1 : 0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return 1;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "FAIL signal storm: status %#x\n", st);
		return 1;
	}
	return 0;
}

/* ---- the sweep ------------------------------------------------------------ */

struct pair {
	unsigned site;
	int err;
	uint64_t calls; /* in the reference's faulted cycle */
};

/* The rank-th call number tried for a site with `calls` calls, or 0 when
 * there is none: 1, 2, 3, 4, the last, then a spread. */
static uint64_t pick_nth(uint64_t calls, unsigned rank, unsigned per_pair, bool full)
{
	if (full || calls <= per_pair)
		return rank < calls ? rank + 1 : 0;
	if (rank >= per_pair)
		return 0;
	if (rank < 4)
		return rank + 1;
	if (rank == 4)
		return calls;
	/* Then (4, calls) in van der Corput order: every prefix of the ranks
	 * is spread over the whole range, so a budget that runs out cuts
	 * the sampling evenly, not the late calls. */
	double frac = 0, half = 0.5;

	for (unsigned j = rank - 4; j; j >>= 1, half /= 2)
		frac += (j & 1) * half;
	return 5 + (uint64_t)(frac * (double)(calls - 5));
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_sigaction = on_sigbus,
				.sa_flags = SA_SIGINFO | SA_NODEFER };
	const char *mode = getenv("VRANGE_FAULT_SWEEP");
	const char *budget_env = getenv("VRANGE_FAULT_BUDGET");
	bool full = mode && !strcmp(mode, "full");
	double budget = budget_env ? atof(budget_env) : 50, t0 = now(), t_ref;
	struct leftovers ref;
	struct pair pairs[MAX_SITES * 4];
	unsigned npairs = 0, per_pair, nsites = vrange_fault_nsites(), covered_sites = 0;
	unsigned long runs = 0, failed = 0, not_reached = 0;
	int status = 0;

	setenv("VRANGE_MONITOR", "0", 1);
	shim_mode = argc > 1 && !strcmp(argv[1], "shim");
	pg = (size_t)sysconf(_SC_PAGESIZE);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	if (nsites > MAX_SITES)
		nsites = MAX_SITES;
	out = mmap(NULL, sizeof(*out), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (out == MAP_FAILED)
		return 99;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("VRANGE_FAULT_ONE")) {
		/* Reproduce one run: VRANGE_FAULT_ONE=site-name/N/errno */
		char name[64];
		unsigned long long nth;
		int err, site = -1;

		verbose = true;
		if (sscanf(getenv("VRANGE_FAULT_ONE"), "%63[^/]/%llu/%d", name, &nth,
			   &err) != 3)
			return 2;
		for (unsigned s = 0; s < nsites; s++)
			if (!strcmp(vrange_fault_site_name(s), name))
				site = (int)s;
		if (run(-1, 0, 0, "reference") || site < 0)
			return 2;
		ref = out->left;
		status = run(site, nth, err, "the run");
		printf("fired %d; left %ld fds (reference %ld), %ld memfd maps (%ld), "
		       "%ld MISSING (%ld)\n", out->fired, out->left.fds, ref.fds,
		       out->left.memfd_maps, ref.memfd_maps, out->left.missing_regs,
		       ref.missing_regs);
		return status;
	}

	/* 0. The errors of vrange_region_fd (one case each). */
	if (!shim_mode)
		status |= region_fd_errors();

	/* 1. The reference: must pass with faults off. */
	if (run(-1, 0, 0, "reference (no fault)")) {
		fprintf(stderr, "the clean scenario fails: nothing to sweep against\n");
		return 1;
	}
	t_ref = now() - t0;
	ref = out->left;
	expect_sigbus = out->sigbus;
	for (unsigned s = 0; s < nsites; s++) {
		unsigned n;
		const int *errs = vrange_fault_site_errnos(s, &n);

		if (out->counts[s])
			covered_sites += n > 0;
		for (unsigned i = 0; i < n && out->counts[s]; i++)
			pairs[npairs++] = (struct pair){ s, errs[i], out->counts[s] };
		printf("site %-28s %6llu calls%s\n", vrange_fault_site_name(s),
		       (unsigned long long)out->counts[s],
		       n == 0 ? " (counted only)" : out->counts[s] ? "" : " (not reached)");
	}
	printf("reference: %.0f ms per run; left over: %ld fds, %ld memfd mappings, "
	       "%ld MISSING registrations\n",
	       t_ref * 1000, ref.fds, ref.memfd_maps, ref.missing_regs);

	/* 2. One fault per run, spread so the budget covers every pair. */
	per_pair = 64; /* at most; the budget decides how many ranks run */
	for (unsigned rank = 0;; rank++) {
		bool any = false;

		for (unsigned p = 0; p < npairs; p++) {
			uint64_t nth = pick_nth(pairs[p].calls, rank, per_pair, full);
			char label[128];

			if (!nth)
				continue;
			any = true;
			if (!full && now() - t0 > budget)
				goto done;
			snprintf(label, sizeof(label), "%s call %llu %s",
				 vrange_fault_site_name(pairs[p].site),
				 (unsigned long long)nth, strerror(pairs[p].err));
			memset(out, 0, sizeof(*out));
			runs++;
			if (run((int)pairs[p].site, nth, pairs[p].err, label)) {
				failed++;
				continue;
			}
			not_reached += !out->fired;
			/* A failed munmap leaves its mapping: that is the
			 * fault itself, not a leak of the library's. */
			bool unmap = !strcmp(vrange_fault_site_name(pairs[p].site), "munmap");

			if (out->left.fds > ref.fds ||
			    (!unmap && out->left.memfd_maps > ref.memfd_maps) ||
			    (!unmap && out->left.missing_regs > ref.missing_regs)) {
				fprintf(stderr, "FAIL %s: leak: %ld fds, %ld memfd mappings, "
					"%ld MISSING registrations left (reference %ld/%ld/%ld)\n",
					label, out->left.fds, out->left.memfd_maps,
					out->left.missing_regs, ref.fds, ref.memfd_maps,
					ref.missing_regs);
				failed++;
			}
		}
		if (!any)
			break;
	}
done:
	/* 3. Real signals. */
	if (signal_storm()) {
		failed++;
	}
	printf("fault sweep%s (%s): %u sites with errnos reached, %u (site, errno) "
	       "pairs, %lu runs (%lu faults not reached), %lu failed, %.1f s\n",
	       shim_mode ? " of the ashmem shim" : "", full ? "full" : "bounded",
	       covered_sites, npairs, runs, not_reached, failed, now() - t0);
	return failed || status ? 1 : 0;
}
