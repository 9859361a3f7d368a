/* SPDX-License-Identifier: MIT */
/*
 * bench_scale.c - what the library costs when it is used a lot, and when
 * it is not used at all.
 *
 * Every figure is a ratio against a baseline measured in the same run:
 *  - the mark pair on one page among 10,000 volatile single-page
 *    neighbours of different ages (a page cache's pattern) / the pair alone,
 *    and on random pages of a 64 MiB region half of whose pages are
 *    volatile singles (a page cache's fetches) / the pair alone;
 *  - pairs per second of two threads, each on its own region, and of two
 *    threads on different pages of one region, far apart and adjacent /
 *    one thread alone (--threads: that part alone);
 *  - region create + destroy / raw memfd_create + ftruncate + mmap + close;
 *  - how many regions fit under a 1024-descriptor limit / raw memfds;
 *  - wake-ups of the library's threads over an idle stretch.
 * Nothing here asserts on time.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "bench_util.h"

static size_t ps;

static void check(int ret, const char *what)
{
	if (ret < 0)
		die(what, -ret);
}

static vrange_region *make(size_t pages)
{
	vrange_region *r;

	check(vrange_region_create("bench-scale", pages * ps, VRANGE_ACCESS_ZERO, &r),
	      "vrange_region_create");
	memset(vrange_region_base(r), 1, pages * ps);
	return r;
}

/* ns per pair on page `page` of r, best of 5. */
static double pair_ns(vrange_region *r, size_t page, long n)
{
	double best = 1e30;

	for (int rep = 0; rep < 5; rep++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			check(vrange_mark_volatile(r, page * ps, ps), "mark");
			if (vrange_mark_nonvolatile(r, page * ps, ps) != VRANGE_INTACT)
				die("unmark", EIO);
		}
		double t = (now_ns() - t0) / (double)n;
		if (t < best)
			best = t;
	}
	return best;
}

/* ns per pair on a random even page of r (odd pages volatile), best of 5:
 * a page cache's fetches land anywhere in a large region. */
static double random_pair_ns(vrange_region *r, size_t pages, long n)
{
	uint64_t x = 88172645463325252ull;
	double best = 1e30;

	for (int rep = 0; rep < 5; rep++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			size_t page;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			page = (size_t)(x % (pages / 2)) * 2;
			check(vrange_mark_volatile(r, page * ps, ps), "mark");
			if (vrange_mark_nonvolatile(r, page * ps, ps) != VRANGE_INTACT)
				die("unmark", EIO);
		}
		double t = (now_ns() - t0) / (double)n;
		if (t < best)
			best = t;
	}
	return best;
}

static void neighbours(void)
{
	enum { N = 10000 };
	vrange_region *alone = make(4), *busy = make(2 * N + 2);

	/* Every other page volatile: single pages, each its own age. */
	for (size_t i = 0; i < N; i++)
		check(vrange_mark_volatile(busy, (2 * i + 1) * ps, ps), "mark");
	double a = pair_ns(alone, 1, 200000);
	double b = pair_ns(busy, N, 200000);
	/* The adjacent case: the page's neighbours on both sides volatile. */
	vrange_region *adj = make(N + 1);
	for (size_t i = 0; i < N + 1; i++)
		if (i != N / 2)
			check(vrange_mark_volatile(adj, i * ps, ps), "mark");
	double c = pair_ns(adj, N / 2, 200000);
	/* 64 MiB, every other page a volatile single of its own age. */
	size_t big = (64u << 20) / ps;
	vrange_region *wide = make(big);
	for (size_t i = 1; i < big; i += 2)
		check(vrange_mark_volatile(wide, i * ps, ps), "mark");
	double d = random_pair_ns(wide, big, 200000);

	printf("%-52s %9.1f ns\n", "pair, page alone", a);
	printf("%-52s %9.1f ns   ratio %6.2fx (goal <= 3x)\n",
	       "pair among 10,000 volatile single pages", b, b / a);
	printf("%-52s %9.1f ns   ratio %6.2fx (goal <= 3x)\n",
	       "pair between 10,000 adjacent volatile pages", c, c / a);
	printf("%-52s %9.1f ns   ratio %6.2fx\n",
	       "pair on a random page of 64 MiB, half volatile", d, d / a);
	vrange_region_destroy(wide);
	vrange_region_destroy(alone);
	vrange_region_destroy(busy);
	vrange_region_destroy(adj);
}

