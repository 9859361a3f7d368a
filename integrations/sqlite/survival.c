/* SPDX-License-Identifier: MIT */
/*
 * sqlite-survival - a big SQLite cache in a small memory cgroup.
 *
 * A database larger than a memory cgroup's limit (384 MiB against 256 MiB
 * by default) is scanned from a cold start by a process in that cgroup
 * whose PRAGMA cache_size (1 GiB) is larger than the limit: every page read
 * stays cached.  On SQLite's default page cache the cache outgrows the
 * limit and the kernel's OOM killer ends the process; on the libvrange page
 * cache the pages SQLite has unpinned are volatile, the library's monitor
 * gives them back as usage nears the limit, and the scan completes.  Both
 * runs are shown side by side: rows read, pages purged, peak memory.
 *
 *   sqlite-survival                  both runs, side by side
 *   sqlite-survival --vrange|--plain one run
 *   --warm  leave the file in the page cache (charged outside the cgroup):
 *           the scan then fills memory at memory speed, not disk speed
 *   options: --limit MiB --db MiB --cache MiB --dir DIR (default /var/tmp)
 *
 * Needs root and a memory cgroup (v1 memory controller, or cgroup v2);
 * exits 77 when none can be created, 1 when the libvrange run did not
 * survive.  The cgroup code follows examples/survival.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

#include <sqlite3.h>
#include <vrange.h>

#include "demo_cgroup.h"

#include "vrange-sqlite.h"

#define MiB ((uint64_t)1 << 20)
#define ROW_BYTES 1000

struct report {                 /* written by the child, read by the parent */
	volatile uint64_t rows;
	volatile uint64_t purged, rereads, pressure_events;
	volatile int done;
	char source[32];
};

struct outcome {
	bool survived;
	int signal;
	uint64_t rows, purged, rereads, events, peak;
	double secs;
	char source[32];
};

