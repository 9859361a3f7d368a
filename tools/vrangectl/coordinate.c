/* SPDX-License-Identifier: MIT */
/*
 * coordinate.c - `vrangectl coordinate`: one pressure watcher for every
 * process of this user.
 *
 * It listens on the coordinator address (src/purge/coordinator.h): while it does,
 * the processes' own monitors leave library files to it.  It groups the
 * processes it can read by the memory cgroup that limits them (v1 or v2,
 * the nearest ancestor with a finite limit; the machine's MemTotal for the
 * rest), and watches each group with the in-process monitor's event
 * sources (memcg_events.h): cgroup v1 usage thresholds at the headroom's
 * edge and at a quarter of it, cgroup v2 memory.events and a PSI trigger on
 * the group's memory.pressure.  An event looks at the group at once; polls
 * at an interval shrinking with the headroom left remain beside the events
 * (they start looking before usage gets there, which under CPU contention
 * an event's late wake-up cannot) and, inside the headroom, every
 * millisecond.  When a group is inside its
 * headroom the coordinator frees what brings it back to twice the headroom
 * below the limit (everything volatile when under a quarter of it is
 * left), oldest first across the group's processes - the in-process
 * monitor's policy (pressure.h).  A purge frees at most what was asked for
 * (chunks are cut to the bytes still wanted).
 *
 * Under CPU contention (issue 25 item 7) the headroom is sized by the
 * coordinator's own wait for a CPU, as the monitor's is
 * (pressure_sized_headroom()), and where permitted it runs SCHED_RR so that
 * it hardly waits at all; its memory is locked (raise_priority,
 * lock_memory).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "coordinator.h"
#include "memcg_events.h"
#include "pressure.h"
#include "purge_all.h"

#define MiB (1024ull * 1024)
#define ALLOC_RATE_PER_MS (2 * MiB)
#define POLL_MIN_MS 1
#define POLL_MAX_MS 1000
#define REFRESH_MS 500
#define STALE_ACT_MS 1000
/* Inside the headroom with nothing volatile left to free: the next look. */
#define DRY_POLL_MS 100
/* A sized headroom that shrank by half is armed again at most this often
 * (one that grew by a quarter at once). */
#define RETUNE_SHRINK_MS 10000
#define MAX_GROUPS 256
/* PSI trigger on a v2 group: 100 ms of stall in the shortest window the
 * kernel takes from us (2 s where only multiples of 2 s are allowed). */
#define PSI_STALL_US 100000u
#define PSI_WIN_US 1000000u

struct group {
	char dir[512];          /* cgroup directory, "" = the machine */
	bool v2;
	uint64_t act_ms, after_act;
	/* Events (-1: none): v1 usage thresholds armed against armed_limit
	 * at armed_headroom, v2 memory.events and PSI trigger. */
	int usage_fd, warn_efd, crit_efd, events_fd, psi_fd;
	uint64_t armed_limit, armed_headroom, retune_ms;
	uint64_t overshoot;     /* usage past the v1 edge when read after its
				 * event (decaying maximum) */
	uint64_t overshoot_ms;
	bool edge_event;        /* the v1 edge fired since the last look */
	bool dry;               /* its last purge freed nothing */
	size_t *members;        /* indexes into the process snapshot */
	size_t n;
};