struct worker {
	vrange_region *r;
	size_t page;
	long n;
	double ns;
};

static _Atomic int go;

static void *work(void *arg)
{
	struct worker *w = arg;

	while (!atomic_load(&go))
		;
	double t0 = now_ns();
	for (long i = 0; i < w->n; i++) {
		check(vrange_mark_volatile(w->r, w->page * ps, ps), "mark");
		/* PURGED is an answer too: the monitor purges when the
		 * machine reports memory pressure (a loaded one may). */
		check(vrange_mark_nonvolatile(w->r, w->page * ps, ps), "unmark");
	}
	w->ns = now_ns() - t0;
	return NULL;
}

/* Pairs per second of `k` workers started together. */
static double throughput(struct worker *w, int k)
{
	pthread_t t[2];
	double worst = 0;
	long pairs = 0;

	atomic_store(&go, 0);
	for (int i = 0; i < k; i++)
		if (pthread_create(&t[i], NULL, work, &w[i]))
			die("pthread_create", EAGAIN);
	atomic_store(&go, 1);
	for (int i = 0; i < k; i++) {
		pthread_join(t[i], NULL);
		if (w[i].ns > worst)
			worst = w[i].ns;
		pairs += w[i].n;
	}
	return (double)pairs / (worst / 1e9);
}

static void threads(void)
{
	const long n = 1000000;
	vrange_region *r1 = make(64), *r2 = make(64);
	struct worker one[1] = { { r1, 1, n, 0 } };
	struct worker own[2] = { { r1, 1, n, 0 }, { r2, 1, n, 0 } };
	struct worker same[2] = { { r1, 1, n, 0 }, { r1, 33, n, 0 } };
	/* Neighbouring pages: their words sit side by side unless the
	 * layout spreads them over lines (page_words.h). */
	struct worker adj[2] = { { r1, 1, n, 0 }, { r1, 2, n, 0 } };
	double base = 0, a = 0, b = 0, c = 0;

	/* In turn, best of 7 each: a loaded machine that takes the second
	 * core away hits every figure alike (adjacent / own regions is the
	 * line-sharing ratio with the load taken out). */
	for (int rep = 0; rep < 7; rep++) {
		double v;

		if ((v = throughput(one, 1)) > base)
			base = v;
		if ((v = throughput(own, 2)) > a)
			a = v;
		if ((v = throughput(same, 2)) > b)
			b = v;
		if ((v = throughput(adj, 2)) > c)
			c = v;
	}

	printf("%-52s %9.2f M/s\n", "pairs, one thread", base / 1e6);
	printf("%-52s %9.2f M/s   ratio %6.2fx (goal >= 1.8x)\n",
	       "pairs, two threads on their own regions", a / 1e6, a / base);
	printf("%-52s %9.2f M/s   ratio %6.2fx (goal >= 1.0x)\n",
	       "pairs, two threads on one region, pages far apart", b / 1e6, b / base);
	printf("%-52s %9.2f M/s   ratio %6.2fx (goal >= 1.0x)\n",
	       "pairs, two threads on one region, adjacent pages", c / 1e6, c / base);
	printf("%-52s %9s      ratio %6.2fx (goal >= 0.9x: no line shared)\n",
	       "two threads: adjacent pages / their own regions", "", c / a);
	vrange_region_destroy(r1);
	vrange_region_destroy(r2);
}

/* What a region is made of, without the library: a memfd of size bytes,
 * mapped shared (its descriptor in *fd). */
static void *raw_memfd(size_t size, int *fd)
{
	void *p;

	*fd = memfd_create("raw", MFD_CLOEXEC);
	if (*fd < 0 || ftruncate(*fd, (off_t)size) < 0)
		die("memfd", errno);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (p == MAP_FAILED)
		die("mmap", errno);
	return p;
}

static double raw_cycle(size_t size, int n)
{
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		int fd;
		void *p = raw_memfd(size, &fd);

		munmap(p, size);
		close(fd);
	}
	return (now_ns() - t0) / n;
}

