/* SPDX-License-Identifier: MIT */
/*
 * pressure.c - the monitor thread: it waits on every memory-pressure source
 * it can open and purges volatile pages when one fires, and it keeps the
 * resident bytes of library files under the budget.
 *
 * Sources, all armed together where available (one poll() waits on them):
 *  - PSI triggers on /proc/pressure/memory and on the own cgroup v2
 *    memory.pressure: slow, system- or cgroup-wide pressure.
 *  - cgroup v1 memory controller: memory.usage_in_bytes thresholds (warn
 *    and critical) and memory.pressure_level "medium" through
 *    cgroup.event_control eventfds.
 *  - cgroup v2 limits: memory.current against memory.high/memory.max,
 *    polled at an interval shrinking with the headroom left, plus
 *    memory.events changes (POLLPRI).
 *  - /proc/meminfo MemAvailable, polled the same way.
 *
 * Why thresholds and not just PSI: in a memcg without swap a fast allocator
 * is OOM-killed within ~0.2 ms of reclaim starting, and PSI (0.4-2 s late)
 * and pressure_level (at the kill) fire too late.  Only a usage threshold
 * below the limit fires early, with a lead of headroom / allocation rate,
 * so the monitor keeps its own headroom (pressure_headroom()) and purges
 * as soon as usage enters it.
 *
 * Policy: an event frees purge_percent of the volatile bytes, or enough to
 * get back to twice the headroom below the limit if that is more; with
 * less than a quarter of the headroom left everything volatile goes.  While
 * memory is plentiful nothing is purged.
 *
 * The thread blocks all signals, never touches application memory, owns
 * every descriptor it opens (O_CLOEXEC) and is woken through an eventfd to
 * stop or to apply a new budget.  A budget set while the monitor is not
 * running is enforced once it starts.  After fork() the child has no
 * monitor (its stats say "none"); it may start its own.  The thread is
 * stopped and joined at exit and at dlclose (destructor).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "coordinator.h"
#include "file_state.h"
#include "memcg_events.h"
#include "pressure.h"
#include "publish.h"
#include "purge.h"
#include "vrange.h"

#define MiB (1ull << 20)

/* First published layout of struct vrange_monitor_opts (0.1): all of it. */
#define OPTS_SIZE_V1 (offsetof(struct vrange_monitor_opts, flags) + sizeof(unsigned int))
#define KNOWN_FLAGS (VRANGE_MONITOR_NO_PSI | VRANGE_MONITOR_NO_CGROUP)


/* Allocation rate the poll intervals assume (bytes per ms), and bounds. */
#define ALLOC_RATE_PER_MS (2 * MiB)
#define POLL_MIN_MS 1
#define POLL_MAX_MS 1000
/* Far from the limit a poll is spaced by the time an allocator at
 * ALLOC_RATE needs to eat half the rest, up to this: an idle process
 * should not keep waking up. */
#define POLL_IDLE_MAX_MS 30000
#define BUDGET_CHECK_MS 200
/* Thresholds are armed against the limit seen then; a changed limit has no
 * event of its own (pressure_level still fires at reclaim meanwhile). */
#define LIMIT_RECHECK_MS 15000
/* A level that stays inside the headroom without rising is acted on again
 * only after this long (purging did not help, or it is not our memory). */
#define STALE_ACT_MS 1000
/*
 * How long a spell of pressure on a level is left to `vrangectl
 * coordinate` before the monitor purges shared files too: the coordinator
 * reacts in well under 10 ms when it serves the cgroup (bench-pressure
 * --coordinator), but it learns of new processes and cgroups only at its
 * refresh, and may be slow or stuck.
 */
#define COORD_GRACE_MS 10
/* One purge_run() call frees at most this much, so fork() (whose prepare
 * handler takes the purge lock) never waits long behind the monitor. */
#define PURGE_STEP (32 * MiB)
/* While volatile memory exists the monitor re-reads /proc/self/cgroup this
 * often (one pread, ~2 us): no kernel event tells a process it was moved
 * into another cgroup, and the promise is to follow within a second. */
#define CG_CHECK_MS 500
/* The callers' slow paths look at most this often. */
#define CG_CALLER_MS 10
/* Thresholds are armed again for a new headroom when it grew by a quarter
 * or shrank by half, the latter at most this often. */
#define RETUNE_SHRINK_MS 10000

enum kind { K_WAKE, K_PSI, K_PSI_CG, K_V1_WARN, K_V1_CRIT, K_V1_LEVEL, K_V2_EVENTS };

enum src { SRC_NONE, SRC_MEMINFO, SRC_V1_LEVEL, SRC_PSI, SRC_PSI_CG, SRC_V2, SRC_V1 };
static const char *const src_names[] = {
	[SRC_NONE] = "none", [SRC_MEMINFO] = "meminfo", [SRC_V1_LEVEL] = "memcg-v1",
	[SRC_PSI] = "psi", [SRC_PSI_CG] = "psi-cgroup", [SRC_V2] = "memcg-v2",
	[SRC_V1] = "memcg-v1",
};

/* A watched "usage against a limit" pair: cgroup v1/v2 or meminfo. */
struct level {
	uint64_t limit;         /* 0: none known */
	uint64_t headroom;
	uint64_t overshoot;     /* how far usage was past the headroom's
				 * edge when the monitor read it after an
				 * upward crossing (decaying maximum) */
	uint64_t after_act;     /* usage right after our last purge */
	uint64_t act_ms;        /* when we last purged for it */
	uint64_t deferred_ms;   /* when this spell of pressure was first
				 * left to the coordinator (0: not) */
	uint64_t next_ms;       /* next poll */
};

struct monitor {
	struct vrange_monitor_opts opts;
	int wake_fd;
	int psi_fd, psi_cg_fd;
	/* cgroup v1 */
	char *v1_dir;
	int v1_usage_fd, v1_ctl_fd, v1_level_fd;
	int v1_warn_efd, v1_crit_efd, v1_level_efd;
	struct level v1;
	uint64_t v1_recheck_ms;
	/* cgroup v2 */
	char *v2_dir;           /* own cgroup */
	size_t v2_mnt_len;
	bool v2_is_root;
	char *v2_limit_dir;     /* the ancestor (or self) with the tightest limit */
	int v2_current_fd, v2_events_fd;
	struct level v2;
	/* /proc/meminfo */
	int meminfo_fd;
	struct level mem;
	/* Wake-up latency: run_delay of /proc/thread-self/schedstat */
	int sched_fd;
	uint64_t run_delay_ns;
	uint64_t lat_us;        /* decaying maximum of the samples */
	uint64_t retune_ms;     /* last time the headroom was shrunk */
	/* /proc/self/cgroup: what the sources were armed for */
	int cg_fd;
	uint64_t cg_hash;
	uint64_t cg_next_ms;
	bool cg_active;         /* periodic checks on (volatile memory exists) */
	uint64_t budget_next_ms;
	struct pollfd pfd[8];
	enum kind kind[8];
	int npfd;
};

