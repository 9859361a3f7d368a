/* SPDX-License-Identifier: MIT */
/*
 * cache_survival - a purgeable cache against a malloc cache, in one run.
 *
 * Inside a fresh memory cgroup with a hard limit (256 MiB by default), a
 * program serves lookups of "decoded images" (256 KiB each, generated from
 * their id and carrying a checksum), caching what it decodes.  70% of the
 * lookups go to a hot set of 192 images (48 MiB, which fits), 10% to any
 * image seen before, 20% to a new one, so 1 GiB of values is offered in
 * all.  With
 * vrange_cache (values decoded straight into it with reserve/commit) the
 * monitor purges released images under pressure, lookups of those miss
 * and decode again, and the process survives; every hit is checked against
 * its checksum.  The same program with a malloc'd hash table is OOM-killed.
 *
 *   cache_survival            run both and print them side by side
 *   cache_survival --vrange   one run with vrange_cache
 *   cache_survival --malloc   one run with the malloc cache
 *   options: --limit MiB --offer MiB
 *
 * Needs root and a memory cgroup (v1 memory controller, or cgroup v2);
 * exits 77 when none can be created.
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
#include <unistd.h>
#include <vrange.h>

#include "demo_cgroup.h"

#define MiB (1ull << 20)
#define IMG (256u << 10)
#define HOT 192

struct report {                 /* shared with the child */
	volatile uint64_t lookups, hits, decoded, purged, offered, damaged;
	volatile uint64_t purged_bytes;
	volatile int done;
};

/* "Decode" image id into buf: bytes from a stream seeded by id, and a
 * checksum of them in the first 8 bytes. */
static void decode(uint64_t id, unsigned char *buf)
{
	uint64_t s = id * 0x9e3779b97f4a7c15ull + 1, sum = 0;

	for (size_t i = 8; i < IMG; i += 8) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		memcpy(buf + i, &s, 8);
		sum += s;
	}
	memcpy(buf, &sum, 8);
}

static bool intact(const unsigned char *buf)
{
	uint64_t sum = 0, w, want;

	for (size_t i = 8; i < IMG; i += 8) {
		memcpy(&w, buf + i, 8);
		sum += w;
	}
	memcpy(&want, buf, 8);
	return sum == want;
}

/* The next image to look up: the hot set 7 times in 10, an image seen
 * before once, a new one twice. */
static uint64_t next_id(uint64_t *rng, uint64_t *cold)
{
	uint64_t d;

	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	d = (*rng >> 33) % 10;
	if (d < 7)
		return (*rng >> 40) % HOT;
	if (d == 7 && *cold)
		return HOT + (*rng >> 40) % *cold;
	return HOT + (*cold)++;
}

/* The same program over a malloc'd table: what it would be without. */
static int run_malloc(uint64_t offer, struct report *rep)
{
	uint64_t n = offer / IMG + HOT + 1, rng = 1, cold = 0;
	unsigned char **table = calloc(n, sizeof(*table));

	if (!table)
		return 2;
	while (rep->offered < offer) {
		uint64_t id = next_id(&rng, &cold);

		rep->lookups++;
		if (table[id]) {
			rep->hits++;
			rep->damaged += !intact(table[id]);
			continue;
		}
		table[id] = malloc(IMG);
		if (!table[id])
			return 3;
		decode(id, table[id]);
		rep->decoded++;
		rep->offered += IMG;
	}
	rep->done = 1;
	return 0;
}

static int run_vrange(uint64_t offer, struct report *rep)
{
	struct vrange_cache_opts o = { sizeof(o), "images", 0, 0, 0, 0 };
	struct vrange_cache_stats st = { .struct_size = sizeof(st) };
	uint64_t rng = 1, cold = 0;
	vrange_cache *c;
	int ret;

	if (vrange_cache_create(&o, &c) < 0)
		return 2;
	/* Started here, the monitor sees the cgroup this process is in now. */
	ret = vrange_monitor_start(NULL);
	if (ret < 0 && ret != -EALREADY)
		return 2;
	while (rep->offered < offer) {
		uint64_t id = next_id(&rng, &cold);
		const void *v;
		size_t len;
		void *buf;

		rep->lookups++;
		if (vrange_cache_get(c, &id, sizeof(id), &v, &len) == 0) {
			rep->hits++;
			rep->damaged += len != IMG || !intact(v);
			vrange_cache_release(c, v);
			continue;
		}
		/* A miss: decode straight into the cache, no copy. */
		if (vrange_cache_reserve(c, &id, sizeof(id), IMG, &buf) < 0)
			return 3;
		decode(id, buf);
		if (vrange_cache_commit(c, buf) < 0)
			return 3;
		rep->decoded++;
		rep->offered += IMG;
	}
	struct vrange_stats ls;

	vrange_cache_get_stats(c, &st);
	rep->purged = st.purged_entries;
	if (vrange_get_stats(&ls) == 0)
		rep->purged_bytes = ls.purged_total;
	rep->done = 1;
	vrange_monitor_stop();
	return 0;
}