static double region_cycle(size_t size, int n)
{
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		vrange_region *r;
		check(vrange_region_create("cycle", size, 0, &r), "create");
		check(vrange_region_destroy(r), "destroy");
	}
	return (now_ns() - t0) / n;
}

static void create_cost(void)
{
	const size_t size = 64 << 10;
	double raw = 1e30, lib = 1e30;

	for (int rep = 0; rep < 3; rep++) {
		double a = raw_cycle(size, 2000), b = region_cycle(size, 2000);
		if (a < raw)
			raw = a;
		if (b < lib)
			lib = b;
	}
	printf("%-52s %9.2f us   raw memfd %6.2f us   ratio %6.2fx (goal <= 3x)\n",
	       "region create + destroy, 64 KiB", lib / 1e3, raw / 1e3, lib / raw);
}

/* In a child with RLIMIT_NOFILE 1024: how many of each until the limit. */
static int count_in_child(int regions)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		die("fork", errno);
	if (pid == 0) {
		struct rlimit rl = { 1024, 1024 };
		int n = 0;

		setrlimit(RLIMIT_NOFILE, &rl);
		for (;;) {
			if (regions) {
				vrange_region *r;
				if (vrange_region_create("count", 64 << 10, 0, &r) < 0)
					break;
			} else {
				int fd = memfd_create("count", MFD_CLOEXEC);
				if (fd < 0 || ftruncate(fd, 64 << 10) < 0 ||
				    mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
					 MAP_SHARED, fd, 0) == MAP_FAILED)
					break;
			}
			n++;
		}
		/* The count travels in the exit status, in units of 8. */
		_exit(n / 8 > 255 ? 255 : n / 8);
	}
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) * 8 : -1;
}

static void fd_limit(void)
{
	int raw = count_in_child(0), lib = count_in_child(1);

	printf("%-52s %9d      raw memfds %6d      ratio %6.2fx (goal 1x)\n",
	       "regions under a 1024-descriptor limit (+-8)", lib, raw,
	       (double)lib / raw);
}

/* Voluntary + involuntary switches of every thread but the caller's. */
static long other_threads_switches(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long total = 0;
	pid_t me = gettid();

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char path[300], line[128];
		long v;
		FILE *f;

		if (e->d_name[0] == '.' || atoi(e->d_name) == me)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
				total += v;
		fclose(f);
	}
	closedir(d);
	return total;
}

static void idle(void)
{
	struct vrange_stats st;
	vrange_region *r = make(16);
	/* Already running where the library started it (VRANGE_MONITOR
	 * unset, as under `meson test --benchmark`). */
	int started = vrange_monitor_start(NULL);

	if (started != -EALREADY)
		check(started, "vrange_monitor_start");
	check(vrange_get_stats(&st), "vrange_get_stats");
	sleep(1); /* let start-up settle */
	long a = other_threads_switches();
	sleep(10);
	long b = other_threads_switches();
	printf("%-52s %9ld      (pressure source \"%s\"; goal 0)\n",
	       "library thread wake-ups over 10 s idle", b - a, st.pressure_source);
	if (started == 0)
		vrange_monitor_stop();
	vrange_region_destroy(r);
}

/* ns per page of punching every `step`-th page of a touched memfd. */
static double raw_punch(size_t pages, size_t step)
{
	int fd;
	char *p = raw_memfd(pages * ps, &fd);

	memset(p, 1, pages * ps);
	double t0 = now_ns();
	for (size_t i = 0; i < pages; i += step)
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)(i * ps), (off_t)ps) < 0)
			die("fallocate", errno);
	double t = (now_ns() - t0) / (double)((pages + step - 1) / step);
	munmap(p, pages * ps);
	close(fd);
	return t;
}

/* ns per page of vrange_region_purge when every `step`-th page was marked
 * volatile on its own, one by one (each its own age). */
