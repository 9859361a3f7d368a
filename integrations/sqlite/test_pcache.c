/* SPDX-License-Identifier: MIT */
/*
 * test_pcache - SQLite on the libvrange page cache gives the same answers
 * as on SQLite's own cache while another thread purges at random.
 *
 * A seeded workload (inserts, updates, deletes, index range scans,
 * aggregates, transactions rolled back, an attached in-memory database,
 * attached databases with 1 KiB and 8 KiB pages, VACUUM, auto_vacuum page
 * moves, sqlite3_db_release_memory) runs twice on
 * fresh database files: first in a forked child on SQLite's default page
 * cache, which records a hash of every query's result in shared memory;
 * then here, on the libvrange cache, by two connections on two threads at
 * once (each on its own files), with a small cache_size (so pages are
 * unpinned and fetched again all the time) and a thread calling
 * vrange_purge() with random sizes at random moments.  Every query's hash
 * must equal the reference's, PRAGMA integrity_check must be "ok" after
 * every phase, and purges must really have hit cached pages (re-reads > 0),
 * else the test proved nothing.
 *
 * Exit 0 pass, 1 fail, 77 skip.  VRANGE_TEST_QUICK=1 runs 2 rounds instead of 3;
 * VRANGE_SQLITE_ROUNDS=N sets them.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#define MAX_RESULTS (1u << 20)

struct shared {                 /* the reference run's results */
	uint64_t n;
	uint64_t hash[MAX_RESULTS];
};

struct run {
	sqlite3 *db;
	uint64_t rng;
	struct shared *ref;     /* reference: record; else compare */
	bool record;
	uint64_t nq, checks;
	int failed;
	char attach_small[4200], attach_big[4200];
	int rounds;
};

static uint64_t rnd(struct run *r)
{
	/* xorshift64*: the same sequence in both runs. */
	r->rng ^= r->rng >> 12;
	r->rng ^= r->rng << 25;
	r->rng ^= r->rng >> 27;
	return r->rng * 2685821657736338717ull;
}

static void fail(struct run *r, const char *what, const char *detail)
{
	if (!r->failed)
		fprintf(stderr, "FAIL (%s run, query %" PRIu64 "): %s: %s\n",
			r->record ? "reference" : "vrange", r->nq, what, detail);
	r->failed = 1;
}

static void exec(struct run *r, const char *sql)
{
	char *err = NULL;

	if (r->failed)
		return;
	if (sqlite3_exec(r->db, sql, NULL, NULL, &err) != SQLITE_OK)
		fail(r, sql, err ? err : "?");
	sqlite3_free(err);
}

/* Run a query; hash every column of every row; record or compare. */
static void query(struct run *r, const char *sql)
{
	sqlite3_stmt *st = NULL;
	uint64_t h = 1469598103934665603ull;
	int rc;

	if (r->failed)
		return;
	if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) {
		fail(r, sql, sqlite3_errmsg(r->db));
		return;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (int i = 0; i < sqlite3_column_count(st); i++) {
			const unsigned char *t = sqlite3_column_text(st, i);
			int n = sqlite3_column_bytes(st, i);

			for (int k = 0; t && k < n; k++)
				h = (h ^ t[k]) * 1099511628211ull;
			h = (h ^ 0xff) * 1099511628211ull;
		}
		h = (h ^ 0xfe) * 1099511628211ull;
	}
	if (rc != SQLITE_DONE)
		fail(r, sql, sqlite3_errmsg(r->db));
	sqlite3_finalize(st);
	if (r->failed)
		return;
	if (r->record) {
		if (r->ref->n < MAX_RESULTS)
			r->ref->hash[r->ref->n++] = h;
	} else if (r->nq >= r->ref->n || r->ref->hash[r->nq] != h) {
		fail(r, sql, "result differs from SQLite's default page cache");
	}
	r->nq++;
}

static void integrity(struct run *r)
{
	sqlite3_stmt *st = NULL;

	if (r->failed)
		return;
	if (sqlite3_prepare_v2(r->db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW ||
	    strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
		fail(r, "PRAGMA integrity_check",
		     st && sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0)
						      : sqlite3_errmsg(r->db));
	else
		r->checks++;
	sqlite3_finalize(st);
}

static void fmt(char *buf, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t n, const char *f, ...)
{
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, n, f, ap);
	va_end(ap);
}

