/* SPDX-License-Identifier: MIT */
/*
 * bench_pressure - reaction time of the pressure monitor, or of
 * `vrangectl coordinate`: from a memory cgroup usage threshold firing to
 * the first bytes of a 1 GiB volatile cache being freed.
 *
 *   bench-pressure [--coordinator VRANGECTL] [--hog] [--rounds N]
 *
 * A child joins a fresh cgroup v1 memory cgroup (limit 1.5 GiB) holding a
 * 1 GiB volatile region, with its monitor running - or, with
 * --coordinator, its monitor stopped and `VRANGECTL coordinate
 * --foreground` running outside the cgroup (both as a uid of the run's
 * own, the coordinator with CAP_SYS_NICE: see bench_user.h).  The bench registers its own
 * eventfd on memory.usage_in_bytes at the floor of the monitor's threshold
 * (pressure_headroom(); the monitor's own may be earlier under CPU
 * contention, then the reaction counts 0); the kernel signals both in the
 * same pass.  A helper thread wakes on it (t0) and looks at fstat() of the
 * region every ~50 us until its allocated blocks drop below the full
 * cache's (t1), while the main thread allocates 1 MiB steps at 1 GiB/s and
 * goes on doing so until then (a kill is reported).  --hog runs one
 * CPU-bound process per core but one beside it.  Baseline: a direct
 * vrange_purge() of the first chunk, measured in the same run.  Prints
 * figures; asserts nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vrange.h>

#include "../examples/demo_cgroup.h"
#include "bench_user.h"

#include "../tests/own_ns.h"
#include "pressure.h"

#define MiB ((uint64_t)1 << 20)
#define CACHE (1024 * MiB)
#define LIMIT (1536 * MiB)
#define ROUNDS 7
#define ALLOC_NS_PER_MIB 1000000ull     /* 1 GiB/s */