static volatile sig_atomic_t stop;
static bool verbose;
static int sched_fd = -1;          /* /proc/thread-self/schedstat */
static uint64_t run_delay_ns;      /* its run_delay at the last sample */
static uint64_t wake_us;           /* the last sample: time waited for a CPU */
static uint64_t lat_us;            /* their decaying maximum */
static uint64_t lat_decay_ms;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* --verbose: a line on stderr, stamped with CLOCK_MONOTONIC in ms. */
__attribute__((format(printf, 1, 2))) static void vlog(const char *fmt, ...)
{
	struct timespec ts;
	va_list ap;

	if (!verbose)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	fprintf(stderr, "[%.3f] vrangectl: ", (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A number from a small file ("max" or unreadable: UINT64_MAX). */
static uint64_t read_u64(const char *dir, const char *name)
{
	char path[640], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return UINT64_MAX;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0 || buf[0] < '0' || buf[0] > '9')
		return UINT64_MAX;
	buf[n] = 0;
	return strtoull(buf, NULL, 10);
}

static uint64_t meminfo(const char *key)
{
	char line[256];
	unsigned long long v = 0;
	size_t kl = strlen(key);
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && sscanf(line + kl, " %llu", &v) == 1)
			break;
	fclose(f);
	return (uint64_t)v * 1024;
}

/* Limit and usage of a group (limit UINT64_MAX: none). */
static void level(const struct group *g, uint64_t *limit, uint64_t *usage)
{
	if (!g->dir[0]) {
		uint64_t total = meminfo("MemTotal:"), avail = meminfo("MemAvailable:");

		*limit = total ? total : UINT64_MAX;
		*usage = total > avail ? total - avail : 0;
	} else if (g->v2) {
		uint64_t max = read_u64(g->dir, "memory.max"), high = read_u64(g->dir, "memory.high");

		*limit = high < max ? high : max;
		*usage = read_u64(g->dir, "memory.current");
	} else {
		*limit = read_u64(g->dir, "memory.limit_in_bytes");
		*usage = read_u64(g->dir, "memory.usage_in_bytes");
	}
	if (*limit >= (1ull << 60))
		*limit = UINT64_MAX;
}

/* The nearest cgroup of pid (or an ancestor) with a finite memory limit. */
static void limiting_cgroup(pid_t pid, char *out, size_t len, bool *v2)
{
	char path[64], line[512], dir[512];
	FILE *f;

	out[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':'), *q = p ? strchr(p + 1, ':') : NULL;
		bool is_v2 = p && q == p + 1 && !strncmp(line, "0:", 2);

		if (!q || (!is_v2 && strncmp(p + 1, "memory:", 7)))
			continue;
		q[strcspn(q, "\n")] = 0;
		if (strstr(q, "/.."))
			continue;
		snprintf(dir, sizeof(dir), "%s%s", is_v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
			 q + 1);
		for (;;) {
			uint64_t lim = read_u64(dir, is_v2 ? "memory.max" : "memory.limit_in_bytes");
			char *slash;

			if (is_v2 && read_u64(dir, "memory.high") < lim)
				lim = read_u64(dir, "memory.high");
			if (lim < (1ull << 60)) {
				snprintf(out, len, "%s", dir);
				*v2 = is_v2;
				fclose(f);
				return;
			}
			slash = strrchr(dir, '/');
			if (!slash || slash - dir <= (is_v2 ? 14 : 21))
				break;
			*slash = 0;
		}
	}
	fclose(f);
}