static pthread_mutex_t mon_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Held by the monitor thread whenever it is awake (not asleep in poll):
 * fork() takes it first (pressure_fork_prepare), so no child is copied
 * while the monitor is inside stdio or the allocator, whose locks the child
 * would inherit held (seen: a sanitizer's allocator, which has no fork
 * handler, hung the child's first malloc).  No application code runs on
 * this thread, so a fork can never come from under it.
 */
static pthread_mutex_t mon_busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static pthread_t mon_thread;
static bool mon_running;                /* under mon_lock */
static struct monitor mon;              /* owned by the thread while running */
static _Atomic bool stop_req;
static _Atomic int cur_src = SRC_NONE;
static _Atomic size_t budget;
static _Atomic int wake_fd_pub = -1;    /* for pressure_set_budget() */
static _Atomic bool running_pub;        /* mon_running, for the record */
/* /proc/self/cgroup's hash when the sources were armed (0: not watched),
 * and a request from another thread to look at it again. */
static _Atomic uint64_t cg_hash_pub;
static _Atomic bool cg_check_req;
_Atomic bool pressure_want_mark;

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

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* "<VRANGE_FS_ROOT><path>" into a new string, or NULL. */
static char *rooted(const char *path)
{
	char *s;
	const char *root = vr_env.fs_root ? vr_env.fs_root : "";

	if (asprintf(&s, "%s%s", root, path) < 0)
		return NULL;
	return s;
}

static int open_rooted(const char *path, int flags)
{
	char *p = rooted(path);
	int fd;

	if (!p)
		return -ENOMEM;
	fd = open(p, flags | O_CLOEXEC);
	fd = fd < 0 ? -errno : fd;
	free(p);
	return fd;
}

static int open_in(const char *dir, const char *name, int flags)
{
	char *p;
	int fd;

	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return -ENOMEM;
	fd = open(p, flags | O_CLOEXEC);
	fd = fd < 0 ? -errno : fd;
	free(p);
	return fd;
}

/* Read a small file from offset 0 into buf (NUL-terminated); length or -errno. */
static ssize_t pread_all(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return n;
}

/* A number, or "max" (cgroup v2) as UINT64_MAX.  0 or -EINVAL. */
static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	while (isspace((unsigned char)*s))
		s++;
	if (!strncmp(s, "max", 3)) {
		*out = UINT64_MAX;
		return 0;
	}
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	*out = v;
	return 0;
}

static int read_u64_fd(int fd, uint64_t *out)
{
	char buf[64];
	ssize_t n = pread_all(fd, buf, sizeof(buf));

	return n < 0 ? (int)n : parse_u64(buf, out);
}

static int read_u64_in(const char *dir, const char *name, uint64_t *out)
{
	int fd = open_in(dir, name, O_RDONLY);
	int r;

	if (fd < 0)
		return fd;
	r = read_u64_fd(fd, out);
	close(fd);
	return r;
}

/* MemTotal and MemAvailable in bytes from an open /proc/meminfo. */
static int read_meminfo(int fd, uint64_t *total, uint64_t *avail)
{
	char buf[4096];
	const char *t, *a;
	ssize_t n = pread_all(fd, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	t = strstr(buf, "MemTotal:");
	a = strstr(buf, "MemAvailable:");
	if (!t || !a)
		return -ENOENT;
	*total = strtoull(t + 9, NULL, 10) << 10;
	*avail = strtoull(a + 13, NULL, 10) << 10;
	return 0;
}

/* FNV-1a of /proc/self/cgroup read through fd; never 0, or 0 on error. */
static uint64_t cgroup_hash(int fd)
{
	char buf[4096];
	uint64_t h = 14695981039346656037ull;
	ssize_t n = fd >= 0 ? pread_all(fd, buf, sizeof(buf)) : -EBADF;

	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
	return h | 1;
}

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = '\0';
}

static bool has_token(const char *list, const char *tok)
{
	size_t n = strlen(tok);

	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, tok, n) && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/*
 * The directory of this process's cgroup: v2 (controller NULL) from the
 * "0::" line of /proc/self/cgroup, v1 from the line listing controller,
 * located under the matching mount found in /proc/self/mountinfo.
 * A new string (rooted), or NULL; *mnt_len is the length of its mount
 * point's part, *is_root whether it is the hierarchy's root cgroup.
 */
static char *own_cgroup_dir(const char *controller, size_t *mnt_len, bool *is_root)
{
	char *line = NULL, *cg = NULL, *dir = NULL, *p;
	const char *root = vr_env.fs_root ? vr_env.fs_root : "";
	size_t cap = 0;
	FILE *f;
	int fd;

	fd = open_rooted("/proc/self/cgroup", O_RDONLY);
	if (fd < 0 || !(f = fdopen(fd, "r"))) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while (!cg && getline(&line, &cap, f) > 0) {
		char *ctl, *path;

		line[strcspn(line, "\n")] = '\0';
		if (!(ctl = strchr(line, ':')) || !(path = strchr(ctl + 1, ':')))
			continue;
		*ctl++ = '\0';
		*path++ = '\0';
		if (controller ? has_token(ctl, controller)
			       : (!strcmp(line, "0") && *ctl == '\0'))
			cg = strdup(path);
	}
	fclose(f);
	if (!cg)
		goto out;
	*is_root = !strcmp(cg, "/");

	fd = open_rooted("/proc/self/mountinfo", O_RDONLY);
	if (fd < 0 || !(f = fdopen(fd, "r"))) {
		if (fd >= 0)
			close(fd);
		goto out;
	}
	while (!dir && getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint opts [optional...] - fstype src super */
		char *field[5], *sep, *fstype, *super, *save = NULL, *rel;
		size_t rl;
		int i;

		line[strcspn(line, "\n")] = '\0';
		if (!(sep = strstr(line, " - ")))
			continue;
		*sep = '\0';
		fstype = strtok_r(sep + 3, " ", &save);
		strtok_r(NULL, " ", &save);
		super = strtok_r(NULL, " ", &save);
		if (!fstype || !super)
			continue;
		if (controller ? strcmp(fstype, "cgroup") || !has_token(super, controller)
			       : strcmp(fstype, "cgroup2") != 0)
			continue;
		save = NULL;
		for (i = 0, p = strtok_r(line, " ", &save); p && i < 5;
		     p = strtok_r(NULL, " ", &save))
			field[i++] = p;
		if (i < 5)
			continue;
		unescape(field[3]);
		unescape(field[4]);
		/* The cgroup path is relative to the hierarchy's root; this mount
		 * shows the part of the hierarchy below field[3]. */
		rl = strcmp(field[3], "/") ? strlen(field[3]) : 0;
		if (rl && (strncmp(cg, field[3], rl) || (cg[rl] != '/' && cg[rl])))
			continue;
		rel = cg + rl;
		if (asprintf(&dir, "%s%s%s", root, field[4], strcmp(rel, "/") ? rel : "") < 0)
			dir = NULL;
		else
			*mnt_len = strlen(root) + strlen(field[4]);
	}
	fclose(f);
out:
	free(line);
	free(cg);
	return dir;
}