static void phase_insert(struct run *r, int rows)
{
	char sql[512];

	exec(r, "BEGIN");
	for (int i = 0; i < rows; i++) {
		uint64_t k = rnd(r) % 100000;

		fmt(sql, sizeof(sql), "INSERT INTO t(k, v, pad) VALUES (%" PRIu64
		    ", 'v%" PRIu64 "', zeroblob(%d))", k, rnd(r) % 1000000,
		    (int)(rnd(r) % 600));
		exec(r, sql);
	}
	exec(r, "COMMIT");
}

static void phase_update(struct run *r, int n)
{
	char sql[256];

	exec(r, "BEGIN");
	for (int i = 0; i < n; i++) {
		uint64_t lo = rnd(r) % 100000;

		fmt(sql, sizeof(sql), "UPDATE t SET v = v || 'u', k = k + 1 WHERE k BETWEEN %"
		    PRIu64 " AND %" PRIu64, lo, lo + 200);
		exec(r, sql);
	}
	exec(r, "COMMIT");
}

static void phase_delete(struct run *r, int n)
{
	char sql[256];

	for (int i = 0; i < n; i++) {
		uint64_t lo = rnd(r) % 100000;

		fmt(sql, sizeof(sql), "DELETE FROM t WHERE k BETWEEN %" PRIu64 " AND %" PRIu64,
		    lo, lo + 100);
		exec(r, sql);
	}
}

static void phase_scan(struct run *r, int n)
{
	char sql[256];

	query(r, "SELECT count(*), sum(k), total(length(v)), total(length(pad)) FROM t");
	for (int i = 0; i < n; i++) {
		uint64_t lo = rnd(r) % 100000;

		fmt(sql, sizeof(sql), "SELECT id, k, v FROM t WHERE k BETWEEN %" PRIu64
		    " AND %" PRIu64 " ORDER BY k, id", lo, lo + 500);
		query(r, sql);
		fmt(sql, sizeof(sql), "SELECT id, k FROM t WHERE id > %" PRIu64
		    " ORDER BY id LIMIT 50", rnd(r) % 20000);
		query(r, sql);
	}
	query(r, "SELECT k % 97, count(*), max(v) FROM t GROUP BY 1 ORDER BY 1");
}

static void phase_rollback(struct run *r)
{
	exec(r, "BEGIN");
	exec(r, "INSERT INTO t(k, v, pad) SELECT k + 7, v || 'r', pad FROM t WHERE id % 3 = 0");
	exec(r, "UPDATE t SET v = 'gone' WHERE id % 5 = 0");
	exec(r, "DELETE FROM t WHERE id % 7 = 0");
	query(r, "SELECT count(*), sum(k) FROM t");
	exec(r, "ROLLBACK");
	query(r, "SELECT count(*), sum(k), total(length(v)) FROM t");
}

static void phase_memdb(struct run *r)
{
	/* An in-memory database: a non-purgeable cache, never volatile. */
	exec(r, "DROP TABLE IF EXISTS mem.c");
	exec(r, "CREATE TABLE mem.c(id INTEGER PRIMARY KEY, k, v)");
	exec(r, "INSERT INTO mem.c SELECT id, k, v FROM t WHERE id % 2 = 0");
	query(r, "SELECT count(*), sum(k), max(v) FROM mem.c");
	query(r, "SELECT c.id, t.k FROM mem.c c JOIN t ON t.id = c.id WHERE c.id % 101 = 0 ORDER BY c.id");
}

/* Databases with pages smaller (1 KiB: a system page per slot) and larger
 * (8 KiB: two per slot) than the system page. */