static size_t build_groups(const struct vc_proc *p, size_t n, struct group *g)
{
	size_t ng = 0;

	for (size_t i = 0; i < n; i++) {
		char dir[512];
		bool v2 = false;
		size_t k;

		limiting_cgroup(p[i].pid, dir, sizeof(dir), &v2);
		for (k = 0; k < ng && strcmp(g[k].dir, dir); k++)
			;
		if (k == ng) {
			if (ng == MAX_GROUPS)
				continue;
			memset(&g[ng], 0, sizeof(g[ng]));
			g[ng].usage_fd = g[ng].warn_efd = g[ng].crit_efd = -1;
			g[ng].events_fd = g[ng].psi_fd = -1;
			snprintf(g[ng].dir, sizeof(g[ng].dir), "%s", dir);
			g[ng].v2 = v2;
			g[ng].members = calloc(n, sizeof(size_t));
			if (!g[ng].members)
				continue;
			ng++;
		}
		g[k].members[g[k].n++] = i;
	}
	return ng;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void disarm(struct group *g)
{
	close_fd(&g->warn_efd);
	close_fd(&g->crit_efd);
	close_fd(&g->usage_fd);
	close_fd(&g->events_fd);
	close_fd(&g->psi_fd);
	g->armed_limit = 0;
}

/*
 * A decaying maximum that decays with time, not with samples: a larger
 * sample counts at once, a smaller one by 1/16 at most once a second.
 * Inside a headroom the coordinator looks every millisecond, and a maximum
 * decaying per sample would be forgotten within a tenth of a second - while
 * the load that caused it is still there.
 */
static void decay_by_time(uint64_t *m, uint64_t sample, uint64_t *last_ms)
{
	uint64_t now = now_ms();

	if (sample >= *m) {
		*m = sample;
		*last_ms = now;
	} else if (now - *last_ms >= 1000) {
		pressure_decay_max(m, sample);
		*last_ms = now;
	}
}

/*
 * The headroom kept below a group's limit: sized by the wake-up latency
 * this process observes and the overshoot seen on the group's v1 edge
 * (pressure_sized_headroom(), as the in-process monitor sizes its own):
 * under CPU contention the coordinator runs milliseconds after its event,
 * and an allocator eats that much of the headroom meanwhile.
 */
static uint64_t group_headroom(const struct group *g, uint64_t limit)
{
	return pressure_sized_headroom(limit, lat_us, g->overshoot);
}

/*
 * New v1 thresholds for headroom h: the new pair registered before the old
 * one goes (no moment without).
 */
static void v1_rethreshold(struct group *g, uint64_t limit, uint64_t h)
{
	int w, c;

	if (g->usage_fd < 0 || limit <= h)
		return;
	w = mcg_v1_threshold(g->dir, g->usage_fd, limit - h);
	c = w < 0 ? w : mcg_v1_threshold(g->dir, g->usage_fd, limit - h / 4);
	if (w < 0 || c < 0) {
		if (w >= 0)
			close(w);
		return;
	}
	close_fd(&g->warn_efd);
	close_fd(&g->crit_efd);
	g->warn_efd = w;
	g->crit_efd = c;
	g->armed_headroom = h;
}

/*
 * Arm the group's events for its limit now (again if it changed since):
 * the in-process monitor's sources, on the group's cgroup.  A source the
 * kernel refuses is left to the polls.
 */
static void arm(struct group *g)
{
	uint64_t limit, usage, headroom;
	char path[640];
	int fd;

	if (!g->dir[0])
		return;
	level(g, &limit, &usage);
	if (limit == UINT64_MAX || limit == g->armed_limit)
		return;
	disarm(g);
	g->armed_limit = limit;
	headroom = group_headroom(g, limit);
	g->armed_headroom = headroom;
	g->retune_ms = now_ms();
	if (g->v2) {
		fd = mcg_v2_events_open(g->dir);
		g->events_fd = fd >= 0 ? fd : -1;
		fd = mcg_psi_open(g->dir, PSI_STALL_US, PSI_WIN_US);
		g->psi_fd = fd >= 0 ? fd : -1;
	} else if (limit > headroom) {
		snprintf(path, sizeof(path), "%.512s/memory.usage_in_bytes", g->dir);
		g->usage_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (g->usage_fd >= 0) {
			fd = mcg_v1_threshold(g->dir, g->usage_fd, limit - headroom);
			g->warn_efd = fd >= 0 ? fd : -1;
			fd = mcg_v1_threshold(g->dir, g->usage_fd, limit - headroom / 4);
			g->crit_efd = fd >= 0 ? fd : -1;
		}
	}
	vlog("%s: limit %" PRIu64 ", headroom %" PRIu64 ", events:%s%s%s", g->dir, limit,
	     headroom, g->warn_efd >= 0 ? " v1-thresholds" : "",
	     g->events_fd >= 0 ? " memory.events" : "", g->psi_fd >= 0 ? " psi" : "");
}

/*
 * Keep a v1 group's thresholds at its sized headroom: armed again when it
 * grew by a quarter, or shrank by half (at most every RETUNE_SHRINK_MS).
 * The coordinator is not in the cgroup, so unlike the in-process monitor
 * it may arm under pressure without stalling in the cgroup's reclaim.
 */
static void retune(struct group *g, uint64_t limit, uint64_t now)
{
	uint64_t h = group_headroom(g, limit), a = g->armed_headroom;

	if (g->v2 || g->warn_efd < 0 || limit != g->armed_limit)
		return;
	if (h > a + a / 4 || (h < a / 2 && now - g->retune_ms >= RETUNE_SHRINK_MS)) {
		vlog("%s: headroom %" PRIu64 " -> %" PRIu64 " (wake-up latency %" PRIu64
		     " us, overshoot %" PRIu64 ")", g->dir, a, h, lat_us, g->overshoot);
		g->retune_ms = now;
		v1_rethreshold(g, limit, h);
	}
}

static void free_groups(struct group *g, size_t ng)
{
	for (size_t i = 0; i < ng; i++) {
		disarm(&g[i]);
		free(g[i].members);
	}
}

/* Purge want bytes across the group's processes. */
static uint64_t purge_group(const struct vc_proc *p, const struct group *g, uint64_t want)
{
	struct vc_proc *sub = calloc(g->n ? g->n : 1, sizeof(*sub));
	struct vc_purge_result res = { 0 };

	if (!sub)
		return 0;
	for (size_t i = 0; i < g->n; i++)
		sub[i] = p[g->members[i]];
	if (vc_purge(sub, g->n, want, NULL, &res) < 0)
		res.freed_bytes = 0;
	free(res.freed);
	free(sub);
	return res.freed_bytes;
}

/* One look at a group: purge if needed; the next poll interval in ms. */
static uint64_t check_group(const struct vc_proc *p, struct group *g)
{
	uint64_t limit, usage, left, headroom, interval, now = now_ms();

	level(g, &limit, &usage);
	if (limit == UINT64_MAX || usage == UINT64_MAX)
		return POLL_MAX_MS;
	left = usage < limit ? limit - usage : 0;
	/* Read late after an upward crossing of the v1 edge. */
	if (g->edge_event && !g->after_act && g->armed_headroom && left < g->armed_headroom)
		decay_by_time(&g->overshoot, g->armed_headroom - left, &g->overshoot_ms);
	g->edge_event = false;
	retune(g, limit, now);
	/* The armed edge, or the sized headroom if it grew since. */
	headroom = group_headroom(g, limit);
	if (g->armed_limit == limit && g->armed_headroom > headroom)
		headroom = g->armed_headroom;
	if (left < headroom) {
		bool critical = left < headroom / 4;
		uint64_t want = critical ? UINT64_MAX : usage + 2 * headroom - limit;

		if ((critical && !g->dry) || usage > g->after_act ||
		    now - g->act_ms >= STALE_ACT_MS) {
			uint64_t freed, t0 = now_us();

			vlog("%s: usage %" PRIu64 " limit %" PRIu64 ": purging %" PRIu64,
			     g->dir[0] ? g->dir : "machine", usage, limit, want);
			freed = purge_group(p, g, want);
			g->act_ms = now_ms();
			level(g, &limit, &g->after_act);
			vlog("%s: freed %" PRIu64 " of %" PRIu64 " wanted in %" PRIu64
			     " us, usage now %" PRIu64, g->dir[0] ? g->dir : "machine", freed, want,
			     now_us() - t0, g->after_act);
			g->dry = freed == 0;
		}
		/* Nothing left to free here: look less often (a real-time
		 * thread must not spin on a group full of other memory). */
		return g->dry ? DRY_POLL_MS : POLL_MIN_MS;
	}
	g->after_act = 0;
	g->dry = false;
	/*
	 * Polled toward the limit even with thresholds armed: under CPU
	 * contention the wake-up after an event comes milliseconds late (a
	 * median of 20 ms measured with one CPU hog on a loaded 2-core
	 * machine), while polls that come closer together as the headroom
	 * nears start before usage gets there (bench-pressure --coordinator).
	 */
	interval = (left - headroom) / ALLOC_RATE_PER_MS / 2;
	interval = interval > lat_us / 1000 ? interval - lat_us / 1000 : 0;
	return interval < POLL_MIN_MS ? POLL_MIN_MS : interval > POLL_MAX_MS ? POLL_MAX_MS : interval;
}

static int listen_socket(void)
{
	struct sockaddr_un sa;
	unsigned int len = coord_address(geteuid(), &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	uid_t owner;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, 128) == 0)
		return fd;
	close(fd);
	if (coord_check(geteuid(), &owner) || owner == geteuid())
		fprintf(stderr, "vrangectl: coordinate: a coordinator already runs for this user\n");
	else if (owner != (uid_t)-1)
		fprintf(stderr, "vrangectl: coordinate: the coordinator address is held by "
			"uid %u (not obeyed by this user's processes)\n", (unsigned int)owner);
	else
		fprintf(stderr, "vrangectl: coordinate: cannot listen: %s\n", strerror(errno));
	return -EADDRINUSE;
}