/* Cut the last component of dir; false when it would go above stop. */
static bool parent_dir(char *dir, size_t stop_len)
{
	char *slash = strrchr(dir, '/');

	if (!slash || (size_t)(slash - dir) < stop_len)
		return false;
	*slash = '\0';
	return true;
}

/* ------------------------------------------------------------------ */
/* Policy */

/*
 * While `vrangectl coordinate` runs for our user, pressure purges leave
 * library files to it (it purges them in one order across processes) and
 * look after what only this process can reach: anonymous memory and
 * foreign files.  Set by act() for its purge; the budget keeps its own
 * promise and purges everything.
 */
static bool leave_shared;

/* Volatile bytes of memory: a disk file's volatile pages are disk space
 * (a memory pass takes only those in the page cache), so they are not
 * what a share of "the volatile bytes" is taken from. */
static uint64_t volatile_bytes_now(void)
{
	uint64_t files, vol, purged, resident, dvol, dpurged, refused;
	const char *why;

	vfile_totals(&files, &vol, &purged, &resident);
	vfile_disk_totals(&dvol, &dpurged, &refused, &why);
	return (vol > dvol ? vol - dvol : 0) << vr_page_shift;
}

/* Free up to bytes in bounded steps; logs the reaction time of the first. */
static uint64_t purge_bytes(uint64_t bytes, const char *why, uint64_t t0_us,
			    bool for_budget)
{
	uint64_t freed = 0;

	while (freed < bytes) {
		uint64_t step = bytes - freed;
		uint64_t got;

		/* The first step is one chunk: it is what stops the bleeding. */
		if (freed == 0 && step > VFILE_CHUNK_BYTES)
			step = VFILE_CHUNK_BYTES;
		else if (step > PURGE_STEP)
			step = PURGE_STEP;
		got = for_budget ? purge_run_no_disk(step) : purge_run_of(step, leave_shared);
		if (freed == 0 && t0_us)
			vr_debug("%s: first %" PRIu64 " bytes freed %" PRIu64
				 " us after the event", why, got, now_us() - t0_us);
		freed += got;
		if (got == 0 || atomic_load(&stop_req))
			break;
	}
	return freed;
}

/*
 * Act on one pressure event.  usage/limit/headroom describe the level that
 * fired (limit 0: an event without a level, e.g. PSI).  leave: pass over
 * files with shared state, the coordinator's to purge (leave_shared).
 */
static uint64_t act(const char *why, uint64_t usage, uint64_t limit,
		    uint64_t headroom, uint64_t t0_us, bool leave)
{
	uint64_t vol, want, freed;

	vol = leave ? vfile_unshared_volatile_pages() << vr_page_shift :
		      volatile_bytes_now();
	if (vol == 0)
		return 0;
	purge_note_pressure_event();
	want = vol / 100 * mon.opts.purge_percent;
	if (want < vr_page_size)
		want = vr_page_size;
	if (limit) {
		uint64_t left = usage < limit ? limit - usage : 0;

		if (left < headroom / 4)
			want = vol;      /* critical: everything volatile */
		else if (usage + 2 * headroom - limit > want)
			want = usage + 2 * headroom - limit;
	}
	if (want > vol)
		want = vol;
	leave_shared = leave;
	freed = purge_bytes(want, why, t0_us, false);
	leave_shared = false;
	vr_debug("%s: usage %" PRIu64 " limit %" PRIu64 ": purged %" PRIu64
		 " of %" PRIu64 " volatile bytes", why, usage, limit, freed, vol);
	return freed;
}

#define decay_max pressure_decay_max

/*
 * The headroom kept below a cgroup v1 limit, whose thresholds give the
 * monitor its only lead: pressure_sized_headroom() of the wake-up latency
 * the thread observes (the time between its eventfd or timer firing and
 * it running: under CPU contention milliseconds, not microseconds) and of
 * the overshoot seen on this level.
 */
static uint64_t sized_headroom(const struct level *lv, uint64_t limit)
{
	return pressure_sized_headroom(limit, mon.lat_us, lv ? lv->overshoot : 0);
}

/*
 * Whether this purge for lv leaves shared files to `vrangectl coordinate`:
 * while one runs for our user, for the first COORD_GRACE_MS of a spell of
 * pressure, and never at the critical edge.  A coordinator that does not
 * serve this cgroup yet, or reacts too late, must not leave the process to
 * the OOM killer with its volatile memory in place.
 */
static bool leave_to_coordinator(struct level *lv, bool critical, uint64_t now)
{
	if (critical || !coord_present())
		return false;
	if (!lv->deferred_ms)
		lv->deferred_ms = now;
	return now - lv->deferred_ms < COORD_GRACE_MS;
}

/*
 * A polled level (or a threshold eventfd that fired): act if usage is
 * inside the headroom and this is an event, or it is critical, or it rose
 * since our last purge, or it has stayed there for STALE_ACT_MS (purging
 * did not bring it down: not our memory, or nothing left to give).
 * Returns the next poll interval in ms.
 */
static uint64_t check_level(struct level *lv, const char *why, uint64_t (*rd)(void),
			    bool event, uint64_t t0_us)
{
	uint64_t now = now_ms(), usage = rd(), left, interval;

	if (!lv->limit)
		return POLL_MAX_MS;
	left = usage < lv->limit ? lv->limit - usage : 0;
	if (left < lv->headroom) {
		bool critical = left < lv->headroom / 4;

		/* Read late after an upward crossing of a v1 threshold (the
		 * other events fire at the limit, not at our edge). */
		if (event && lv == &mon.v1 && !lv->after_act)
			decay_max(&lv->overshoot, lv->headroom - left);

		if (event || critical || usage > lv->after_act ||
		    now - lv->act_ms >= STALE_ACT_MS) {
			act(why, usage, lv->limit, lv->headroom, t0_us,
			    leave_to_coordinator(lv, critical, now));
			lv->act_ms = now_ms();
			lv->after_act = rd();
			return POLL_MIN_MS;
		}
		return volatile_bytes_now() ? POLL_MIN_MS : POLL_MAX_MS;
	}
	lv->after_act = 0;
	lv->deferred_ms = 0;
	/* Time an allocator at ALLOC_RATE needs to eat half the rest, less
	 * the wake-up latency the thread observes (it wakes that late). */
	interval = (left - lv->headroom) / ALLOC_RATE_PER_MS / 2;
	interval = interval > mon.lat_us / 1000 ? interval - mon.lat_us / 1000 : 0;
	if (interval < POLL_MIN_MS)
		interval = POLL_MIN_MS;
	if (interval > POLL_IDLE_MAX_MS)
		interval = POLL_IDLE_MAX_MS;
	return interval;
}

