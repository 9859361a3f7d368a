/* SPDX-License-Identifier: MIT */
/*
 * bench_uffd.c - what touching a purged page costs, against bare
 * userfaultfd measured in the same run:
 *
 *   sigbus   one SIGBUS taken on a purged page of a library region (fault,
 *            signal, siglongjmp) vs the same on a memfd page the benchmark
 *            registered itself (UFFD_FEATURE_SIGBUS) and punched.
 *            Target: within 1.2x.
 *   refill   pages/s refilled through a region's callback vs a bare monitor
 *            thread answering MISSING faults with UFFDIO_COPY.
 *            Target: at least 0.8x.
 *   sigbus in another process
 *            the same SIGBUS taken in a process that adopted the region
 *            and did not purge (its touch goes through the fault thread,
 *            which poisons the page) vs the bare uffd SIGBUS.
 *   first touch
 *            memset of a fresh 64 MiB SIGBUS-mode region (armed: holes go
 *            through the fault thread) vs a 64 MiB memfd mapped by hand
 *            (the kernel's own fault path, what a region cost before it
 *            was armed).  Target: at least 0.8x.
 *   first touch in a fork child
 *            a fork child reads one byte of each page of 64 MiB its parent
 *            wrote, in order and in a random order: a SIGBUS region (armed
 *            for minor faults too: every page the child does not map yet
 *            goes through its fault thread) vs a plain memfd mapping (the
 *            kernel's fault path, with its fault-around).
 *
 * Best of several rounds each, alternating library and bare, so that CPU
 * placement and frequency treat both alike.  Prints; asserts nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vrange.h"

#define PAGES 2048
#define ROUNDS 7

static size_t ps;
static sigjmp_buf jb;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	siglongjmp(jb, 1);
}

/* Touch every page of base once, expecting SIGBUS; seconds per fault. */
static double fault_all(char *base, size_t pages)
{
	volatile size_t i = 0, faults = 0;
	double t0 = now();

	sigsetjmp(jb, 1);
	while (i < pages) {
		size_t k = i++;

		(void)((volatile char *)base)[k * ps];
	}
	/* Each siglongjmp lands at sigsetjmp, counting happens there. */
	faults = pages;
	return (now() - t0) / (double)faults;
}

static int bare_uffd(uint64_t features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };
	int fd = (int)syscall(__NR_userfaultfd, O_CLOEXEC);

	if (fd < 0)
		fd = (int)syscall(__NR_userfaultfd, O_CLOEXEC | 1 /* USER_MODE_ONLY */);
	if (fd < 0 || ioctl(fd, UFFDIO_API, &api) < 0) {
		perror("userfaultfd");
		exit(1);
	}
	return fd;
}

static char *bare_mapping(int *mfd, size_t pages)
{
	char *p;

	*mfd = memfd_create("bench-bare", MFD_CLOEXEC);
	if (*mfd < 0 || ftruncate(*mfd, (off_t)(pages * ps)) < 0)
		exit(1);
	p = mmap(NULL, pages * ps, PROT_READ | PROT_WRITE, MAP_SHARED, *mfd, 0);
	if (p == MAP_FAILED)
		exit(1);
	return p;
}

static void uregister(int ufd, char *p, size_t len)
{
	struct uffdio_register reg = {
		.range = { (uintptr_t)p, len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	if (ioctl(ufd, UFFDIO_REGISTER, &reg) < 0) {
		perror("UFFDIO_REGISTER");
		exit(1);
	}
}

static double bare_sigbus(void)
{
	int ufd = bare_uffd(UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MISSING_SHMEM), mfd;
	char *p = bare_mapping(&mfd, PAGES);
	double t;

	memset(p, 1, PAGES * ps);
	uregister(ufd, p, PAGES * ps);
	fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		  (off_t)(PAGES * ps));
	t = fault_all(p, PAGES);
	munmap(p, PAGES * ps);
	close(mfd);
	close(ufd);
	return t;
}

static double lib_sigbus(void)
{
	vrange_region *r;
	char *p;
	double t;

	if (vrange_region_create("bench", PAGES * ps, VRANGE_ACCESS_SIGBUS, &r) < 0) {
		fprintf(stderr, "no SIGBUS mode here\n");
		exit(77);
	}
	p = vrange_region_base(r);
	memset(p, 1, PAGES * ps);
	vrange_mark_volatile(r, 0, PAGES * ps);
	vrange_region_purge(r);
	t = fault_all(p, PAGES);
	vrange_region_destroy(r);
	return t;
}

/* ---- refill ---- */

struct monitor {
	int ufd;
	char *src;
};

static void *monitor_main(void *arg)
{
	struct monitor *m = arg;
	struct uffd_msg msg[16];

	for (;;) {
		ssize_t n = read(m->ufd, msg, sizeof(msg));

		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(msg[0]); i++) {
			uintptr_t a = (uintptr_t)msg[i].arg.pagefault.address &
				      ~(uintptr_t)(ps - 1);
			struct uffdio_copy c = {
				.dst = a, .src = (uintptr_t)m->src, .len = ps,
			};

			if (msg[i].event != UFFD_EVENT_PAGEFAULT)
				continue;
			memset(m->src, (int)(a >> 12), ps); /* "regenerate" */
			if (ioctl(m->ufd, UFFDIO_COPY, &c) < 0 && errno != EEXIST)
				perror("UFFDIO_COPY");
		}
	}
	return NULL;
}