static void phase_page_sizes(struct run *r)
{
	exec(r, "INSERT INTO small.s(k, v) SELECT k, v FROM t WHERE id % 4 = 1");
	exec(r, "INSERT INTO big.b(k, v, pad) SELECT k, v, pad FROM t WHERE id % 4 = 2");
	exec(r, "DELETE FROM small.s WHERE k % 5 = 0");
	exec(r, "UPDATE big.b SET v = v || 'b' WHERE k % 3 = 0");
	query(r, "SELECT count(*), sum(k), max(v) FROM small.s");
	query(r, "SELECT k, v FROM small.s WHERE k BETWEEN 1000 AND 3000 ORDER BY k, id");
	query(r, "SELECT count(*), sum(k), total(length(pad)) FROM big.b");
	query(r, "SELECT k, v FROM big.b WHERE k BETWEEN 50000 AND 52000 ORDER BY k, id");
}

static void workload(struct run *r, int rounds, void (*between)(struct run *))
{
	exec(r, "PRAGMA auto_vacuum = FULL");
	exec(r, "PRAGMA cache_size = 64");
	exec(r, "PRAGMA journal_mode = DELETE");
	/* Durability is not under test: no fsync keeps the run short. */
	exec(r, "PRAGMA synchronous = OFF");
	exec(r, "ATTACH ':memory:' AS mem");
	exec(r, r->attach_small);
	exec(r, r->attach_big);
	exec(r, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT, pad BLOB)");
	exec(r, "CREATE INDEX t_k ON t(k)");
	exec(r, "CREATE INDEX t_v ON t(v)");
	exec(r, "PRAGMA small.page_size = 1024");
	exec(r, "PRAGMA small.cache_size = 64");
	exec(r, "PRAGMA small.synchronous = OFF");
	exec(r, "CREATE TABLE small.s(id INTEGER PRIMARY KEY, k INTEGER, v TEXT)");
	exec(r, "CREATE INDEX small.s_k ON s(k)");
	exec(r, "PRAGMA big.page_size = 8192");
	exec(r, "PRAGMA big.cache_size = 32");
	exec(r, "PRAGMA big.synchronous = OFF");
	exec(r, "CREATE TABLE big.b(id INTEGER PRIMARY KEY, k INTEGER, v TEXT, pad BLOB)");
	exec(r, "CREATE INDEX big.b_k ON b(k)");
	for (int i = 0; i < rounds && !r->failed; i++) {
		phase_insert(r, 1500);
		integrity(r);
		phase_scan(r, 20);
		phase_update(r, 30);
		integrity(r);
		phase_scan(r, 10);
		phase_rollback(r);
		integrity(r);
		phase_delete(r, 20);     /* auto_vacuum moves pages: xRekey, xTruncate */
		integrity(r);
		phase_memdb(r);
		phase_page_sizes(r);
		integrity(r);
		phase_scan(r, 10);
		if (i % 3 == 2) {
			exec(r, "VACUUM");
			integrity(r);
		}
		if (between)
			between(r);
	}
}

static void release_memory(struct run *r)
{
	/* Reaches xShrink on every cache of the connection. */
	sqlite3_db_release_memory(r->db);
}

/* ------------------------------------------------------------------ */

static _Atomic bool purger_stop;
static uint64_t purges, purged_bytes;

static void *purger(void *arg)
{
	uint64_t seed = (uintptr_t)arg | 1;

	while (!atomic_load(&purger_stop)) {
		struct timespec ts = { 0, 0 };
		size_t want;
		ssize_t got;

		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		ts.tv_nsec = (long)(seed % 2000) * 1000;  /* 0-2 ms */
		nanosleep(&ts, NULL);
		want = seed % 8 == 0 ? SIZE_MAX : (size_t)(1 + (seed >> 8) % 64) * 4096;
		got = vrange_purge(want);
		if (got < 0) {
			fprintf(stderr, "vrange_purge: %s\n", strerror((int)-got));
			continue;
		}
		purges++;
		purged_bytes += (uint64_t)got;
	}
	return NULL;
}

static void *second(void *arg)
{
	struct run *r = arg;

	workload(r, r->rounds, release_memory);
	return NULL;
}