static void enforce_budget(void)
{
	size_t b = atomic_load(&budget);
	uint64_t files, vol, purged, resident;

	if (!b)
		return;
	for (int i = 0; i < 64 && !atomic_load(&stop_req); i++) {
		vfile_totals(&files, &vol, &purged, &resident);
		if (resident <= b || volatile_bytes_now() == 0)
			break;
		/* disk files' pages are not in the budget's count */
		if (purge_bytes(resident - b, NULL, 0, true) == 0)
			break;
	}
}

/* ------------------------------------------------------------------ */
/* Sources */

static void add_pfd(int fd, short events, enum kind k)
{
	mon.pfd[mon.npfd] = (struct pollfd){ .fd = fd, .events = events };
	mon.kind[mon.npfd++] = k;
}

/* Arm a PSI "some" trigger on path, stepping the window up to what the
 * kernel accepts.  The fd, or -errno. */
static int psi_arm(const char *path, bool root_it)
{
	unsigned int win = 0;
	int fd, r;

	fd = root_it ? open_rooted(path, O_RDWR | O_NONBLOCK)
		     : open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return root_it ? fd : -errno;
	r = mcg_psi_write(fd, mon.opts.psi_stall_us, mon.opts.psi_window_us, &win);
	if (r == 0) {
		vr_debug("PSI trigger on %s: window %u us", path, win);
		return fd;
	}
	vr_debug("no PSI trigger on %s: %s", path, strerror(-r));
	close(fd);
	return r;
}

static int v1_register(int efd, int target_fd, const char *arg)
{
	return mcg_v1_register(mon.v1_ctl_fd, efd, target_fd, arg);
}

static void v1_disarm(void)
{
	close_fd(&mon.v1_warn_efd);
	close_fd(&mon.v1_crit_efd);
	close_fd(&mon.v1_usage_fd);
	close_fd(&mon.v1_ctl_fd);
	mon.v1.limit = 0;
}

/*
 * cgroup v1: find the tightest finite limit on our own memcg or an
 * ancestor and register warn/critical usage thresholds on it.  Also the
 * "medium" pressure_level of the own memcg (registered once).
 */
static void v1_arm(uint64_t mem_total)
{
	size_t mnt_len = 0;
	bool is_root = false;
	char *own = own_cgroup_dir("memory", &mnt_len, &is_root), *dir = NULL;
	uint64_t best_left = UINT64_MAX, best_limit = 0;
	char arg[32];
	int r;

	if (!own)
		return;
	if (mon.v1_level_efd < 0) {
		int ctl = open_in(own, "cgroup.event_control", O_WRONLY);
		int lvl = open_in(own, "memory.pressure_level", O_RDONLY);
		int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

		mon.v1_ctl_fd = ctl;
		if (ctl >= 0 && lvl >= 0 && efd >= 0 &&
		    v1_register(efd, lvl, "medium") == 0) {
			mon.v1_level_efd = efd;
			mon.v1_level_fd = lvl;
			efd = lvl = -1;
		}
		close_fd(&efd);
		close_fd(&lvl);
		close_fd(&mon.v1_ctl_fd);
	}
	/* Ancestors' limits apply too (use_hierarchy): walk up to the mount. */
	dir = strdup(own);
	for (char *d = dir; d; d = parent_dir(d, mnt_len) ? d : NULL) {
		uint64_t limit, usage;

		if (read_u64_in(d, "memory.limit_in_bytes", &limit) < 0 ||
		    read_u64_in(d, "memory.usage_in_bytes", &usage) < 0)
			break;
		if (limit >= mem_total)
			continue;
		uint64_t left = usage < limit ? limit - usage : 0;
		if (left < best_left) {
			best_left = left;
			best_limit = limit;
			free(mon.v1_dir);
			mon.v1_dir = strdup(d);
		}
	}
	free(dir);
	free(own);
	if (!best_limit || !mon.v1_dir)
		return;

	mon.v1.limit = best_limit;
	mon.v1.headroom = sized_headroom(&mon.v1, best_limit);
	mon.v1_ctl_fd = open_in(mon.v1_dir, "cgroup.event_control", O_WRONLY);
	mon.v1_usage_fd = open_in(mon.v1_dir, "memory.usage_in_bytes", O_RDONLY);
	mon.v1_warn_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	mon.v1_crit_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (mon.v1_ctl_fd < 0 || mon.v1_usage_fd < 0 || mon.v1_warn_efd < 0 ||
	    mon.v1_crit_efd < 0) {
		r = -EIO;
		goto fail;
	}
	snprintf(arg, sizeof(arg), "%" PRIu64, best_limit - mon.v1.headroom);
	r = v1_register(mon.v1_warn_efd, mon.v1_usage_fd, arg);
	if (r == 0) {
		snprintf(arg, sizeof(arg), "%" PRIu64, best_limit - mon.v1.headroom / 4);
		r = v1_register(mon.v1_crit_efd, mon.v1_usage_fd, arg);
	}
	if (r < 0)
		goto fail;
	close_fd(&mon.v1_ctl_fd);
	vr_debug("memcg v1 %s: limit %" PRIu64 ", thresholds at -%" PRIu64
		 " and -%" PRIu64, mon.v1_dir, best_limit, mon.v1.headroom,
		 mon.v1.headroom / 4);
	return;
fail:
	vr_debug("memcg v1 thresholds on %s unusable: %s", mon.v1_dir, strerror(-r));
	v1_disarm();
}

/* cgroup v2: the tightest of memory.high / memory.max on the own cgroup
 * and its ancestors; memory.events of that cgroup. */