static double touch_all(char *p, size_t pages)
{
	double t0 = now();
	unsigned sum = 0;

	for (size_t i = 0; i < pages; i++)
		sum += ((volatile unsigned char *)p)[i * ps];
	(void)sum;
	return (double)pages / (now() - t0);
}

static double bare_refill(void)
{
	int ufd = bare_uffd(UFFD_FEATURE_MISSING_SHMEM), mfd;
	char *p = bare_mapping(&mfd, PAGES);
	struct monitor m = { ufd, NULL };
	pthread_t t;
	double rate;

	m.src = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(p, 1, PAGES * ps);
	uregister(ufd, p, PAGES * ps);
	fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		  (off_t)(PAGES * ps));
	pthread_create(&t, NULL, monitor_main, &m);
	rate = touch_all(p, PAGES);
	/* Unmapping and closing ends the monitor's read with 0 / error. */
	munmap(p, PAGES * ps);
	close(ufd);
	pthread_cancel(t);
	pthread_join(t, NULL);
	munmap(m.src, ps);
	close(mfd);
	return rate;
}

static int fill(vrange_region *r, size_t off, void *buf, size_t len, void *arg)
{
	(void)r;
	(void)arg;
	memset(buf, (int)(off >> 12), len);
	return 0;
}

static double lib_refill(void)
{
	vrange_region *r;
	char *p;
	double rate;

	if (vrange_region_create("bench", PAGES * ps, VRANGE_ACCESS_SIGBUS, &r) < 0 ||
	    vrange_region_set_refill(r, fill, NULL) < 0)
		exit(77);
	p = vrange_region_base(r);
	memset(p, 1, PAGES * ps);
	vrange_mark_volatile(r, 0, PAGES * ps);
	vrange_region_purge(r);
	rate = touch_all(p, PAGES);
	vrange_region_destroy(r);
	return rate;
}

/* ---- SIGBUS in a process that did not purge ---- */

/* Seconds per fault in a child that adopted fd (before the purge). */
static double other_sigbus(void)
{
	vrange_region *r, *rb;
	int go[2], res[2];
	double t = 0;
	pid_t pid;
	char c;

	if (vrange_region_create("bench-other", PAGES * ps, VRANGE_ACCESS_SIGBUS, &r) < 0)
		exit(77);
	memset(vrange_region_base(r), 1, PAGES * ps);
	if (pipe(go) < 0 || pipe(res) < 0)
		exit(1);
	pid = fork();
	if (pid == 0) {
		if (vrange_region_adopt(vrange_region_fd(r), VRANGE_ACCESS_SIGBUS, &rb) < 0)
			_exit(77);
		/* The adopter's own mapping, never touched here before. */
		if (write(res[1], &t, sizeof(t)) != sizeof(t) || read(go[0], &c, 1) != 1)
			_exit(1);
		t = fault_all(vrange_region_base(rb), PAGES);
		if (write(res[1], &t, sizeof(t)) != sizeof(t))
			_exit(1);
		_exit(0);
	}
	if (read(res[0], &t, sizeof(t)) != sizeof(t))
		exit(1);
	vrange_mark_volatile(r, 0, PAGES * ps);
	vrange_region_purge(r);
	if (write(go[1], "g", 1) != 1 || read(res[0], &t, sizeof(t)) != sizeof(t))
		exit(1);
	waitpid(pid, NULL, 0);
	close(go[0]);
	close(go[1]);
	close(res[0]);
	close(res[1]);
	vrange_region_destroy(r);
	return t;
}

/* ---- first touch of a fresh region ---- */

#define FRESH_BYTES ((size_t)64 << 20)

static double bare_fresh(void)
{
	int mfd = memfd_create("bench-fresh", MFD_CLOEXEC);
	char *p;
	double t0, rate;

	if (mfd < 0 || ftruncate(mfd, (off_t)FRESH_BYTES) < 0)
		exit(1);
	p = mmap(NULL, FRESH_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED)
		exit(1);
	t0 = now();
	memset(p, 3, FRESH_BYTES);
	rate = (double)(FRESH_BYTES / ps) / (now() - t0);
	munmap(p, FRESH_BYTES);
	close(mfd);
	return rate;
}

static double lib_fresh(void)
{
	vrange_region *r;
	double t0, rate;

	if (vrange_region_create("bench-fresh", FRESH_BYTES, VRANGE_ACCESS_SIGBUS, &r) < 0)
		exit(77);
	t0 = now();
	memset(vrange_region_base(r), 3, FRESH_BYTES);
	rate = (double)(FRESH_BYTES / ps) / (now() - t0);
	vrange_region_destroy(r);
	return rate;
}

