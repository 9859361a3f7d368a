/* SPDX-License-Identifier: MIT */
/*
 * bench_coord_survival - issue 25 item 7's full scenario, run N times:
 * does the allocator survive with `vrangectl coordinate` as the only
 * purger, and with the processes' own monitors?
 *
 *   bench-coord-survival VRANGECTL [--baseline VRANGECTL] [--runs N] [--no-hog]
 *                        [--hogs-per-core N] [--no-rtprio]
 *                        [--only coordinator|monitors] [--log DIR]
 *
 * One run: a fresh cgroup v1 memory cgroup (limit 306 MiB), four processes
 * each holding a 64 MiB region, written and marked volatile, and a fifth
 * that first takes what leaves 31 MiB below the limit, then allocates 128
 * MiB at 1 GiB/s (1 MiB steps paced by the clock, not by sleeps: a late
 * step is caught up).
 * "monitors": each holder's own monitor purges.  "coordinator": the
 * holders' monitors are stopped and `VRANGECTL coordinate --foreground
 * --verbose` (started for the run, outside the cgroup) is the only
 * purger; it runs as a uid of the bench's own, with CAP_SYS_NICE (as a
 * system unit's AmbientCapabilities= would give it) unless --no-rtprio, so
 * it may make itself real-time.  With one CPU-bound process per core (unless --no-hog) for the
 * whole bench (--hogs-per-core N: N per core).  --baseline: another
 * build's vrangectl (a copy of an older one) as a third mode.  The modes
 * alternate run by run, so all see the same load.  A run survives if the allocator got its 128 MiB (an OOM kill ends
 * it with SIGKILL).  Printed per run: the headroom at the start, the MiB
 * the allocator got, the least headroom seen (usage sampled every ~0.5 ms
 * from outside the cgroup), the MiB purged; then survived/runs of each
 * mode side by side.  --log DIR keeps, per run, the coordinator's verbose
 * log and the bench's timeline (CLOCK_MONOTONIC ms, the clock of the
 * coordinator's log): usage and allocator progress.  Root and a cgroup v1
 * memory hierarchy; prints SKIP otherwise.  Asserts nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vrange.h>

#include "../examples/demo_cgroup.h"
#include "bench_user.h"

#define MiB ((uint64_t)1 << 20)
#define LIMIT (306 * MiB)
#define HOLDERS 4
#define HELD (64 * MiB)
#define ALLOC_MIB 128
#define START_HEADROOM (31 * MiB) /* below the limit when the allocator starts */
#define ALLOC_NS_PER_MIB 1000000ull /* 1 GiB/s */
#define MAX_SAMPLES 20000