static void v2_arm(uint64_t mem_total)
{
	char *dir;
	uint64_t best_left = UINT64_MAX;

	if (!mon.v2_dir || !(dir = strdup(mon.v2_dir)))
		return;
	for (char *d = dir; d; d = parent_dir(d, mon.v2_mnt_len) ? d : NULL) {
		uint64_t high = UINT64_MAX, max = UINT64_MAX, cur, limit;

		if (read_u64_in(d, "memory.current", &cur) < 0)
			break;
		read_u64_in(d, "memory.high", &high);
		read_u64_in(d, "memory.max", &max);
		limit = high < max ? high : max;
		if (limit >= mem_total)
			continue;
		uint64_t left = cur < limit ? limit - cur : 0;
		if (left < best_left) {
			best_left = left;
			mon.v2.limit = limit;
			free(mon.v2_limit_dir);
			mon.v2_limit_dir = strdup(d);
		}
	}
	free(dir);
	if (!mon.v2.limit || !mon.v2_limit_dir)
		return;
	mon.v2.headroom = pressure_headroom(mon.v2.limit);
	mon.v2_current_fd = open_in(mon.v2_limit_dir, "memory.current", O_RDONLY);
	if (mon.v2_current_fd < 0) {
		mon.v2.limit = 0;
		return;
	}
	mon.v2_events_fd = mcg_v2_events_open(mon.v2_limit_dir);
	if (mon.v2_events_fd < 0)
		mon.v2_events_fd = -1;
	vr_debug("memcg v2 %s: limit %" PRIu64 ", headroom %" PRIu64,
		 mon.v2_limit_dir, mon.v2.limit, mon.v2.headroom);
}

static void monitor_close_all(void)
{
	close_fd(&mon.psi_fd);
	close_fd(&mon.psi_cg_fd);
	v1_disarm();
	close_fd(&mon.v1_level_efd);
	close_fd(&mon.v1_level_fd);
	close_fd(&mon.v2_current_fd);
	close_fd(&mon.v2_events_fd);
	close_fd(&mon.meminfo_fd);
	close_fd(&mon.cg_fd);
	atomic_store(&cg_hash_pub, 0);
	free(mon.v1_dir);
	free(mon.v2_dir);
	free(mon.v2_limit_dir);
	mon.v1_dir = mon.v2_dir = mon.v2_limit_dir = NULL;
}

static void monitor_init_fds(void)
{
	mon.psi_fd = mon.psi_cg_fd = -1;
	mon.v1_usage_fd = mon.v1_ctl_fd = mon.v1_level_fd = -1;
	mon.v1_warn_efd = mon.v1_crit_efd = mon.v1_level_efd = -1;
	mon.v2_current_fd = mon.v2_events_fd = mon.meminfo_fd = mon.cg_fd = -1;
	mon.cg_hash = 0;
	mon.cg_active = true;
	mon.cg_next_ms = 0;
	mon.v1_dir = mon.v2_dir = mon.v2_limit_dir = NULL;
	memset(&mon.v1, 0, sizeof(mon.v1));
	memset(&mon.v2, 0, sizeof(mon.v2));
	memset(&mon.mem, 0, sizeof(mon.mem));
}

/* Open every source this machine offers; set cur_src. */
static void monitor_open_sources(void)
{
	bool cg = !(mon.opts.flags & VRANGE_MONITOR_NO_CGROUP) && !vr_env.meminfo_only;
	bool psi = !(mon.opts.flags & VRANGE_MONITOR_NO_PSI) && !vr_env.meminfo_only;
	uint64_t total = 0, avail = 0;
	enum src s = SRC_NONE;

	/* First: a move while the rest is armed is seen at the next check. */
	if (cg || psi) {
		mon.cg_fd = open_rooted("/proc/self/cgroup", O_RDONLY);
		mon.cg_hash = cgroup_hash(mon.cg_fd);
		if (!mon.cg_hash)
			close_fd(&mon.cg_fd);
		atomic_store(&cg_hash_pub, mon.cg_hash);
	}
	mon.meminfo_fd = open_rooted("/proc/meminfo", O_RDONLY);
	if (mon.meminfo_fd >= 0 && read_meminfo(mon.meminfo_fd, &total, &avail) == 0) {
		mon.mem.limit = total;
		/* System-wide headroom: what the kernel keeps free plus a share. */
		mon.mem.headroom = total / 16 < 64 * MiB ? 64 * MiB
			: total / 16 > 1024 * MiB ? 1024 * MiB : total / 16;
		s = SRC_MEMINFO;
	} else {
		close_fd(&mon.meminfo_fd);
	}
	if (!total)
		total = UINT64_MAX;
	if (cg || psi)
		mon.v2_dir = own_cgroup_dir(NULL, &mon.v2_mnt_len, &mon.v2_is_root);
	if (psi) {
		int fd = psi_arm("/proc/pressure/memory", true);

		if (fd >= 0) {
			mon.psi_fd = fd;
			s = SRC_PSI;
		}
		/* The root cgroup's memory.pressure is the system's: skip it. */
		if (mon.v2_dir && !mon.v2_is_root) {
			char *p = NULL;

			if (asprintf(&p, "%s/memory.pressure", mon.v2_dir) >= 0) {
				fd = psi_arm(p, false);
				if (fd >= 0) {
					mon.psi_cg_fd = fd;
					s = SRC_PSI_CG;
				}
				free(p);
			}
		}
	}
	if (cg) {
		v2_arm(total);
		if (mon.v2.limit)
			s = SRC_V2;
		v1_arm(total);
		if (mon.v1.limit)
			s = SRC_V1;
		else if (mon.v1_level_efd >= 0 && s < SRC_PSI)
			s = SRC_V1_LEVEL;
	}
	atomic_store(&cur_src, s);
}

static void build_pollset(void)
{
	mon.npfd = 0;
	add_pfd(mon.wake_fd, POLLIN, K_WAKE);
	if (mon.psi_fd >= 0)
		add_pfd(mon.psi_fd, POLLPRI, K_PSI);
	if (mon.psi_cg_fd >= 0)
		add_pfd(mon.psi_cg_fd, POLLPRI, K_PSI_CG);
	if (mon.v1_warn_efd >= 0)
		add_pfd(mon.v1_warn_efd, POLLIN, K_V1_WARN);
	if (mon.v1_crit_efd >= 0)
		add_pfd(mon.v1_crit_efd, POLLIN, K_V1_CRIT);
	if (mon.v1_level_efd >= 0)
		add_pfd(mon.v1_level_efd, POLLIN, K_V1_LEVEL);
	if (mon.v2_events_fd >= 0)
		add_pfd(mon.v2_events_fd, POLLPRI, K_V2_EVENTS);
}

static void drain(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) == sizeof(v))
		;
}

static uint64_t v1_usage(void)
{
	uint64_t u = 0;

	if (mon.v1_usage_fd >= 0)
		read_u64_fd(mon.v1_usage_fd, &u);
	return u;
}

static uint64_t v2_usage(void)
{
	uint64_t u = 0;

	if (mon.v2_current_fd >= 0)
		read_u64_fd(mon.v2_current_fd, &u);
	return u;
}

