/* SPDX-License-Identifier: MIT */
/*
 * bench_pcache - SQLite on the libvrange page cache against SQLite's own,
 * in one run.
 *
 * A mixed read/write workload in the style of SQLite's speedtest1 (bulk
 * inserts in transactions, point lookups by primary key, index range
 * scans, updates, deletes, an aggregate over the table) on a fresh
 * database file with the default cache_size.  The page cache is a
 * process-wide setting, so each measurement runs in a forked child: default,
 * libvrange, default, libvrange, ... (VRANGE_BENCH_REPS pairs, default 3);
 * the best time of each is compared (wall and CPU time; on a shared machine
 * the CPU time is the steadier).  Printed: time with libvrange / time
 * with the default cache, and the mark pairs (mark_nonvolatile +
 * mark_volatile) per query and per page fetch behind the difference.
 * Nothing here asserts on time.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#include <vrange.h>

#include "vrange-sqlite.h"

struct result {
	double secs, cpu;
	uint64_t queries, fetches, unmarks, marks, rereads;
	int ok;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of this process: steadier than wall time on a shared machine. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Run a prepared statement once with up to two integer parameters. */
static int run(sqlite3_stmt *st, int64_t a, int64_t b, uint64_t *queries)
{
	int rc;

	sqlite3_bind_int64(st, 1, a);
	if (sqlite3_bind_parameter_count(st) > 1)
		sqlite3_bind_int64(st, 2, b);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	sqlite3_reset(st);
	(*queries)++;
	return rc == SQLITE_DONE ? 0 : -1;
}

static int workload(sqlite3 *db, int rows, uint64_t *queries)
{
	sqlite3_stmt *ins = NULL, *get = NULL, *range = NULL, *upd = NULL, *del = NULL;
	int bad = 0;

	bad |= sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;"
			    "CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c INTEGER);"
			    "CREATE INDEX t_a ON t(a);", NULL, NULL, NULL);
	bad |= sqlite3_prepare_v2(db, "INSERT INTO t(a, b, c) VALUES (?1, printf('%0100d', ?2), ?2)",
				  -1, &ins, NULL);
	bad |= sqlite3_prepare_v2(db, "SELECT b, c FROM t WHERE id = ?1", -1, &get, NULL);
	bad |= sqlite3_prepare_v2(db, "SELECT count(*), sum(c) FROM t WHERE a BETWEEN ?1 AND ?2",
				  -1, &range, NULL);
	bad |= sqlite3_prepare_v2(db, "UPDATE t SET c = c + 1, a = ?2 WHERE id = ?1", -1, &upd, NULL);
	bad |= sqlite3_prepare_v2(db, "DELETE FROM t WHERE id = ?1", -1, &del, NULL);
	if (bad)
		goto out;
	for (int done = 0; done < rows && !bad; done += 5000) {
		bad |= sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
		for (int i = 0; i < 5000 && !bad; i++)
			bad |= run(ins, (int64_t)(rnd() % 1000000), (int64_t)(rnd() % 1000000), queries);
		bad |= sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	}
	for (int i = 0; i < rows * 2 && !bad; i++)
		bad |= run(get, (int64_t)(1 + rnd() % (uint64_t)rows), 0, queries);
	for (int i = 0; i < rows / 10 && !bad; i++) {
		int64_t lo = (int64_t)(rnd() % 1000000);

		bad |= run(range, lo, lo + 2000, queries);
	}
	for (int k = 0; k < 10 && !bad; k++) {
		bad |= sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
		for (int i = 0; i < rows / 20 && !bad; i++)
			bad |= run(upd, (int64_t)(1 + rnd() % (uint64_t)rows),
				   (int64_t)(rnd() % 1000000), queries);
		bad |= sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	}
	bad |= sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	for (int i = 0; i < rows / 10 && !bad; i++)
		bad |= run(del, (int64_t)(1 + rnd() % (uint64_t)rows), 0, queries);
	bad |= sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	for (int i = 0; i < rows && !bad; i++)
		bad |= run(get, (int64_t)(1 + rnd() % (uint64_t)rows), 0, queries);
	bad |= sqlite3_exec(db, "SELECT sum(length(b)), max(a) FROM t", NULL, NULL, NULL);
	(*queries)++;