/*
 * Wake-up latency: how long this thread waited for a CPU since the last
 * sample (the growth of run_delay in its schedstat) - after a sleep, the
 * time between its event or timer firing and it running.
 */
static void sample_latency(void)
{
	char buf[128];
	unsigned long long run, delay;
	ssize_t n;

	if (sched_fd < 0 || (n = pread(sched_fd, buf, sizeof(buf) - 1, 0)) <= 0)
		return;
	buf[n] = 0;
	if (sscanf(buf, "%llu %llu", &run, &delay) != 2)
		return;
	wake_us = run_delay_ns && delay >= run_delay_ns ? (delay - run_delay_ns) / 1000 : 0;
	if (run_delay_ns)
		decay_by_time(&lat_us, wake_us, &lat_decay_ms);
	run_delay_ns = delay;
}

/* Take over the events and policy state of the groups that stay. */
static void carry_over(struct group *g, size_t ng, struct group *old, size_t nold)
{
	for (size_t i = 0; i < ng; i++)
		for (size_t k = 0; k < nold; k++)
			if (!strcmp(g[i].dir, old[k].dir)) {
				g[i].act_ms = old[k].act_ms;
				g[i].after_act = old[k].after_act;
				g[i].dry = old[k].dry;
				g[i].usage_fd = old[k].usage_fd;
				g[i].warn_efd = old[k].warn_efd;
				g[i].crit_efd = old[k].crit_efd;
				g[i].events_fd = old[k].events_fd;
				g[i].psi_fd = old[k].psi_fd;
				g[i].armed_limit = old[k].armed_limit;
				g[i].armed_headroom = old[k].armed_headroom;
				g[i].retune_ms = old[k].retune_ms;
				g[i].overshoot = old[k].overshoot;
				g[i].overshoot_ms = old[k].overshoot_ms;
				old[k].usage_fd = old[k].warn_efd = old[k].crit_efd = -1;
				old[k].events_fd = old[k].psi_fd = -1;
			}
	for (size_t i = 0; i < ng; i++)
		arm(&g[i]); /* new groups, changed limits */
}