static uint64_t meminfo_usage(void)
{
	uint64_t total, avail;

	if (mon.meminfo_fd < 0 || read_meminfo(mon.meminfo_fd, &total, &avail) < 0)
		return 0;
	return avail < mon.mem.limit ? mon.mem.limit - avail : 0;
}

static void handle_event(enum kind k, int fd, short revents, uint64_t t0_us)
{
	uint64_t u, iv;

	switch (k) {
	case K_WAKE:
		drain(fd);
		enforce_budget();
		break;
	case K_PSI:
	case K_PSI_CG:
		if (revents & POLLERR) {
			/* The trigger's cgroup went away. */
			close_fd(k == K_PSI ? &mon.psi_fd : &mon.psi_cg_fd);
			build_pollset();
			break;
		}
		act(k == K_PSI ? "psi" : "psi-cgroup", 0, 0, 0, t0_us, coord_present());
		break;
	case K_V1_WARN:
	case K_V1_CRIT:
		drain(fd);
		/* Thresholds fire on the way down too: check the level. */
		iv = check_level(&mon.v1, "memcg-v1 threshold", v1_usage, true, t0_us);
		mon.v1.next_ms = now_ms() + iv;
		break;
	case K_V1_LEVEL:
		drain(fd);
		act("memcg-v1 pressure_level", 0, 0, 0, t0_us, coord_present());
		break;
	case K_V2_EVENTS:
		mcg_v2_events_rearm(fd);
		u = v2_usage();
		if (mon.v2.limit && u + mon.v2.headroom > mon.v2.limit) {
			iv = check_level(&mon.v2, "memcg-v2 events", v2_usage, true, t0_us);
			mon.v2.next_ms = now_ms() + iv;
		}
		break;
	}
}

/*
 * /proc/meminfo has no event: it is polled only where no system-wide or
 * cgroup event can tell of pressure (no PSI trigger, no v1 threshold), so
 * that a process idling under armed events never wakes.
 */
static bool meminfo_polled(void)
{
	return mon.meminfo_fd >= 0 && mon.psi_fd < 0 && mon.psi_cg_fd < 0 &&
	       mon.v1_warn_efd < 0;
}

/*
 * The process was moved into another cgroup (a supervisor that forks and
 * then moves its child, systemd-run, a container runtime): every source
 * is armed again for where it is now, and the record says so.
 */
static void monitor_rearm(void)
{
	enum src old = (enum src)atomic_load(&cur_src);

	monitor_close_all();
	monitor_init_fds();
	monitor_open_sources();
	build_pollset();
	mon.v1_recheck_ms = now_ms() + LIMIT_RECHECK_MS;
	vr_debug("moved into another cgroup: source %s, was %s",
		 src_names[atomic_load(&cur_src)], src_names[old]);
	publish_status();
}

/*
 * Follow the process's cgroup: look at /proc/self/cgroup when asked (a
 * first volatile mark after an idle spell, a slow path of the API that saw
 * a change) and every CG_CHECK_MS while volatile memory exists.  With
 * nothing volatile there is nothing to give back, so the monitor stops
 * looking and leaves pressure_want_mark set: the next mark wakes it
 * (pressure_note_mark), and an idle process with nothing volatile never
 * wakes for this.
 */
static void follow_cgroup(uint64_t now)
{
	bool asked = atomic_exchange(&cg_check_req, false);
	uint64_t h;

	if (mon.cg_fd < 0 || !(asked || (mon.cg_active && now >= mon.cg_next_ms)))
		return;
	h = cgroup_hash(mon.cg_fd);
	if (h && h != mon.cg_hash)
		monitor_rearm();
	if (mon.cg_fd < 0)
		return;
	mon.cg_next_ms = now + CG_CHECK_MS;
	if (volatile_bytes_now()) {
		mon.cg_active = true;
		return;
	}
	/* Flag first, then look again: a mark in between is not missed (a
	 * plain mark's count, stored before it reads the flag, is seen after
	 * the fence, or the mark sees the flag). */
	atomic_store(&pressure_want_mark, true);
	if (plain_marks_on())
		plain_fence();
	mon.cg_active = volatile_bytes_now() != 0;
}

/* Wake-up latency: how long the thread just woken waited for a CPU. */
static void sample_latency(void)
{
	char buf[128];
	unsigned long long run, delay;

	if (mon.sched_fd < 0 || pread_all(mon.sched_fd, buf, sizeof(buf)) <= 0 ||
	    sscanf(buf, "%llu %llu", &run, &delay) != 2)
		return;
	if (mon.run_delay_ns && delay >= mon.run_delay_ns)
		decay_max(&mon.lat_us, (delay - mon.run_delay_ns) / 1000);
	mon.run_delay_ns = delay;
}

/*
 * New v1 thresholds for headroom h on the armed cgroup: registered before
 * the old ones go (no moment without), and without malloc (a thread
 * allocating near the limit stalls in the cgroup's reclaim).
 */
static void v1_rethreshold(uint64_t h)
{
	int w, c;

	if (!mon.v1_dir || mon.v1_usage_fd < 0 || mon.v1.limit <= h)
		return;
	w = mcg_v1_threshold(mon.v1_dir, mon.v1_usage_fd, mon.v1.limit - h);
	c = w < 0 ? w : mcg_v1_threshold(mon.v1_dir, mon.v1_usage_fd, mon.v1.limit - h / 4);
	if (w < 0 || c < 0) {
		vr_debug("memcg v1 thresholds for headroom %" PRIu64 " refused: %s", h,
			 strerror(-(c < 0 ? c : w)));
		if (w >= 0)
			close(w);
		return;
	}
	close_fd(&mon.v1_warn_efd);
	close_fd(&mon.v1_crit_efd);
	mon.v1_warn_efd = w;
	mon.v1_crit_efd = c;
	mon.v1.headroom = h;
	build_pollset();
}

/*
 * Keep the v1 headroom sized by what the monitor observes
 * (sized_headroom): its thresholds are armed again when it grew by a
 * quarter or shrank by half (at most every RETUNE_SHRINK_MS), when not
 * under pressure.  The polled levels (v2, meminfo) keep pressure_headroom() and poll
 * earlier by the latency instead (check_level).
 */