static double lib_purge(size_t pages, size_t step, unsigned int mode)
{
	vrange_region *r;
	size_t n = 0;

	if (vrange_region_create("purge", pages * ps, mode, &r) < 0)
		return -1;
	memset(vrange_region_base(r), 1, pages * ps);
	for (size_t i = 0; i < pages; i += step, n++)
		check(vrange_mark_volatile(r, i * ps, ps), "mark");
	double t0 = now_ns();
	ssize_t freed = vrange_region_purge(r);
	double t = (now_ns() - t0) / (double)n;
	if (freed < (ssize_t)(n * ps))
		die("vrange_region_purge freed too little", EIO);
	vrange_region_destroy(r);
	return t;
}

static void purging(void)
{
	const size_t pages = 16384;
	double raw2 = 1e30, raw1 = 1e30, z2 = 1e30, z1 = 1e30, s2 = 1e30, s1 = 1e30;

	for (int rep = 0; rep < 3; rep++) {
		double v;
		if ((v = raw_punch(pages, 2)) < raw2) raw2 = v;
		if ((v = raw_punch(pages, 1)) < raw1) raw1 = v;
		if ((v = lib_purge(pages, 2, VRANGE_ACCESS_ZERO)) < z2) z2 = v;
		if ((v = lib_purge(pages, 1, VRANGE_ACCESS_ZERO)) < z1) z1 = v;
		v = lib_purge(pages, 2, VRANGE_ACCESS_SIGBUS);
		if (v >= 0 && v < s2) s2 = v;
		v = lib_purge(pages, 1, VRANGE_ACCESS_SIGBUS);
		if (v >= 0 && v < s1) s1 = v;
	}
	printf("%-52s %9.2f us   raw punch %6.2f us   ratio %6.2fx raw speed (goal >= 0.9x)\n",
	       "purge, every other page volatile alone, ZERO", z2 / 1e3, raw2 / 1e3, raw2 / z2);
	if (s2 < 1e30)
		printf("%-52s %9.2f us   raw punch %6.2f us   ratio %6.2fx raw speed (goal >= 0.9x)\n",
		       "purge, every other page volatile alone, SIGBUS", s2 / 1e3, raw2 / 1e3, raw2 / s2);
	printf("%-52s %9.2f us   raw punch %6.2f us   ratio %6.2fx raw speed\n",
	       "purge, adjacent pages marked one by one, ZERO", z1 / 1e3, raw1 / 1e3, raw1 / z1);
	if (s1 < 1e30)
		printf("%-52s %9.2f us   raw punch %6.2f us   ratio %6.2fx raw speed\n",
		       "purge, adjacent pages marked one by one, SIGBUS", s1 / 1e3, raw1 / 1e3, raw1 / s1);
}

/* Per memfd: create, size, map and touch n of them, all live at once (the
 * raw counterpart of a region made and first written), then free them. */
static double raw_many(size_t n)
{
	int *fd = calloc(n, sizeof(*fd));
	void **p = calloc(n, sizeof(*p));
	double t0, t;

	if (!fd || !p)
		die("calloc", ENOMEM);
	t0 = now_ns();
	for (size_t i = 0; i < n; i++) {
		p[i] = raw_memfd(64 << 10, &fd[i]);
		*(volatile char *)p[i] = 1;
	}
	t = (now_ns() - t0) / (double)n;
	for (size_t i = 0; i < n; i++) {
		munmap(p[i], 64 << 10);
		close(fd[i]);
	}
	free(fd);
	free(p);
	return t;
}

/*
 * n regions of 64 KiB in one process: create (touching one page), mark
 * that page volatile, purge everything, destroy; us per region for each
 * step, in a child whose descriptor limit allows it.  The count is checked:
 * every region created, every page purged.
 */