out:
	sqlite3_finalize(ins);
	sqlite3_finalize(get);
	sqlite3_finalize(range);
	sqlite3_finalize(upd);
	sqlite3_finalize(del);
	return bad ? -1 : 0;
}

static void child(bool vr, const char *path, int rows, struct result *res)
{
	struct vrange_sqlite_stats ps = { 0 };
	sqlite3 *db = NULL;
	double t0, c0;

	if (vr && vrange_sqlite_pcache_install() != SQLITE_OK)
		_exit(1);
	unlink(path);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		_exit(1);
	t0 = now_s();
	c0 = cpu_s();
	res->ok = workload(db, rows, &res->queries) == 0;
	sqlite3_close(db);
	res->secs = now_s() - t0;
	res->cpu = cpu_s() - c0;
	vrange_sqlite_pcache_stats(&ps);
	res->fetches = ps.fetches;
	res->unmarks = ps.unmarks;
	res->marks = ps.marks;
	res->rereads = ps.rereads;
	_exit(0);
}

static int measure(bool vr, const char *path, int rows, struct result *out)
{
	struct result *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int status;
	pid_t pid;

	if (res == MAP_FAILED)
		return -1;
	memset(res, 0, sizeof(*res));
	pid = fork();
	if (pid == 0)
		child(vr, path, rows, res);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0 || !res->ok) {
		munmap(res, sizeof(*res));
		return -1;
	}
	*out = *res;
	munmap(res, sizeof(*res));
	return 0;
}

int main(void)
{
	const char *e = getenv("VRANGE_BENCH_REPS"), *er = getenv("VRANGE_BENCH_ROWS");
	int reps = e ? atoi(e) : 3, rows = er ? atoi(er) : 20000;
	char path[] = "/var/tmp/vrange-bench-sqlite-XXXXXX";
	struct result best[2], r;
	double best_cpu[2] = { 0, 0 };
	char wal[sizeof(path) + 8], shm[sizeof(path) + 8];
	int fd = mkstemp(path);

	memset(best, 0, sizeof(best));

	if (fd < 0) {
		perror("mkstemp");
		return 1;
	}
	close(fd);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	snprintf(shm, sizeof(shm), "%s-shm", path);
	printf("SQLite %s, %d rows, mixed workload, default cache_size; best of %d runs each\n",
	       sqlite3_libversion(), rows, reps);
	for (int i = 0; i < reps; i++) {
		for (int k = 0; k < 2; k++) {
			if (measure(k == 1, path, rows, &r) < 0) {
				fprintf(stderr, "workload failed\n");
				return 1;
			}
			if (!best[k].secs || r.secs < best[k].secs)
				best[k] = r;
			if (!best_cpu[k] || r.cpu < best_cpu[k])
				best_cpu[k] = r.cpu;
		}
	}
	unlink(path);
	unlink(wal);
	unlink(shm);
	printf("default page cache:   %.3f s (CPU %.3f s), %" PRIu64 " queries\n", best[0].secs,
	       best_cpu[0], best[0].queries);
	printf("libvrange page cache: %.3f s (CPU %.3f s), %" PRIu64 " queries, %" PRIu64 " page fetches, "
	       "%" PRIu64 " marks + %" PRIu64 " unmarks, %" PRIu64 " re-reads\n", best[1].secs, best_cpu[1],
	       best[1].queries, best[1].fetches, best[1].marks, best[1].unmarks, best[1].rereads);
	printf("ratio libvrange / default: %.3fx wall, %.3fx CPU (target <= 1.10x)\n",
	       best[1].secs / best[0].secs, best_cpu[1] / best_cpu[0]);
	printf("mark pairs per query: %.2f; per page fetch: %.2f; extra CPU time per pair: %.0f ns\n",
	       (double)best[1].unmarks / (double)best[1].queries,
	       (double)best[1].unmarks / (double)best[1].fetches,
	       (best_cpu[1] - best_cpu[0]) * 1e9 / (double)(best[1].unmarks ? best[1].unmarks : 1));
	return 0;
}