static uint64_t read_num(const char *dir, const char *file)
{
	char path[4096];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "re");
	if (f) {
		if (fscanf(f, "%llu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The database: rows of ROW_BYTES until it holds db_bytes, on disk. */
static int make_db(const char *path, uint64_t db_bytes, bool warm)
{
	sqlite3 *db = NULL;
	char sql[256];
	int fd, rc;

	unlink(path);
	rc = sqlite3_open(path, &db);
	snprintf(sql, sizeof(sql),
		 "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
		 "CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB);"
		 "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
		 "WHERE i < %llu) INSERT INTO t SELECT i, zeroblob(%d) FROM n;",
		 (unsigned long long)(db_bytes / (ROW_BYTES + 40)), ROW_BYTES);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		fprintf(stderr, "creating %s: %s\n", path, sqlite3_errmsg(db));
	sqlite3_close(db);
	/* A cold start: the scan reads the file, charged to its own cgroup.
	 * Warm (--warm): the file stays in the page cache, charged to our
	 * cgroup, and the scan fills its cache at memory speed. */
	fd = warm ? -1 : open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return rc == SQLITE_OK ? 0 : -1;
}

/* The child, already in the cgroup: scan everything with a huge cache. */
static int scan(bool vr, const char *path, uint64_t cache, struct report *rep)
{
	struct vrange_sqlite_stats ps;
	struct vrange_stats vs;
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	char sql[128];
	int rc;

	if (vr) {
		/* The parent's make_db initialised SQLite: the page cache can
		 * only be changed while it is shut down. */
		sqlite3_shutdown();
		if (vrange_sqlite_pcache_install() != SQLITE_OK)
			return 2;
		/* Started here, the monitor sees the cgroup this process is in. */
		rc = vrange_monitor_start(NULL);
		if (rc < 0 && rc != -EALREADY)
			return 2;
		vrange_get_stats(&vs);
		memcpy(rep->source, vs.pressure_source, sizeof(rep->source));
	}
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		return 2;
	snprintf(sql, sizeof(sql), "PRAGMA mmap_size = 0; PRAGMA cache_size = -%llu",
		 (unsigned long long)(cache / 1024));
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "SELECT id, length(payload) FROM t", -1, &st, NULL) != SQLITE_OK)
		return 2;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		/* Now and then what the monitor did so far, so that a run the
		 * kernel kills still says whether it acted. */
		if (++rep->rows % 2048 == 0 && vr && vrange_get_stats(&vs) == 0) {
			rep->purged = vs.purged_total;
			rep->pressure_events = vs.pressure_events;
		}
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return 3;
	if (vr) {
		vrange_get_stats(&vs);
		vrange_sqlite_pcache_stats(&ps);
		rep->purged = vs.purged_total;
		rep->rereads = ps.rereads;
		rep->pressure_events = vs.pressure_events;
	}
	rep->done = 1;
	sqlite3_close(db);
	return 0;
}

static int run_one(bool vr, const char *path, uint64_t limit, uint64_t cache,
		   struct outcome *out, char *why, size_t wn)
{
	char dir[2048];
	struct report *rep;
	int status;
	bool v2 = false;
	double t0;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	why[0] = '\0';
	if (demo_cgroup_make(limit, "vrange-sqlite", dir, sizeof(dir), &v2, why, wn) < 0)
		return -1;
	rep = mmap(NULL, sizeof(*rep), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rep == MAP_FAILED) {
		snprintf(why, wn, "mmap: %s", strerror(errno));
		demo_cgroup_remove(dir);
		return -1;
	}
	memset(rep, 0, sizeof(*rep));
	t0 = now_s();
	pid = fork();
	if (pid == 0) {
		/* Into the cgroup first: the library is used only in there. */
		if (demo_cgroup_enter(dir) < 0)
			_exit(4);
		_exit(scan(vr, path, cache, rep));
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		snprintf(why, wn, "fork/wait: %s", strerror(errno));
		munmap(rep, sizeof(*rep));
		demo_cgroup_remove(dir);
		return -1;
	}
	out->secs = now_s() - t0;
	out->survived = WIFEXITED(status) && WEXITSTATUS(status) == 0 && rep->done;
	out->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	out->rows = rep->rows;
	out->purged = rep->purged;
	out->rereads = rep->rereads;
	out->events = rep->pressure_events;
	out->peak = read_num(dir, v2 ? "memory.peak" : "memory.max_usage_in_bytes");
	memcpy(out->source, rep->source, sizeof(out->source));
	out->source[sizeof(out->source) - 1] = '\0';
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		snprintf(why, wn, "scan failed with exit status %d", WEXITSTATUS(status));
	munmap(rep, sizeof(*rep));
	demo_cgroup_remove(dir);
	return 0;
}

static void cell(const struct outcome *o, int row, char *b, size_t n)
{
	switch (row) {
	case 0:
		if (o->survived)
			snprintf(b, n, "completed in %.1f s", o->secs);
		else if (o->signal)
			snprintf(b, n, "killed (%s)", strsignal(o->signal));
		else
			snprintf(b, n, "failed");
		break;
	case 1:
		snprintf(b, n, "%" PRIu64, o->rows);
		break;
	case 2:
		snprintf(b, n, "%" PRIu64 " (%" PRIu64 " MiB)", o->purged / 4096, o->purged / MiB);
		break;
	case 3:
		snprintf(b, n, "%" PRIu64 " MiB", o->peak / MiB);
		break;
	}
}

int main(int argc, char **argv)
{
	uint64_t limit = 256 * MiB, dbsize = 384 * MiB, cache = 1024 * MiB;
	const char *dirname = "/var/tmp";
	int which = 0; /* 0 both, 1 vrange, 2 plain */
	bool warm = false;
	struct outcome o[2];
	char why[512], path[4096], a[64], b[64];
	static const char *const rows[] = { "outcome", "rows read", "pages purged",
					    "peak memory (cgroup)" };
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--vrange"))
			which = 1;
		else if (!strcmp(argv[i], "--plain"))
			which = 2;
		else if (!strcmp(argv[i], "--warm"))
			warm = true;
		else if (i + 1 < argc && !strcmp(argv[i], "--limit"))
			limit = strtoull(argv[++i], NULL, 10) * MiB;
		else if (i + 1 < argc && !strcmp(argv[i], "--db"))
			dbsize = strtoull(argv[++i], NULL, 10) * MiB;
		else if (i + 1 < argc && !strcmp(argv[i], "--cache"))
			cache = strtoull(argv[++i], NULL, 10) * MiB;
		else if (i + 1 < argc && !strcmp(argv[i], "--dir"))
			dirname = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--vrange|--plain] [--warm] [--limit MiB] [--db MiB] "
				"[--cache MiB] [--dir DIR]\n", argv[0]);
			return 2;
		}
	}
	/* Can a cgroup be made here at all?  Ask before building the file. */
	{
		char d[2048];
		bool v2;

		why[0] = '\0';
		if (demo_cgroup_make(limit, "vrange-sqlite", d, sizeof(d), &v2, why, sizeof(why)) < 0) {
			printf("cannot run: %s\n", why);
			return 77;
		}
		demo_cgroup_remove(d);
	}
	snprintf(path, sizeof(path), "%s/vrange-sqlite-survival-%d.db", dirname, (int)getpid());
	printf("memory cgroup limit %llu MiB; a %llu MiB database scanned %s with "
	       "PRAGMA cache_size of %llu MiB\n", (unsigned long long)(limit / MiB),
	       (unsigned long long)(dbsize / MiB), warm ? "warm" : "cold",
	       (unsigned long long)(cache / MiB));
	if (make_db(path, dbsize, warm) < 0) {
		unlink(path);
		return 1;
	}
	for (int k = 0; k < 2; k++) {
		if (which && which != k + 1)
			continue;
		if (run_one(k == 0, path, limit, cache, &o[k], why, sizeof(why)) < 0) {
			printf("cannot run: %s\n", why);
			rc = 77;
			goto out;
		}
		if (why[0])
			printf("%s run: %s\n", k == 0 ? "libvrange" : "default", why);
	}
	printf("%-22s | %-32s | %s\n", "", "libvrange page cache", "SQLite's default page cache");
	for (int row = 0; row < 4; row++) {
		a[0] = b[0] = '\0';
		if (which != 2)
			cell(&o[0], row, a, sizeof(a));
		if (which != 1)
			cell(&o[1], row, b, sizeof(b));
		if (row == 2)
			snprintf(b, sizeof(b), "-");
		printf("%-22s | %-32s | %s\n", rows[row], a, b);
	}
	if (which != 2)
		printf("(libvrange: monitor source %s, %" PRIu64 " pressure events, %" PRIu64
		       " pages re-read after a purge)\n", o[0].source, o[0].events, o[0].rereads);
	rc = which != 2 && !o[0].survived;
out:
	unlink(path);
	return rc;
}