struct outcome {
	bool survived;
	int signal;
	struct report r;
};

static int run_one(bool vr, uint64_t limit, uint64_t offer, struct outcome *out,
		   char *why, size_t wn)
{
	struct report *rep;
	char dir[2048];
	int status;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	why[0] = '\0';
	rep = mmap(NULL, sizeof(*rep), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rep == MAP_FAILED) {
		snprintf(why, wn, "mmap: %s", strerror(errno));
		return -1;
	}
	memset(rep, 0, sizeof(*rep));
	pid = demo_cgroup_fork(limit, "vrange-cache-survival", dir, sizeof(dir), why, wn);
	if (pid == 0)
		_exit(vr ? run_vrange(offer, rep) : run_malloc(offer, rep));
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		if (pid > 0 || !why[0])
			snprintf(why, wn, "fork/wait: %s", strerror(errno));
		munmap(rep, sizeof(*rep));
		if (pid > 0)
			demo_cgroup_remove(dir);
		return -1;
	}
	out->survived = WIFEXITED(status) && WEXITSTATUS(status) == 0 && rep->done;
	out->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	out->r = *rep;
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		snprintf(why, wn, "workload failed with exit status %d", WEXITSTATUS(status));
	munmap(rep, sizeof(*rep));
	demo_cgroup_remove(dir);
	return 0;
}

static void row(const char *what, const char *a, const char *b)
{
	printf("  %-18s %-34s | %s\n", what, a, b);
}

static void fill(const struct outcome *o, char col[6][64])
{
	const struct report *r = &o->r;

	if (o->survived)
		snprintf(col[0], 64, "survived");
	else if (o->signal)
		snprintf(col[0], 64, "killed (%s)", strsignal(o->signal));
	else
		snprintf(col[0], 64, "failed");
	snprintf(col[1], 64, "%llu", (unsigned long long)r->lookups);
	snprintf(col[2], 64, "%.1f%%",
		 r->lookups ? 100.0 * (double)r->hits / (double)r->lookups : 0.0);
	snprintf(col[3], 64, "%llu (%llu MiB)", (unsigned long long)r->decoded,
		 (unsigned long long)(r->offered / MiB));
	snprintf(col[4], 64, "%llu (%llu MiB purged)", (unsigned long long)r->purged,
		 (unsigned long long)(r->purged_bytes / MiB));
	snprintf(col[5], 64, "%llu", (unsigned long long)r->damaged);
}

int main(int argc, char **argv)
{
	uint64_t limit = 256 * MiB, offer = 1024 * MiB;
	int which = 0; /* 0 both, 1 vrange, 2 malloc */
	struct outcome o[2];
	char why[512], col[2][6][64];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--vrange"))
			which = 1;
		else if (!strcmp(argv[i], "--malloc"))
			which = 2;
		else if (i + 1 < argc && !strcmp(argv[i], "--limit"))
			limit = strtoull(argv[++i], NULL, 10) * MiB;
		else if (i + 1 < argc && !strcmp(argv[i], "--offer"))
			offer = strtoull(argv[++i], NULL, 10) * MiB;
		else {
			fprintf(stderr, "usage: %s [--vrange|--malloc] [--limit MiB] "
				"[--offer MiB]\n", argv[0]);
			return 2;
		}
	}
	printf("memory cgroup limit %llu MiB; %u KiB images, hot set %u (%u MiB), "
	       "%llu MiB of images offered\n", (unsigned long long)(limit / MiB),
	       IMG >> 10, HOT, (unsigned)(HOT * (uint64_t)IMG / MiB),
	       (unsigned long long)(offer / MiB));
	memset(col, 0, sizeof(col));
	for (int k = 0; k < 2; k++) {
		if (which && which != k + 1)
			continue;
		if (run_one(k == 0, limit, offer, &o[k], why, sizeof(why)) < 0) {
			printf("cannot run: %s\n", why);
			return 77;
		}
		if (why[0])
			printf("%s run: %s\n", k == 0 ? "vrange_cache" : "malloc cache", why);
		fill(&o[k], col[k]);
	}
	row("", "vrange_cache", "malloc cache");
	row("outcome", col[0][0], col[1][0]);
	row("lookups served", col[0][1], col[1][1]);
	row("hit rate", col[0][2], col[1][2]);
	row("images decoded", col[0][3], col[1][3]);
	row("entries purged", col[0][4], col[1][4]);
	row("damaged hits", col[0][5], col[1][5]);
	if (which == 2)
		return 0;
	return o[0].survived && o[0].r.damaged == 0 ? 0 : 1;
}