static void many_regions(size_t n)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		die("fork", errno);
	if (pid == 0) {
		struct rlimit rl;
		vrange_region **r = calloc(n, sizeof(*r));
		double t[5], raw;

		/* As many descriptors as this process may have; as root, as
		 * many as the count needs (up to fs.nr_open). */
		if (!r || getrlimit(RLIMIT_NOFILE, &rl) < 0)
			die("getrlimit", errno);
		if (rl.rlim_max < n + 1000) {
			struct rlimit up = { n + 1000, n + 1000 };

			if (setrlimit(RLIMIT_NOFILE, &up) == 0)
				rl = up;
		}
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			die("setrlimit", errno);
		/* Start-up is not a region's cost: bench_startup reports it. */
		check(vrange_region_create("warm", 64 << 10, 0, &r[0]), "create");
		check(vrange_region_destroy(r[0]), "destroy");
		raw = raw_many(n);
		t[0] = now_ns();
		for (size_t i = 0; i < n; i++) {
			int e = vrange_region_create("many", 64 << 10, VRANGE_ACCESS_ZERO, &r[i]);
			if (e < 0) {
				printf("%-52s failed at region %zu: %s\n", "many regions",
				       i, strerror(-e));
				fflush(stdout);
				_exit(1);
			}
			*(volatile char *)vrange_region_base(r[i]) = 1;
		}
		t[1] = now_ns();
		for (size_t i = 0; i < n; i++)
			check(vrange_mark_volatile(r[i], 0, ps), "mark");
		t[2] = now_ns();
		ssize_t freed = vrange_purge(SIZE_MAX);
		t[3] = now_ns();
		for (size_t i = 0; i < n; i++)
			check(vrange_region_destroy(r[i]), "destroy");
		t[4] = now_ns();
		printf("%7zu regions: create %6.1f (raw memfd %5.1f, %4.2fx)  mark %6.2f  purge %6.2f"
		       "  destroy %6.1f us per region; purged %zu of %zu pages\n", n,
		       (t[1] - t[0]) / n / 1e3, raw / 1e3, (t[1] - t[0]) / n / raw,
		       (t[2] - t[1]) / n / 1e3, (t[3] - t[2]) / n / 1e3,
		       (t[4] - t[3]) / n / 1e3, (size_t)freed / ps, n);
		fflush(stdout);
		_exit(freed == (ssize_t)(n * ps) ? 0 : 1);
	}
	waitpid(pid, &status, 0);
}

/* May this process raise its descriptor hard limit to n?  (Asked in a
 * child: the answer must not change this process.) */
static bool raisable(size_t n)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		struct rlimit up = { n, n };

		_exit(setrlimit(RLIMIT_NOFILE, &up) == 0 ? 0 : 1);
	}
	return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

static void scale_regions(void)
{
	FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
	struct rlimit rl;
	long maps = 0;
	size_t n = 100000;

	fflush(stdout);
	many_regions(100);
	if (f) {
		if (fscanf(f, "%ld", &maps) != 1)
			maps = 0;
		fclose(f);
	}
	/* One descriptor and one mapping per region (the child raises its
	 * limit where it may: root, up to fs.nr_open). */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max < n + 64 &&
	    !raisable(n + 1000)) {
		n = rl.rlim_max - 64;
		printf("(descriptor hard limit %llu: %zu regions at most, not 100000)\n",
		       (unsigned long long)rl.rlim_max, n);
	}
	if ((size_t)maps < n + 1000) {
		printf("%7zu regions: skipped, vm.max_map_count %ld too low (raise it as root)\n",
		       n, maps);
		return;
	}
	fflush(stdout);
	many_regions(n);
}

/* The first call pays for the library's start-up; the second does not. */
static void startup(void)
{
	vrange_region *r1, *r2;
	double t0 = now_ns();

	check(vrange_region_create("first", 64 << 10, 0, &r1), "create");
	double t1 = now_ns();
	check(vrange_region_create("second", 64 << 10, 0, &r2), "create");
	double t2 = now_ns();

	printf("%-52s %9.1f us   a later create %6.1f us   start-up %6.1f us\n",
	       "first call (region create, monitor on)", (t1 - t0) / 1e3,
	       (t2 - t1) / 1e3, ((t1 - t0) - (t2 - t1)) / 1e3);
	vrange_region_destroy(r1);
	vrange_region_destroy(r2);
}

int main(int argc, char **argv)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	printf("bench_scale: page %zu bytes\n", ps);
	if (argc > 1 && !strcmp(argv[1], "--threads")) { /* that part alone */
		threads();
		return 0;
	}
	startup();
	neighbours();
	purging();
	threads();
	create_cost();
	fd_limit();
	scale_regions();
	if (argc < 2 || strcmp(argv[1], "--no-idle"))
		idle();
	return 0;
}