static void retune(uint64_t now)
{
	if (mon.v1.limit) {
		uint64_t h = sized_headroom(&mon.v1, mon.v1.limit);
		bool change = h > mon.v1.headroom + mon.v1.headroom / 4 ||
			      (h < mon.v1.headroom / 2 && now - mon.retune_ms >= RETUNE_SHRINK_MS);

		/* Not under pressure - inside the armed headroom, or within
		 * STALE_ACT_MS of a purge for it: arming takes milliseconds of
		 * a loaded CPU, while an allocator near the limit needs the
		 * thread back asleep on the armed thresholds (seen: killed
		 * while re-arming right after a first purge). */
		if (change && now - mon.v1.act_ms >= STALE_ACT_MS &&
		    v1_usage() + mon.v1.headroom < mon.v1.limit) {
			vr_debug("memcg v1 headroom %" PRIu64 " -> %" PRIu64 " (wake-up latency %"
				 PRIu64 " us, overshoot %" PRIu64 ")", mon.v1.headroom, h,
				 mon.lat_us, mon.v1.overshoot);
			mon.retune_ms = now;
			v1_rethreshold(h);
			/* A threshold armed below the usage will not fire until
			 * usage crosses it again: look at the level now. */
			mon.v1.next_ms = now;
		}
	}
}

static void periodic(uint64_t now)
{
	uint64_t iv;

	follow_cgroup(now);
	retune(now);

	if (atomic_load(&budget) && now >= mon.budget_next_ms) {
		enforce_budget();
		mon.budget_next_ms = now + BUDGET_CHECK_MS;
	}
	if (mon.v2.limit && now >= mon.v2.next_ms) {
		iv = check_level(&mon.v2, "memcg-v2 limit", v2_usage, false, now_us());
		mon.v2.next_ms = now_ms() + iv;
	}
	if (mon.v1.limit && now >= mon.v1.next_ms) {
		/* Thresholds fire only on crossings: while inside the headroom
		 * re-check often; otherwise just look for a changed limit. */
		iv = check_level(&mon.v1, "memcg-v1 limit", v1_usage, false, now_us());
		mon.v1.next_ms = now_ms() + (iv < POLL_MAX_MS ? iv : LIMIT_RECHECK_MS);
		if (iv >= POLL_MAX_MS && now >= mon.v1_recheck_ms) {
			uint64_t limit;

			mon.v1_recheck_ms = now + LIMIT_RECHECK_MS;
			if (mon.v1_dir &&
			    read_u64_in(mon.v1_dir, "memory.limit_in_bytes", &limit) == 0 &&
			    limit != mon.v1.limit) {
				vr_debug("memcg v1 limit changed: re-arming");
				v1_disarm();
				v1_arm(mon.mem.limit ? mon.mem.limit : UINT64_MAX);
				build_pollset();
			}
		}
	}
	if (meminfo_polled() && now >= mon.mem.next_ms) {
		iv = check_level(&mon.mem, "meminfo", meminfo_usage, false, now_us());
		/* A modest floor: reading meminfo costs more than a cgroup file. */
		if (iv < 10)
			iv = 10;
		mon.mem.next_ms = now_ms() + iv;
	}
}

static int next_timeout(uint64_t now)
{
	uint64_t next = now + 60000;

	if (atomic_load(&budget) && mon.budget_next_ms < next)
		next = mon.budget_next_ms;
	if (mon.v2.limit && mon.v2.next_ms < next)
		next = mon.v2.next_ms;
	if (mon.v1.limit && mon.v1.next_ms < next)
		next = mon.v1.next_ms;
	if (meminfo_polled() && mon.mem.next_ms < next)
		next = mon.mem.next_ms;
	if (mon.cg_fd >= 0 && mon.cg_active && mon.cg_next_ms < next)
		next = mon.cg_next_ms;
	return next <= now ? 0 : (int)(next - now);
}

/* The poll's timeout with the mark clock's tick (mark_clock.h) due in
 * tick_ms (-1: none). */
static int with_tick(int timeout, int tick_ms)
{
	return tick_ms >= 0 && tick_ms < timeout ? tick_ms : timeout;
}

static void *monitor_main(void *arg)
{
	sigset_t all;
	int probes = 2, tick_ms = -1;

	/* Signals belong to the application's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&mon_busy);
	/* This thread's own scheduling statistics (thread-self: opened here). */
	mon.sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	sample_latency();
	if (arg) {
		/* Started by the library itself: the first call of the
		 * application need not wait for the sources to be found. */
		monitor_open_sources();
		build_pollset();
		vr_debug("monitor started: source %s", src_names[atomic_load(&cur_src)]);
		/* The record (vrangectl list) shows the source found now. */
		publish_status();
	}

	enforce_budget();
	while (!atomic_load(&stop_req)) {
		uint64_t now = now_ms();
		int n, err;

		pthread_mutex_unlock(&mon_busy);
		/* The first two sleeps are 1 ms long: a first sample of the
		 * wake-up latency before an event needs it (with every source
		 * armed meanwhile). */
		n = poll(mon.pfd, (nfds_t)mon.npfd,
			 probes > 0 ? 1 : with_tick(next_timeout(now), tick_ms));
		if (probes > 0)
			probes--;
		err = errno;
		pthread_mutex_lock(&mon_busy);
		sample_latency();

		if (n < 0 && err != EINTR) {
			vr_debug("monitor poll failed: %s", strerror(err));
			break;
		}
		if (n > 0) {
			uint64_t t0 = now_us();

			/* Copy: handlers may rebuild the poll set. */
			struct pollfd pfd[8];
			enum kind kind[8];
			int np = mon.npfd;

			memcpy(pfd, mon.pfd, sizeof(pfd));
			memcpy(kind, mon.kind, sizeof(kind));
			for (int i = 0; i < np && !atomic_load(&stop_req); i++)
				if (pfd[i].revents)
					handle_event(kind[i], pfd[i].fd, pfd[i].revents, t0);
		}
		if (!atomic_load(&stop_req))
			periodic(now_ms());
		tick_ms = vr_tick_step();
	}
	/* Gone for good (stopped, or poll failed): stamps read the clock. */
	vr_tick_attach(NULL);
	close_fd(&mon.sched_fd);
	pthread_mutex_unlock(&mon_busy);
	return NULL;
}

void pressure_fork_prepare(void)
{
	pthread_mutex_lock(&mon_busy);
}

void pressure_fork_done(void)
{
	pthread_mutex_unlock(&mon_busy);
}

/* ------------------------------------------------------------------ */
/* Control */

static int monitor_start(const struct vrange_monitor_opts *opts, bool sync);
static void wake_monitor(void);
static _Atomic int wakers_in_flight; /* wake_monitor() says why */

/*
 * The child of fork() inherits no thread: forget the parent's monitor and
 * close its descriptors (the parent's registrations stay the parent's),
 * then start the child's own with the same options, as a fresh process
 * would have one.  A pre-forked worker or a zygote's child may never call
 * the library again, yet its volatile memory must still go under pressure.
 * Every file's state is shared with the parent now, so the child's purges
 * are as safe as the parent's; the one exception, a foreign file kept
 * process-local (its file system refused the attribute), is a copy the
 * child never purges from (file_state.c, vfile_fork_child).  (A child that
 * execs at once loses the thread with everything else; posix_spawn and
 * vfork run no handler.)
 */