/* ---- first touches in a fork child ---- */

/* The child's time to read a byte of each page, in order or not. */
static double child_reads(char *p, size_t pages, int random)
{
	int pfd[2];
	double t = -1;
	pid_t pid;

	if (pipe(pfd) < 0)
		exit(1);
	pid = fork();
	if (pid < 0)
		exit(1);
	if (pid == 0) {
		volatile char sink;
		uint32_t x = 2463534242u;
		size_t *order = malloc(pages * sizeof(*order));
		double t0;

		if (!order)
			_exit(1);
		for (size_t i = 0; i < pages; i++)
			order[i] = i;
		for (size_t i = pages - 1; random && i > 0; i--) {
			size_t j, tmp;

			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			j = x % (i + 1);
			tmp = order[i];
			order[i] = order[j];
			order[j] = tmp;
		}
		t0 = now();
		for (size_t i = 0; i < pages; i++)
			sink = p[order[i] * ps];
		(void)sink;
		t = now() - t0;
		if (write(pfd[1], &t, sizeof(t)) != (ssize_t)sizeof(t))
			_exit(1);
		_exit(0);
	}
	if (read(pfd[0], &t, sizeof(t)) != (ssize_t)sizeof(t))
		exit(1);
	waitpid(pid, NULL, 0);
	close(pfd[0]);
	close(pfd[1]);
	return t;
}

static double bare_child(int random)
{
	int mfd = memfd_create("bench-child", MFD_CLOEXEC);
	char *p;
	double t;

	if (mfd < 0 || ftruncate(mfd, (off_t)FRESH_BYTES) < 0)
		exit(1);
	p = mmap(NULL, FRESH_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED)
		exit(1);
	memset(p, 5, FRESH_BYTES);
	t = child_reads(p, FRESH_BYTES / ps, random);
	munmap(p, FRESH_BYTES);
	close(mfd);
	return t;
}

static double lib_child(int random)
{
	vrange_region *r;
	double t;

	if (vrange_region_create("bench-child", FRESH_BYTES, VRANGE_ACCESS_SIGBUS, &r) < 0)
		exit(77);
	memset(vrange_region_base(r), 5, FRESH_BYTES);
	t = child_reads(vrange_region_base(r), FRESH_BYTES / ps, random);
	vrange_region_destroy(r);
	return t;
}

int main(void)
{
	struct sigaction sa;
	double lb = 1e9, bb = 1e9, lr = 0, br = 0;

	ps = (size_t)sysconf(_SC_PAGESIZE);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_bus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGBUS, &sa, NULL);

	lib_sigbus(); /* warm up: probe, fault thread paths, page tables */
	for (int i = 0; i < ROUNDS; i++) {
		double l = lib_sigbus(), b = bare_sigbus();

		lb = l < lb ? l : lb;
		bb = b < bb ? b : bb;
	}
	printf("sigbus fault: library %.2f us, bare uffd %.2f us, ratio %.2fx (target <= 1.2x)\n",
	       lb * 1e6, bb * 1e6, lb / bb);

	lib_refill();
	for (int i = 0; i < ROUNDS; i++) {
		double l = lib_refill(), b = bare_refill();

		lr = l > lr ? l : lr;
		br = b > br ? b : br;
	}
	printf("refill: library %.0f pages/s, bare uffd monitor %.0f pages/s, ratio %.2fx (target >= 0.8x)\n",
	       lr, br, lr / br);

	lb = 1e9;
	bb = 1e9;
	for (int i = 0; i < ROUNDS; i++) {
		double l = other_sigbus(), b = bare_sigbus();

		lb = l < lb ? l : lb;
		bb = b < bb ? b : bb;
	}
	printf("sigbus fault in a process that did not purge: library %.2f us, bare uffd %.2f us, ratio %.2fx\n",
	       lb * 1e6, bb * 1e6, lb / bb);

	lr = br = 0;
	lib_fresh();
	for (int i = 0; i < ROUNDS; i++) {
		double l = lib_fresh(), b = bare_fresh();

		lr = l > lr ? l : lr;
		br = b > br ? b : br;
	}
	printf("first touch of a fresh 64 MiB region: library %.0f pages/s, plain memfd mapping %.0f pages/s, ratio %.2fx (target >= 0.8x)\n",
	       lr, br, lr / br);

	for (int random = 0; random < 2; random++) {
		lb = bb = 1e9;
		for (int i = 0; i < ROUNDS; i++) {
			double l = lib_child(random), b = bare_child(random);

			lb = l < lb ? l : lb;
			bb = b < bb ? b : bb;
		}
		printf("fork child's first reads of 64 MiB, %s: library %.0f pages/s, plain memfd mapping %.0f pages/s, ratio %.2fx\n",
		       random ? "random order" : "in order",
		       (double)(FRESH_BYTES / ps) / lb, (double)(FRESH_BYTES / ps) / bb,
		       bb / lb);
	}
	return 0;
}