static void drain(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) == sizeof(v))
		;
}

static void serve(int lfd)
{
	static struct group groups[MAX_GROUPS], old[MAX_GROUPS];
	static struct pollfd pf[1 + 4 * MAX_GROUPS];
	static size_t owner[1 + 4 * MAX_GROUPS];
	struct vc_proc *procs = NULL;
	size_t n = 0, ng = 0, last_n = SIZE_MAX;
	uint64_t refresh_at = 0;
	uint64_t next_check[MAX_GROUPS] = { 0 };
	int probes = 2;

	sample_latency(); /* the baseline of the first sample */

	while (!stop) {
		uint64_t next = POLL_MAX_MS, now = now_ms();
		nfds_t npf = 0;
		int c, r;

		if (now >= refresh_at) {
			size_t nold = ng;
			uint64_t t0 = now_us();

			memcpy(old, groups, sizeof(groups[0]) * ng);
			vc_procs_free(procs, n);
			procs = NULL;
			n = 0;
			if (vc_read_all(VC_TOTALS, &procs, &n) < 0)
				n = 0;
			ng = build_groups(procs, n, groups);
			carry_over(groups, ng, old, nold);
			free_groups(old, nold);
			memset(next_check, 0, sizeof(next_check));
			refresh_at = now + REFRESH_MS;
			/* Not every 500 ms into a journal: a change, or a slow one. */
			if (n != last_n || ng != nold || now_us() - t0 >= 5000)
				vlog("refresh: %zu processes, %zu groups in %" PRIu64 " us", n, ng,
				     now_us() - t0);
			last_n = n;
		}
		for (size_t i = 0; i < ng; i++) {
			if (now_ms() >= next_check[i])
				next_check[i] = now_ms() + check_group(procs, &groups[i]);
			if (next_check[i] - now_ms() < next && next_check[i] > now_ms())
				next = next_check[i] - now_ms();
			else if (next_check[i] <= now_ms())
				next = 0;
		}
		if (refresh_at - now_ms() < next && refresh_at > now_ms())
			next = refresh_at - now_ms();
		pf[npf++] = (struct pollfd){ lfd, POLLIN, 0 };
		for (size_t i = 0; i < ng; i++) {
			const struct group *g = &groups[i];

			if (g->warn_efd >= 0) {
				owner[npf] = i;
				pf[npf++] = (struct pollfd){ g->warn_efd, POLLIN, 0 };
			}
			if (g->crit_efd >= 0) {
				owner[npf] = i;
				pf[npf++] = (struct pollfd){ g->crit_efd, POLLIN, 0 };
			}
			if (g->events_fd >= 0) {
				owner[npf] = i;
				pf[npf++] = (struct pollfd){ g->events_fd, POLLPRI, 0 };
			}
			if (g->psi_fd >= 0) {
				owner[npf] = i;
				pf[npf++] = (struct pollfd){ g->psi_fd, POLLPRI, 0 };
			}
		}
		/* The first two sleeps are 1 ms long: a first sample of the
		 * wake-up latency before an event needs it. */
		r = poll(pf, npf, probes > 0 ? 1 : (int)next);
		if (probes > 0)
			probes--;
		sample_latency();
		if (r <= 0)
			continue;
		if (pf[0].revents)
			while ((c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
				close(c); /* a process checking that we are here */
		for (nfds_t k = 1; k < npf; k++) {
			struct group *g = &groups[owner[k]];

			if (!pf[k].revents)
				continue;
			vlog("%s: event on fd %d (%s), woke %" PRIu64 " us late", g->dir, pf[k].fd,
			     pf[k].fd == g->warn_efd ? "v1 edge" : pf[k].fd == g->crit_efd ?
			     "v1 critical" : pf[k].fd == g->events_fd ? "memory.events" : "psi", wake_us);
			if (pf[k].fd == g->events_fd)
				mcg_v2_events_rearm(pf[k].fd);
			else if (pf[k].fd == g->psi_fd && (pf[k].revents & POLLERR))
				close_fd(&g->psi_fd); /* its cgroup went away */
			else if (pf[k].fd != g->psi_fd)
				drain(pf[k].fd);
			if (pf[k].fd == g->warn_efd)
				g->edge_event = true;
			/* Look at the group now (thresholds fire both ways:
			 * check_group reads the level). */
			next_check[owner[k]] = 0;
		}
	}
	free_groups(groups, ng);
	vc_procs_free(procs, n);
}

/*
 * Run ahead of CPU-bound work where permitted: SCHED_RR at the lowest
 * real-time priority (root, CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least
 * 1 as granted by limits.conf's rtprio or a unit's LimitRTPRIO=).  Under a
 * CPU hog per core a normal thread wakes 5-40 ms after its event and is
 * preempted while it purges, while an allocator takes 1 MiB per ms; a
 * real-time one runs at once.  It sleeps in poll() between looks, and the
 * kernel's real-time throttling (sched_rt_runtime_us) bounds it in any
 * case.  Not a lower nice value: with autogroup scheduling a daemon is
 * alone in its session's group, where nice changes nothing.
 */
static void raise_priority(void)
{
	struct sched_param sp = { .sched_priority = 1 };

	if (sched_setscheduler(0, SCHED_RR | SCHED_RESET_ON_FORK, &sp) == 0)
		vlog("scheduling: SCHED_RR, priority 1");
	else
		vlog("scheduling: not real-time (%s: needs root, CAP_SYS_NICE or RLIMIT_RTPRIO "
		     ">= 1)", strerror(errno));
}

/*
 * Lock what is mapped now (code, static data, the heap so far), so that a
 * purge under global memory pressure never waits for its own code to be
 * read back.  Not MCL_FUTURE: the state files it maps while purging may be
 * large, and RLIMIT_MEMLOCK would then refuse the mappings.
 */
static void lock_memory(void)
{
	if (mlockall(MCL_CURRENT) == 0)
		vlog("memory locked");
	else
		vlog("memory not locked: %s", strerror(errno));
}

int vc_cmd_coordinate(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "foreground", no_argument, 0, 'f' }, { "verbose", no_argument, 0, 'v' },
		{ "no-realtime", no_argument, 0, 'n' }, { 0 }
	};
	struct sigaction sa = { .sa_handler = on_signal };
	bool fg = false, realtime = true;
	int c, lfd;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'f')
			fg = true;
		else if (c == 'v')
			verbose = true;
		else if (c == 'n')
			realtime = false;
		else
			goto bad;
	}
	if (optind != argc)
		goto bad;
	lfd = listen_socket();
	if (lfd < 0)
		return 1;
	if (!fg && daemon(0, 0) < 0) {
		fprintf(stderr, "vrangectl: coordinate: %s\n", strerror(errno));
		return 1;
	}
	if (realtime)
		raise_priority();
	lock_memory();
	sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	serve(lfd);
	close(lfd);
	if (sched_fd >= 0)
		close(sched_fd);
	return 0;
bad:
	fputs("usage: vrangectl coordinate [--foreground] [--verbose] [--no-realtime]\n", stderr);
	return 2;
}