static void atfork_child(void)
{
	struct vrange_monitor_opts o = mon.opts;

	pthread_mutex_init(&mon_lock, NULL);
	atomic_store(&wakers_in_flight, 0); /* threads the child does not have */
	if (!mon_running)
		return;
	mon_running = false;
	atomic_store(&running_pub, false);
	atomic_store(&wake_fd_pub, -1);
	close_fd(&mon.wake_fd);
	close_fd(&mon.sched_fd); /* the parent's thread's */
	monitor_close_all();
	atomic_store(&cur_src, SRC_NONE);
	if (monitor_start(&o, false) < 0)
		vr_debug("no monitor in the forked child");
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}

/*
 * Start the thread.  sync: find the sources before returning (an explicit
 * vrange_monitor_start, whose caller may read pressure_source at once);
 * otherwise the thread finds them itself (autostart).
 */
static int monitor_start(const struct vrange_monitor_opts *opts, bool sync)
{
	struct vrange_monitor_opts o = { 0 };
	sigset_t all, old;
	int r;

	if (opts) {
		if (opts->struct_size < OPTS_SIZE_V1 || (opts->flags & ~KNOWN_FLAGS))
			return -EINVAL;
		memcpy(&o, opts, OPTS_SIZE_V1);
	}
	o.struct_size = sizeof(o);
	if (!o.psi_stall_us)
		o.psi_stall_us = 100000;
	if (!o.psi_window_us)
		o.psi_window_us = 1000000;
	if (!o.purge_percent)
		o.purge_percent = 25;
	if (o.purge_percent > 100)
		o.purge_percent = 100;

	vr_init_basic();
	pthread_once(&atfork_once, register_atfork);
	pthread_mutex_lock(&mon_lock);
	if (mon_running) {
		r = -EALREADY;
		goto out;
	}
	monitor_init_fds();
	mon.opts = o;
	mon.sched_fd = -1;
	mon.run_delay_ns = mon.lat_us = mon.retune_ms = 0;
	mon.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (mon.wake_fd < 0) {
		r = -errno;
		goto out;
	}
	atomic_store(&stop_req, false);
	if (sync)
		monitor_open_sources();
	build_pollset();
	mon.budget_next_ms = mon.v1.next_ms = mon.v2.next_ms = mon.mem.next_ms = 0;
	mon.v1_recheck_ms = now_ms() + LIMIT_RECHECK_MS;

	/* The thread inherits a full signal mask from its first instruction. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&mon_thread, NULL, monitor_main, sync ? NULL : &mon);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		monitor_close_all();
		close_fd(&mon.wake_fd);
		atomic_store(&cur_src, SRC_NONE);
		goto out;
	}
	mon_running = true;
	atomic_store(&running_pub, true);
	atomic_store(&wake_fd_pub, mon.wake_fd);
	/* The thread ticks the mark clock while marks are made. */
	vr_tick_attach(wake_monitor);
	if (sync)
		vr_debug("monitor started: source %s", src_names[atomic_load(&cur_src)]);
out:
	pthread_mutex_unlock(&mon_lock);
	publish_status();
	return r;
}

int vrange_monitor_start(const struct vrange_monitor_opts *opts)
{
	return monitor_start(opts, true);
}

int vrange_monitor_stop(void)
{
	uint64_t one = 1;

	pthread_mutex_lock(&mon_lock);
	if (mon_running) {
		vr_tick_attach(NULL);
		atomic_store(&stop_req, true);
		atomic_store(&wake_fd_pub, -1);
		if (write(mon.wake_fd, &one, sizeof(one)) < 0)
			vr_debug("waking the monitor failed: %s", strerror(errno));
		pthread_join(mon_thread, NULL);
		while (atomic_load(&wakers_in_flight))
			sched_yield();
		close_fd(&mon.wake_fd);
		monitor_close_all();
		atomic_store(&cur_src, SRC_NONE);
		mon_running = false;
		atomic_store(&running_pub, false);
	}
	pthread_mutex_unlock(&mon_lock);
	publish_status();
	return 0;
}

/* At exit (and dlclose) the thread must not outlive the library's code. */
__attribute__((destructor)) static void pressure_fini(void)
{
	vrange_monitor_stop();
}

void pressure_autostart(void)
{
	int r = monitor_start(NULL, false);

	if (r < 0 && r != -EALREADY)
		vr_debug("monitor not started: %s", strerror(-r));
}

/*
 * Wake the monitor's thread (async-signal-safe).  The eventfd's number is
 * loaded and then written to; a stop in between closes it, and the number
 * could name another file by the write.  So a waker counts itself in
 * flight around the two, and a stop, which unpublishes the number first,
 * closes it only once no waker is in flight (both sequentially consistent:
 * a waker that loaded the number is seen by the stop's count).
 */
static void wake_monitor(void)
{
	uint64_t one = 1;
	int fd;

	atomic_fetch_add(&wakers_in_flight, 1);
	fd = atomic_load(&wake_fd_pub);
	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0)
		vr_debug("waking the monitor failed: %s", strerror(errno));
	atomic_fetch_sub(&wakers_in_flight, 1);
}

void pressure_set_budget(size_t bytes)
{
	atomic_store(&budget, bytes);
	wake_monitor();
}

void pressure_mark_seen(void)
{
	if (atomic_exchange(&pressure_want_mark, false)) {
		atomic_store(&cg_check_req, true);
		wake_monitor();
	}
}

void pressure_check_cgroup(void)
{
	static _Atomic uint64_t last_ms;
	uint64_t known = atomic_load(&cg_hash_pub), now, h;
	struct timespec ts;
	int fd;

	if (!known)
		return;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	if (now - atomic_load(&last_ms) < CG_CALLER_MS)
		return;
	atomic_store(&last_ms, now);
	fd = open_rooted("/proc/self/cgroup", O_RDONLY);
	h = cgroup_hash(fd);
	if (fd >= 0)
		close(fd);
	if (h && h != known) {
		atomic_store(&cg_check_req, true);
		wake_monitor();
	}
}

bool pressure_running(void)
{
	return atomic_load(&running_pub);
}

void pressure_fill_stats(struct vrange_stats *out)
{
	int s = atomic_load(&cur_src);

	snprintf(out->pressure_source, sizeof(out->pressure_source), "%s",
		 src_names[s >= 0 && s <= SRC_V1 ? s : SRC_NONE]);
}

int vrange_set_budget(size_t bytes)
{
	vr_init_basic();
	pressure_set_budget(bytes);
	return 0;
}