static char cg_dir[512];
static uid_t own_uid;            /* with --coordinator: a uid of this run's own */
static const char *coordinator;
static int rounds = ROUNDS;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t blocks(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_blocks : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct probe {
	int efd, usage_fd, region_fd;
	uint64_t threshold, full_blocks;
	_Atomic int armed, fired, done, ahead;
	uint64_t reaction_ns;
};

static uint64_t read_usage(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	uint64_t v;

	for (;;) {
		while (!atomic_load(&p->armed))
			usleep(100);
		if (atomic_load(&p->armed) < 0)
			return NULL;
		/* Wake on the threshold, ignoring crossings on the way down;
		 * give up if the purger acted before usage got there. */
		for (;;) {
			struct pollfd pf = { p->efd, POLLIN, 0 };

			if (atomic_load(&p->ahead))
				break;
			if (poll(&pf, 1, 5) > 0 && read(p->efd, &v, sizeof(v)) == sizeof(v) &&
			    read_usage(p->usage_fd) >= p->threshold)
				break;
		}
		if (atomic_load(&p->ahead)) {
			p->reaction_ns = 0;
			atomic_store(&p->armed, 0);
			atomic_store(&p->done, 1);
			continue;
		}
		uint64_t t0 = now_ns(), deadline = t0 + 2000000000u;
		struct timespec tick = { 0, 20000 };

		atomic_store(&p->fired, 1);
		/* Already below the full cache: the purger was ahead of us. */
		while (blocks(p->region_fd) >= p->full_blocks && now_ns() < deadline)
			nanosleep(&tick, NULL);
		p->reaction_ns = now_ns() - t0;
		atomic_store(&p->armed, 0);
		atomic_store(&p->done, 1);
	}
}

static int child(void)
{
	struct probe p = { .efd = -1 };
	vrange_region *r;
	char buf[128], path[700];
	uint64_t direct[ROUNDS], react[64];
	pthread_t th;
	int ctl, n = 0;

	if (vrange_region_create("bench-pressure", CACHE, VRANGE_ACCESS_ZERO, &r) < 0)
		return 2;
	p.region_fd = vrange_region_fd(r);
	/* Baseline: the first chunk purged directly, no notification. */
	for (int i = 0; i < ROUNDS; i++) {
		memset(vrange_region_base(r), 1, CACHE);
		vrange_mark_volatile(r, 0, CACHE);
		uint64_t t0 = now_ns();
		vrange_purge(2 * MiB);
		direct[i] = now_ns() - t0;
		vrange_mark_nonvolatile(r, 0, CACHE);
	}

	snprintf(path, sizeof(path), "%s/memory.usage_in_bytes", cg_dir);
	p.usage_fd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/cgroup.event_control", cg_dir);
	ctl = open(path, O_WRONLY | O_CLOEXEC);
	p.efd = eventfd(0, EFD_CLOEXEC);
	p.threshold = LIMIT - pressure_headroom(LIMIT);
	snprintf(buf, sizeof(buf), "%d %d %" PRIu64, p.efd, p.usage_fd, p.threshold);
	if (p.usage_fd < 0 || ctl < 0 || p.efd < 0 || write(ctl, buf, strlen(buf)) < 0)
		return 3;
	struct vrange_stats st;
	if (coordinator) {
		/* Only the coordinator purges; let it find this process. */
		vrange_monitor_stop();
		usleep(1500000);
	} else {
		/* Started at the first region unless VRANGE_MONITOR=0. */
		int rc = vrange_monitor_start(NULL);
		if (rc < 0 && rc != -EALREADY)
			return 4;
	}
	vrange_get_stats(&st);
	printf("%s, threshold %" PRIu64 " MiB below the %" PRIu64 " MiB limit, "
	       "allocator at 1 GiB/s\n", coordinator ? "vrangectl coordinate" : st.pressure_source,
	       pressure_headroom(LIMIT) / MiB, LIMIT / MiB);
	pthread_create(&th, NULL, probe_main, &p);

	for (int round = 0; round < rounds; round++) {
		char *chunks[1024];
		int nc = 0;
		uint64_t t0;

		memset(vrange_region_base(r), 2, CACHE);
		vrange_mark_volatile(r, 0, CACHE);
		p.full_blocks = blocks(p.region_fd);
		atomic_store(&p.done, 0);
		atomic_store(&p.fired, 0);
		atomic_store(&p.ahead, 0);
		atomic_store(&p.armed, 1);
		t0 = now_ns();
		/* 1 MiB per ms, on until the probe saw the first bytes freed. */
		while (!atomic_load(&p.done) && nc < 1024) {
			uint64_t due = t0 + (uint64_t)nc * ALLOC_NS_PER_MIB, t = now_ns();

			if (t < due) {
				struct timespec ts = { 0, (long)(due - t) };

				nanosleep(&ts, NULL);
			}
			chunks[nc] = mmap(NULL, MiB, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (chunks[nc] == MAP_FAILED)
				break;
			memset(chunks[nc++], 3, MiB);
			/* Freed before the bench's threshold: ahead of it. */
			if (!atomic_load(&p.fired) && blocks(p.region_fd) < p.full_blocks)
				atomic_store(&p.ahead, 1);
		}
		atomic_store(&p.ahead, 1); /* nc == 1024: stop waiting */
		while (!atomic_load(&p.done))
			usleep(100);
		atomic_store(&p.ahead, 0);
		react[n++] = p.reaction_ns;
		for (int i = 0; i < nc; i++)
			munmap(chunks[i], MiB);
		vrange_mark_nonvolatile(r, 0, CACHE);
		usleep(coordinator ? 600000 : 50000);
	}
	atomic_store(&p.armed, -1);
	pthread_join(th, NULL);
	vrange_monitor_stop();

	qsort(direct, ROUNDS, sizeof(direct[0]), cmp_u64);
	qsort(react, (size_t)n, sizeof(react[0]), cmp_u64);
	printf("baseline: direct purge of the first 2 MiB chunk: median %.1f us\n",
	       direct[ROUNDS / 2] / 1e3);
	printf("reaction: threshold event -> first bytes freed, 1 GiB volatile, %d runs:\n"
	       "  min %.1f us, median %.1f us, max %.1f us (target < 1000 us)\n",
	       n, react[0] / 1e3, react[n / 2] / 1e3, react[n - 1] / 1e3);
	{
		int ahead = 0;

		for (int i = 0; i < n; i++)
			ahead += react[i] == 0;
		printf("  %d of %d runs freed bytes before the bench's threshold (counted 0)\n",
		       ahead, n);
	}
	fflush(stdout);
	printf("ratio median reaction / direct purge: %.2f\n",
	       (double)react[n / 2] / (double)direct[ROUNDS / 2]);
	vrange_region_destroy(r);
	return 0;
}

static pid_t spawn_hog(void)
{
	pid_t pid = fork();

	if (pid == 0)
		for (;;)
			__asm__ volatile("" ::: "memory");
	return pid;
}

int main(int argc, char **argv)
{
	char mnt[256] = "", val[32];
	int status, nhogs = 0;
	pid_t pid, coord = -1, hogs[64];
	bool hog = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--coordinator") && i + 1 < argc)
			coordinator = argv[++i];
		else if (!strcmp(argv[i], "--hog"))
			hog = true;
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--coordinator VRANGECTL] [--hog] [--rounds N]\n",
				argv[0]);
			return 2;
		}
	}
	if (rounds < 1 || rounds > 64)
		rounds = ROUNDS;
	if (coordinator) {
		/* The coordinator serves every process of the user /proc and
		 * the abstract socket namespace show: only the bench's own. */
		const char *why;
		int st = 1, r = own_ns_enter(&why, &st);

		if (r == 1)
			_exit(st);
		if (r < 0) {
			printf("SKIP: --coordinator would reach every process of the user: "
			       "%s: %s\n", why, strerror(-r));
			return 0;
		}
	}
	demo_find_mount(false, mnt, sizeof(mnt));
	if (!mnt[0]) {
		printf("SKIP: no cgroup v1 memory hierarchy (needed for usage thresholds)\n");
		return 0;
	}
	snprintf(cg_dir, sizeof(cg_dir), "%s/vrange-bench-%d", mnt, own_ns_tag());
	snprintf(val, sizeof(val), "%" PRIu64, LIMIT);
	if (mkdir(cg_dir, 0755) < 0 || demo_write(cg_dir, "memory.limit_in_bytes", val) < 0) {
		printf("SKIP: cannot create a memory cgroup in %s: %s\n", mnt, strerror(errno));
		rmdir(cg_dir);
		return 0;
	}
	if (coordinator) {
		char ec[700];

		own_uid = (uid_t)(200000 + getpid());
		snprintf(ec, sizeof(ec), "%s/cgroup.event_control", cg_dir);
		if (chown(ec, own_uid, own_uid) < 0)
			printf("cannot chown %s: %s\n", ec, strerror(errno));
		coord = fork();
		if (coord == 0) {
			bench_become_user(own_uid, true);
			execl(coordinator, coordinator, "coordinate", "--foreground", (char *)NULL);
			_exit(127);
		}
		usleep(300000);
	}
	for (long c = sysconf(_SC_NPROCESSORS_ONLN) - 1; hog && c > 0 && nhogs < 64; c--)
		hogs[nhogs++] = spawn_hog();
	if (hog)
		printf("%d CPU hog(s) beside the bench\n", nhogs);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		snprintf(val, sizeof(val), "%d", (int)getpid());
		if (demo_write(cg_dir, "cgroup.procs", val) < 0)
			_exit(5);
		if (coordinator)
			bench_become_user(own_uid, false);
		int rc = child();

		fflush(stdout);
		_exit(rc);
	}
	waitpid(pid, &status, 0);
	for (int i = 0; i < nhogs; i++) {
		kill(hogs[i], SIGKILL);
		waitpid(hogs[i], NULL, 0);
	}
	if (coord > 0) {
		kill(coord, SIGTERM);
		waitpid(coord, NULL, 0);
	}
	if (WIFSIGNALED(status))
		printf("bench child killed by signal %d (OOM: the purger was too late)\n",
		       WTERMSIG(status));
	for (int i = 0; i < 100 && rmdir(cg_dir) < 0 && errno == EBUSY; i++)
		usleep(20000);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		printf("bench child failed: status 0x%x\n", status);
		return 1;
	}
	return 0;
}