static const char *ctl, *base_ctl;
static const char *log_dir;
static char mnt[256];
static uid_t bench_uid;
static bool grant_rtprio = true;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t read_usage(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static int join(const char *dir)
{
	char val[32];

	snprintf(val, sizeof(val), "%d", (int)getpid());
	return demo_write(dir, "cgroup.procs", val);
}

/* A holder: 64 MiB volatile, then waits; on a byte (or EOF) of cmd it
 * writes its purged bytes to res and exits. */
static void holder(const char *dir, bool monitor, int cmd, int res)
{
	vrange_region *r;
	struct vrange_stats st;
	uint64_t purged = 0;
	char c;

	if (join(dir) < 0)
		_exit(2);
	bench_become_user(bench_uid, false);
	if (vrange_region_create("coord-survival", HELD, VRANGE_ACCESS_ZERO, &r) < 0)
		_exit(2);
	if (!monitor)
		vrange_monitor_stop();
	memset(vrange_region_base(r), 0x5a, HELD);
	if (vrange_mark_volatile(r, 0, HELD) < 0)
		_exit(3);
	if (write(res, &purged, sizeof(purged)) != sizeof(purged))
		_exit(4);
	if (read(cmd, &c, 1) < 0)
		_exit(5);
	if (vrange_get_stats(&st) == 0)
		purged = st.purged_bytes;
	if (write(res, &purged, sizeof(purged)) != sizeof(purged))
		_exit(6);
	_exit(0);
}

struct shared {
	uint64_t ballast;          /* MiB taken before the start */
	_Atomic uint64_t got;      /* MiB allocated */
	_Atomic uint64_t go_ns;    /* start of the allocation */
	_Atomic uint64_t done_ns;
};

static void allocator(const char *dir, struct shared *sh)
{
	uint64_t t0;

	if (join(dir) < 0)
		_exit(2);
	for (uint64_t i = 0; i < sh->ballast; i++) {
		char *p = mmap(NULL, MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			_exit(3);
		memset(p, 0x44, MiB);
	}
	while (!atomic_load(&sh->go_ns))
		usleep(100);
	t0 = now_ns();
	for (uint64_t i = 0; i < ALLOC_MIB; i++) {
		uint64_t due = t0 + i * ALLOC_NS_PER_MIB, t = now_ns();
		char *p;

		if (t < due) {
			struct timespec ts = { 0, (long)(due - t) };

			nanosleep(&ts, NULL);
		}
		p = mmap(NULL, MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			_exit(3);
		memset(p, 0x33, MiB);
		atomic_store(&sh->got, i + 1);
	}
	atomic_store(&sh->done_ns, now_ns());
	_exit(0);
}

struct sampler {
	int usage_fd;
	struct shared *sh;
	_Atomic bool stop;
	size_t n;
	uint64_t t[MAX_SAMPLES], usage[MAX_SAMPLES], got[MAX_SAMPLES];
	uint64_t max_usage;
};

static void *sample_main(void *arg)
{
	struct sampler *s = arg;
	struct timespec tick = { 0, 500000 };

	while (!atomic_load(&s->stop)) {
		uint64_t u = read_usage(s->usage_fd);

		if (u > s->max_usage)
			s->max_usage = u;
		if (s->n < MAX_SAMPLES) {
			s->t[s->n] = now_ns();
			s->usage[s->n] = u;
			s->got[s->n++] = atomic_load(&s->sh->got);
		}
		nanosleep(&tick, NULL);
	}
	return NULL;
}

static pid_t spawn_coordinator(const char *prog, const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd >= 0)
			dup2(fd, 2);
		bench_become_user(bench_uid, grant_rtprio);
		execl(prog, prog, "coordinate", "--foreground", "--verbose", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Whether a coordinator of the bench's uid listens (its abstract address,
 * src/purge/coordinator.c). */
static bool coordinator_listens(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "vrange-coordinator-%u",
			 (unsigned int)bench_uid);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa,
				     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
						 (size_t)n)) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

struct result {
	bool survived;
	uint64_t start_headroom, min_headroom, got_mib, purged, oom_kills;
};

static uint64_t oom_kills(const char *dir)
{
	char path[700], line[128];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/memory.oom_control", dir);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "oom_kill %llu", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* mode: 0 coordinator, 1 baseline coordinator, 2 monitors */
static const char *const mode_name[] = { "coordinator", "baseline", "monitors" };

static int one_run(int run, int m, struct result *res)
{
	static struct sampler s;
	char dir[512], val[32], path[700], log[700];
	int cmd[HOLDERS][2], rp[HOLDERS][2], status = 0, rc = 0;
	pid_t holders[HOLDERS], alloc, coord = -1;
	struct shared *sh;
	pthread_t th;
	const char *mode = mode_name[m];
	bool coordinator = m < 2;

	memset(res, 0, sizeof(*res));
	memset(&s, 0, sizeof(s));
	snprintf(dir, sizeof(dir), "%s/vrange-csurv-%d-%d", mnt, (int)getpid(), run);
	snprintf(val, sizeof(val), "%" PRIu64, LIMIT);
	snprintf(path, sizeof(path), "%s/cgroup.event_control", dir);
	if (mkdir(dir, 0755) < 0 || demo_write(dir, "memory.limit_in_bytes", val) < 0 ||
	    chown(path, bench_uid, bench_uid) < 0) {
		fprintf(stderr, "cannot make %s: %s\n", dir, strerror(errno));
		rmdir(dir);
		return -1;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -1;
	memset(sh, 0, sizeof(*sh));
	if (coordinator) {
		snprintf(log, sizeof(log), "%s/run%02d-%s.log", log_dir ? log_dir : "", run, mode);
		coord = spawn_coordinator(m ? base_ctl : ctl, log_dir ? log : NULL);
		/* Under load its start may take a while: the run begins once
		 * it listens. */
		for (int i = 0; i < 1000 && !coordinator_listens(); i++)
			usleep(10000);
	}
	for (int i = 0; i < HOLDERS; i++) {
		if (pipe2(cmd[i], O_CLOEXEC) < 0 || pipe2(rp[i], O_CLOEXEC) < 0)
			return -1;
		holders[i] = fork();
		if (holders[i] == 0)
			holder(dir, !coordinator, cmd[i][0], rp[i][1]);
		close(cmd[i][0]);
		close(rp[i][1]);
	}
	for (int i = 0; i < HOLDERS; i++) {
		uint64_t v;

		if (read(rp[i][0], &v, sizeof(v)) != sizeof(v))
			rc = -1;
	}
	/* Ballast in the allocator: START_HEADROOM left below the limit. */
	snprintf(path, sizeof(path), "%s/memory.usage_in_bytes", dir);
	s.usage_fd = open(path, O_RDONLY | O_CLOEXEC);
	{
		uint64_t u = read_usage(s.usage_fd);

		sh->ballast = u + START_HEADROOM < LIMIT ? (LIMIT - START_HEADROOM - u) / MiB : 0;
	}
	alloc = fork();
	if (alloc == 0)
		allocator(dir, sh);
	/* The coordinator's refresh (500 ms) finds the holders; the monitors
	 * take their first wake-up samples. */
	usleep(1200000);
	s.sh = sh;
	res->start_headroom = LIMIT - read_usage(s.usage_fd);
	if (log_dir) {
		char cmdline[2048];

		snprintf(cmdline, sizeof(cmdline), "cp %s/memory.stat %s/run%02d-%s-stat.txt", dir,
			 log_dir, run, mode);
		if (system(cmdline) != 0)
			fprintf(stderr, "%s failed\n", cmdline);
	}
	pthread_create(&th, NULL, sample_main, &s);
	atomic_store(&sh->go_ns, now_ns());
	waitpid(alloc, &status, 0);
	usleep(100000);
	atomic_store(&s.stop, true);
	pthread_join(th, NULL);
	res->survived = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	res->got_mib = atomic_load(&sh->got);
	res->min_headroom = s.max_usage < LIMIT ? LIMIT - s.max_usage : 0;
	res->oom_kills = oom_kills(dir);
	for (int i = 0; i < HOLDERS; i++) {
		uint64_t v = 0;

		/* A byte, not EOF: later holders hold copies of this end. */
		if (write(cmd[i][1], "x", 1) < 0)
			continue;
		close(cmd[i][1]);
		if (read(rp[i][0], &v, sizeof(v)) == sizeof(v))
			res->purged += v;
		close(rp[i][0]);
		waitpid(holders[i], NULL, 0);
	}
	if (coord > 0) {
		kill(coord, SIGTERM);
		waitpid(coord, NULL, 0);
	}
	if (log_dir) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/run%02d-%s-timeline.txt", log_dir, run, mode);
		f = fopen(path, "we");
		if (f) {
			fprintf(f, "# %s, %s: limit %" PRIu64 " MiB, start headroom %.1f MiB, "
				"allocation from %.3f ms\n# t_ms usage_MiB allocated_MiB\n",
				mode, res->survived ? "survived" : "KILLED", LIMIT / MiB,
				(double)res->start_headroom / MiB, atomic_load(&sh->go_ns) / 1e6);
			for (size_t i = 0; i < s.n; i++)
				fprintf(f, "%.3f %.1f %" PRIu64 "\n", s.t[i] / 1e6,
					(double)s.usage[i] / MiB, s.got[i]);
			fclose(f);
		}
	}
	close(s.usage_fd);
	munmap(sh, sizeof(*sh));
	for (int i = 0; i < 100 && rmdir(dir) < 0 && errno == EBUSY; i++)
		usleep(20000);
	return rc;
}

static pid_t spawn_hog(void)
{
	pid_t pid = fork();

	if (pid == 0)
		for (;;)
			__asm__ volatile("" ::: "memory");
	return pid;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int runs = 10, nhogs = 0, per_core = 1, ok[3] = { 0 }, done[3] = { 0 };
	bool hog = true, want[3] = { true, false, true };
	pid_t hogs[64];
	uint64_t minh[3][256];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-hog"))
			hog = false;
		else if (!strcmp(argv[i], "--no-rtprio"))
			grant_rtprio = false;
		else if (!strcmp(argv[i], "--log") && i + 1 < argc)
			log_dir = argv[++i];
		else if (!strcmp(argv[i], "--hogs-per-core") && i + 1 < argc)
			per_core = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--baseline") && i + 1 < argc)
			base_ctl = argv[++i];
		else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			i++;
			want[0] = !strcmp(argv[i], "coordinator");
			want[2] = !strcmp(argv[i], "monitors");
		} else if (argv[i][0] != '-' && !ctl)
			ctl = argv[i];
		else
			goto usage;
	}
	if (!ctl || runs < 1 || runs > 256 || per_core < 1 || per_core > 8)
		goto usage;
	want[1] = base_ctl && want[0];
	demo_find_mount(false, mnt, sizeof(mnt));
	if (!mnt[0] || geteuid() != 0) {
		printf("SKIP: needs root and a cgroup v1 memory hierarchy\n");
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	/* A uid of this bench alone (see bench_user.h). */
	bench_uid = (uid_t)(200000 + getpid());
	for (long c = sysconf(_SC_NPROCESSORS_ONLN) * per_core; hog && c > 0 && nhogs < 64; c--)
		hogs[nhogs++] = spawn_hog();
	printf("%d holders x %" PRIu64 " MiB volatile in a %" PRIu64 " MiB v1 memory cgroup, "
	       "%d MiB allocated at 1 GiB/s; %d CPU hog(s)\n", HOLDERS, HELD / MiB, LIMIT / MiB,
	       ALLOC_MIB, nhogs);
	for (int run = 0; run < runs; run++) {
		for (int m = 0; m < 3; m++) {
			struct result r;

			if (!want[m])
				continue;
			if (one_run(run, m, &r) < 0) {
				printf("run %d: setup failed\n", run);
				continue;
			}
			ok[m] += r.survived;
			minh[m][done[m]++] = r.min_headroom;
			printf("run %2d %-11s %-8s start headroom %5.1f MiB, allocated %3" PRIu64
			       " MiB, least headroom %5.1f MiB, purged %5.1f MiB, oom_kill %" PRIu64 "\n",
			       run, mode_name[m],
			       r.survived ? "survived" : "KILLED", (double)r.start_headroom / MiB,
			       r.got_mib, (double)r.min_headroom / MiB, (double)r.purged / MiB,
			       r.oom_kills);
			fflush(stdout);
		}
	}
	for (int i = 0; i < nhogs; i++) {
		kill(hogs[i], SIGKILL);
		waitpid(hogs[i], NULL, 0);
	}
	for (int m = 0; m < 3; m++) {
		static const char *const label[] = { "vrangectl coordinate (monitors off)",
						     "  baseline coordinator", "in-process monitors" };

		if (!done[m])
			continue;
		qsort(minh[m], (size_t)done[m], sizeof(uint64_t), cmp_u64);
		printf("%-36s survived %2d of %2d, least headroom median %.1f MiB\n", label[m],
		       ok[m], done[m], (double)minh[m][done[m] / 2] / MiB);
	}
	return 0;
usage:
	fprintf(stderr, "usage: %s VRANGECTL [--baseline VRANGECTL] [--runs N] [--no-hog] "
		"[--hogs-per-core N] [--no-rtprio] "
		"[--only coordinator|monitors] [--log DIR]\n", argv[0]);
	return 2;
}