static int open_db(const char *dir, const char *name, struct run *r)
{
	sqlite3 **db = &r->db;
	char path[4096];

	fmt(path, sizeof(path), "%s/%s-small", dir, name);
	unlink(path);
	fmt(r->attach_small, sizeof(r->attach_small), "ATTACH '%s' AS small", path);
	fmt(path, sizeof(path), "%s/%s-big", dir, name);
	unlink(path);
	fmt(r->attach_big, sizeof(r->attach_big), "ATTACH '%s' AS big", path);
	fmt(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	if (sqlite3_open(path, db) != SQLITE_OK) {
		fprintf(stderr, "open %s: %s\n", path, sqlite3_errmsg(*db));
		return -1;
	}
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/vrange-sqlite-test-XXXXXX";
	const char *q = getenv("VRANGE_TEST_QUICK"), *nr = getenv("VRANGE_SQLITE_ROUNDS");
	int rounds = nr ? atoi(nr) : q && *q == '1' ? 2 : 3;
	struct shared *ref;
	struct run r = { 0 }, r2[2];
	struct vrange_sqlite_stats ps;
	struct vrange_stats vs;
	pthread_t th, th2;
	int status, rc = 1;
	pid_t pid;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 77;
	}
	ref = mmap(NULL, sizeof(*ref), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ref == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* The reference, on SQLite's default page cache, in a child that never
	 * installs ours (the page cache is a process-wide setting). */
	pid = fork();
	if (pid == 0) {
		struct run rr = { .rng = 0x5eed, .ref = ref, .record = true };

		if (open_db(dir, "ref.db", &rr) < 0)
			_exit(1);
		workload(&rr, rounds, release_memory);
		sqlite3_close(rr.db);
		_exit(rr.failed);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "reference run failed\n");
		goto out;
	}

	if (vrange_sqlite_pcache_install() != SQLITE_OK) {
		fprintf(stderr, "vrange_sqlite_pcache_install failed\n");
		goto out;
	}
	/* Two connections on two threads (caches used concurrently), each on
	 * its own files, each compared with the same reference. */
	for (int i = 0; i < 2; i++) {
		r2[i] = (struct run){ .rng = 0x5eed, .ref = ref, .record = false,
				      .rounds = rounds };
		if (open_db(dir, i ? "vrange2.db" : "vrange.db", &r2[i]) < 0)
			goto out;
	}
	pthread_create(&th, NULL, purger, (void *)(uintptr_t)time(NULL));
	pthread_create(&th2, NULL, second, &r2[1]);
	workload(&r2[0], rounds, release_memory);
	pthread_join(th2, NULL);
	atomic_store(&purger_stop, true);
	pthread_join(th, NULL);
	for (int i = 0; i < 2; i++) {
		if (!r2[i].failed && r2[i].nq != ref->n)
			fail(&r2[i], "query count", "differs from the reference run");
		sqlite3_close(r2[i].db);
	}
	sqlite3_shutdown();
	r = r2[0];
	r.failed |= r2[1].failed;
	r.nq += r2[1].nq;
	r.checks += r2[1].checks;

	vrange_sqlite_pcache_stats(&ps);
	vrange_get_stats(&vs);
	printf("rounds %d, queries compared %" PRIu64 ", integrity checks ok %" PRIu64 "\n",
	       rounds, r.nq, r.checks);
	printf("purges %" PRIu64 ", pages purged %" PRIu64 " (by xShrink %" PRIu64 "), "
	       "fetches %" PRIu64 ", re-reads of purged pages %" PRIu64 ", mark pairs %" PRIu64 "\n",
	       purges, purged_bytes / 4096, ps.shrunk_bytes / 4096, ps.fetches, ps.rereads,
	       ps.unmarks);
	if (!r.failed && ps.rereads == 0)
		fail(&r, "purging", "no fetch ever found a purged page: nothing was tested");
	if (!r.failed && ps.caches != 0)
		fail(&r, "caches", "a cache outlived its connection");
	rc = r.failed;
	printf("%s\n", rc ? "FAIL" : "PASS");
out:
	for (int i = 0; i < 9; i++) {
		static const char *const files[] = { "ref.db", "ref.db-small", "ref.db-big",
			"vrange.db", "vrange.db-small", "vrange.db-big",
			"vrange2.db", "vrange2.db-small", "vrange2.db-big" };
		char path[4096];

		fmt(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
	return rc;
}
