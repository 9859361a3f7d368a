/* SPDX-License-Identifier: MIT */
/*
 * survival - why volatile ranges exist, in one run.
 *
 * Inside a fresh memory cgroup with a hard limit (256 MiB by default), a
 * process holds a cache (192 MiB) in a region and then allocates ordinary
 * memory (128 MiB) in 1 MiB steps as fast as memset goes.  The two do not
 * fit.  With the cache marked volatile the pressure monitor gives it back
 * before the kernel's OOM killer acts and the process survives; without,
 * the process is OOM-killed.
 *
 *   survival                 run both and print them side by side
 *   survival --volatile      one run, cache volatile
 *   survival --plain         one run, cache not volatile
 *   options: --limit MiB --cache MiB --alloc MiB
 *
 * Needs root and a memory cgroup (v1 memory controller, or cgroup v2 with
 * the memory controller available); exits 77 when none can be created.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vrange.h>

#include "demo_cgroup.h"

#define MiB (1ull << 20)

struct report {                 /* shared with the child */
	volatile uint64_t allocated;
	volatile uint64_t purged;
	volatile int done;
	char source[32];
};

struct outcome {
	bool survived;
	int signal;
	uint64_t allocated, purged;
	char source[32];
};

/* The workload, in the child, already inside the cgroup. */
static int workload(bool vol, uint64_t cache, uint64_t alloc, struct report *rep)
{
	vrange_region *r;
	struct vrange_stats st;
	int ret;

	ret = vrange_region_create("survival-cache", cache, VRANGE_ACCESS_ZERO, &r);
	if (ret < 0)
		return 2;
	memset(vrange_region_base(r), 0xca, cache);
	if (vol && vrange_mark_volatile(r, 0, cache) < 0)
		return 2;
	/* Started here, the monitor sees the cgroup this process is in now. */
	ret = vrange_monitor_start(NULL);
	if (ret < 0 && ret != -EALREADY)
		return 2;
	vrange_get_stats(&st);
	memcpy(rep->source, st.pressure_source, sizeof(rep->source));
	for (uint64_t done = 0; done < alloc; done += MiB) {
		char *p = mmap(NULL, MiB, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			return 3;
		memset(p, 0x5a, MiB);
		rep->allocated = done + MiB;
	}
	vrange_get_stats(&st);
	rep->purged = st.purged_total;
	rep->done = 1;
	vrange_monitor_stop();
	return 0;
}

static int run_one(bool vol, uint64_t limit, uint64_t cache, uint64_t alloc,
		   struct outcome *out, char *why, size_t wn)
{
	char dir[2048];
	bool v2 = false;
	struct report *rep;
	int status;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	why[0] = '\0';
	if (demo_cgroup_make(limit, "vrange-survival", dir, sizeof(dir), &v2, why, wn) < 0)
		return -1;
	rep = mmap(NULL, sizeof(*rep), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rep == MAP_FAILED) {
		snprintf(why, wn, "mmap: %s", strerror(errno));
		demo_cgroup_remove(dir);
		return -1;
	}
	memset(rep, 0, sizeof(*rep));
	pid = fork();
	if (pid == 0) {
		/* Into the cgroup first: the library is used only in there. */
		if (demo_cgroup_enter(dir) < 0)
			_exit(4);
		_exit(workload(vol, cache, alloc, rep));
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		snprintf(why, wn, "fork/wait: %s", strerror(errno));
		munmap(rep, sizeof(*rep));
		demo_cgroup_remove(dir);
		return -1;
	}
	out->survived = WIFEXITED(status) && WEXITSTATUS(status) == 0 && rep->done;
	out->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	out->allocated = rep->allocated;
	out->purged = rep->purged;
	memcpy(out->source, rep->source, sizeof(out->source));
	out->source[sizeof(out->source) - 1] = '\0';
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		snprintf(why, wn, "workload failed with exit status %d", WEXITSTATUS(status));
	munmap(rep, sizeof(*rep));
	demo_cgroup_remove(dir);
	return 0;
}

static void describe(const struct outcome *o, char *buf, size_t n)
{
	if (o->survived)
		snprintf(buf, n, "survived, %llu MiB purged",
			 (unsigned long long)(o->purged / MiB));
	else if (o->signal)
		snprintf(buf, n, "killed (%s) at %llu MiB", strsignal(o->signal),
			 (unsigned long long)(o->allocated / MiB));
	else
		snprintf(buf, n, "failed at %llu MiB", (unsigned long long)(o->allocated / MiB));
}

int main(int argc, char **argv)
{
	uint64_t limit = 256 * MiB, cache = 192 * MiB, alloc = 128 * MiB;
	int which = 0; /* 0 both, 1 volatile, 2 plain */
	struct outcome o[2];
	char why[512], a[128], b[128];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--volatile"))
			which = 1;
		else if (!strcmp(argv[i], "--plain"))
			which = 2;
		else if (i + 1 < argc && !strcmp(argv[i], "--limit"))
			limit = strtoull(argv[++i], NULL, 10) * MiB;
		else if (i + 1 < argc && !strcmp(argv[i], "--cache"))
			cache = strtoull(argv[++i], NULL, 10) * MiB;
		else if (i + 1 < argc && !strcmp(argv[i], "--alloc"))
			alloc = strtoull(argv[++i], NULL, 10) * MiB;
		else {
			fprintf(stderr, "usage: %s [--volatile|--plain] [--limit MiB] "
				"[--cache MiB] [--alloc MiB]\n", argv[0]);
			return 2;
		}
	}
	printf("memory cgroup limit %llu MiB, cache %llu MiB, then %llu MiB allocated "
	       "in 1 MiB steps at full speed\n", (unsigned long long)(limit / MiB),
	       (unsigned long long)(cache / MiB), (unsigned long long)(alloc / MiB));
	for (int k = 0; k < 2; k++) {
		if (which && which != k + 1)
			continue;
		if (run_one(k == 0, limit, cache, alloc, &o[k], why, sizeof(why)) < 0) {
			printf("cannot run: %s\n", why);
			return 77;
		}
		if (why[0])
			printf("%s run: %s\n", k == 0 ? "volatile" : "plain", why);
	}
	if (which) {
		describe(&o[which - 1], a, sizeof(a));
		printf("cache %s: %s (monitor source %s)\n",
		       which == 1 ? "volatile" : "not volatile", a, o[which - 1].source);
		return which == 1 ? !o[0].survived : 0;
	}
	describe(&o[0], a, sizeof(a));
	describe(&o[1], b, sizeof(b));
	printf("%-40s | %s\n", "cache marked volatile", "cache not volatile");
	printf("%-40s | %s\n", a, b);
	printf("(monitor source: %s)\n", o[0].source);
	return o[0].survived ? 0 : 1;
}
