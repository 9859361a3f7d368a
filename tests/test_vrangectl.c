/* SPDX-License-Identifier: MIT */
/*
 * test_vrangectl - vrangectl against real processes (contract §8).
 *
 *   test-vrangectl VRANGECTL TARGET     run every case; exit 0, 1, or 77
 *   test-vrangectl hostile MODE         (internal) publish hostile data
 *
 * Targets are tests/vrangectl_target, driven over pipes; vrangectl runs as
 * a child with a deadline, so a hang is a failure, not a stuck test.
 *
 * The cases run in a PID, mount and network namespace of their own
 * (own_ns.h): a purge without --pid and a coordinator reach every process
 * of the user that /proc and the abstract socket namespace show, and must
 * reach only the test's own.  A witness outside - a target with volatile
 * pages, started before - must come through untouched.  Where the
 * namespaces are refused, the cases that would reach outside are skipped,
 * each with the reason.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordinator.h"
#include "file_state.h"
#include "own_ns.h"
#include "publish.h"
#include "range_tree.h"
#include "region.h"
#include "vrange.h"

static const char *ctl, *target_bin;
static int failures;
static long page;
/* The cases run in namespaces of their own (own_ns.h); else the reason. */
static bool inside;
static const char *outside_why = "";

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); failures++; } } while (0)

struct tgt {
	pid_t pid;
	FILE *in, *out;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Start argv (NULL-terminated) with pipes on stdin/stdout. */
static struct tgt spawn(char *const argv[])
{
	int in[2], out[2];
	struct tgt t = { 0 };
	char line[128];

	if (pipe(in) || pipe(out))
		abort();
	t.pid = fork();
	if (t.pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	t.in = fdopen(in[1], "w");
	t.out = fdopen(out[0], "r");
	setvbuf(t.in, NULL, _IOLBF, 0);
	if (!fgets(line, sizeof(line), t.out) || strncmp(line, "ready", 5)) {
		fprintf(stderr, "target %s did not start\n", argv[0]);
		exit(1);
	}
	return t;
}

static struct tgt spawn_target(void)
{
	char *argv[] = { (char *)target_bin, NULL };

	return spawn(argv);
}

static char *cmd(struct tgt *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static char *cmd(struct tgt *t, const char *fmt, ...)
{
	static char line[512];
	va_list ap;

	va_start(ap, fmt);
	vfprintf(t->in, fmt, ap);
	va_end(ap);
	fputc('\n', t->in);
	fflush(t->in);
	if (!fgets(line, sizeof(line), t->out))
		strcpy(line, "err eof\n");
	if (strncmp(line, "ok", 2))
		fprintf(stderr, "target %d: %s", (int)t->pid, line);
	return line;
}

static void stop(struct tgt *t)
{
	kill(t->pid, SIGKILL);
	waitpid(t->pid, NULL, 0);
	fclose(t->in);
	fclose(t->out);
}

/*
 * Run vrangectl (argv after the program name, optionally under a prefix
 * such as setpriv) with a deadline.  Returns the exit status (128+signal if
 * killed, 200 on the deadline); *out gets its stdout (free it).
 */
static int run_v(char **out, double deadline, char *const prefix[], va_list ap)
{
	char *argv[32];
	int n = 0, p[2], status;
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap);
	double end = now_s() + deadline;
	pid_t pid;

	for (int i = 0; prefix && prefix[i]; i++)
		argv[n++] = prefix[i];
	argv[n++] = (char *)ctl;
	while (n < 31 && (argv[n] = va_arg(ap, char *)))
		n++;
	argv[n] = NULL;
	if (pipe(p))
		abort();
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		struct pollfd pf = { p[0], POLLIN, 0 };
		int ms = (int)((end - now_s()) * 1000);
		ssize_t r;

		if (ms <= 0 || poll(&pf, 1, ms) <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			close(p[0]);
			buf[len] = 0;
			*out = buf;
			return 200;
		}
		if (len + 4096 >= cap)
			buf = realloc(buf, cap *= 2);
		r = read(p[0], buf + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(p[0]);
	buf[len] = 0;
	*out = buf;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/*
 * Run vrangectl (arguments after the program name, NULL-terminated,
 * optionally under a prefix such as setpriv) with a deadline.  Returns the
 * exit status (128+signal if killed, 200 on the deadline); *out gets its
 * stdout (free it).
 */
static int run(char **out, double deadline, char *const prefix[], ...)
{
	va_list ap;
	int r;

	va_start(ap, prefix);
	r = run_v(out, deadline, prefix, ap);
	va_end(ap);
	return r;
}

/* Run with --json added; the parsed document or NULL. */
static json_object *run_json(double deadline, char *const prefix[], ...)
{
	char *out;
	va_list ap;
	int st;
	json_object *j;

	va_start(ap, prefix);
	st = run_v(&out, deadline, prefix, ap);
	va_end(ap);
	j = st == 0 ? json_tokener_parse(out) : NULL;
	if (j && !json_object_is_type(j, json_type_object)) {
		json_object_put(j);
		j = NULL;
	}
	if (!j)
		fprintf(stderr, "vrangectl: status %d, output: %.200s\n", st, out);
	free(out);
	return j;
}

static uint64_t jget(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) ? (uint64_t)json_object_get_uint64(v) : UINT64_MAX;
}

static json_object *find_proc(json_object *list, pid_t pid)
{
	json_object *arr;

	if (!list || !json_object_object_get_ex(list, "processes", &arr))
		return NULL;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *p = json_object_array_get_idx(arr, i);

		if ((pid_t)jget(p, "pid") == pid)
			return p;
	}
	return NULL;
}

static char pidbuf[8][16];
static char *pids(int i, pid_t pid)
{
	snprintf(pidbuf[i], sizeof(pidbuf[i]), "%d", (int)pid);
	return pidbuf[i];
}

/* ---- cases ----------------------------------------------------------- */

/* list and show agree exactly with vrange_get_stats at rest. */
static void test_exact_figures(void)
{
	struct tgt a = spawn_target(), b = spawn_target();
	unsigned long long reg, files, vol, pur;
	json_object *list, *p;

	cmd(&a, "region alpha 1024 zero");
	cmd(&a, "region beta 512 sigbus");
	cmd(&a, "mark 0 0 100");
	cmd(&a, "mark 1 10 20");
	cmd(&a, "anon 256");
	cmd(&a, "file 128");
	cmd(&b, "region gamma 2048 zero");
	cmd(&b, "mark 0 0 512");
	/* Single pages of a region with no range: marked without the lock,
	 * counted in the page words' stripes (page_words.h). */
	cmd(&b, "region delta 64 zero");
	cmd(&b, "mark 1 3 1");
	cmd(&b, "mark 1 7 1");
	/* Some purged bytes too: purge b's region through the tool. */
	list = run_json(20, NULL, "purge", "--pid", pids(0, b.pid), "--bytes=1M", "--json", NULL);
	CHECK(list && jget(list, "freed_bytes") == 1u << 20, "purge --bytes 1M freed %llu",
	      (unsigned long long)(list ? jget(list, "freed_bytes") : 0));
	json_object_put(list);
	list = run_json(20, NULL, "list", "--json", NULL);
	CHECK(list, "list --json");
	for (int i = 0; i < 2; i++) {
		struct tgt *t = i ? &b : &a;

		sscanf(cmd(t, "stats"), "ok %llu %llu %llu %llu", &reg, &files, &vol, &pur);
		p = find_proc(list, t->pid);
		CHECK(p, "process %d listed", (int)t->pid);
		if (!p)
			continue;
		CHECK(jget(p, "regions") == reg, "regions %llu vs %llu",
		      (unsigned long long)jget(p, "regions"), reg);
		CHECK(jget(p, "files") == files, "files %llu vs %llu",
		      (unsigned long long)jget(p, "files"), files);
		CHECK(jget(p, "volatile_bytes") == vol, "volatile %llu vs %llu",
		      (unsigned long long)jget(p, "volatile_bytes"), vol);
		CHECK(jget(p, "purged_bytes") == pur, "purged %llu vs %llu",
		      (unsigned long long)jget(p, "purged_bytes"), pur);
		CHECK(vol > 0 && (i == 0 || pur == 1u << 20), "non-trivial figures");
	}
	p = find_proc(list, a.pid);
	if (p) {
		json_object *v;

		CHECK(json_object_object_get_ex(p, "access", &v) &&
		      !strcmp(json_object_get_string(v), "mixed"), "access mixed");
		/* 1 MiB + 512 KiB regions written, 128 KiB file unwritten, 256 KiB anon. */
		CHECK(jget(p, "resident_bytes") >= (1536u + 256u) << 10,
		      "resident %llu", (unsigned long long)jget(p, "resident_bytes"));
	}
	json_object_put(list);
	stop(&a);
	stop(&b);
}

static bool has_range(json_object *obj, uint64_t s, uint64_t e, const char *state, int prio)
{
	json_object *rl, *v;

	if (!json_object_object_get_ex(obj, "range_list", &rl))
		return false;
	for (size_t i = 0; i < json_object_array_length(rl); i++) {
		json_object *r = json_object_array_get_idx(rl, i);

		if (jget(r, "start") == s && jget(r, "end") == e &&
		    json_object_object_get_ex(r, "state", &v) &&
		    !strcmp(json_object_get_string(v), state) &&
		    json_object_object_get_ex(r, "priority", &v) && json_object_get_int(v) == prio)
			return true;
	}
	return false;
}

/* The volatile range [s, e) of obj and its cost (0: no such range). */
static uint64_t range_cost(json_object *obj, uint64_t s, uint64_t e)
{
	json_object *rl;

	if (!json_object_object_get_ex(obj, "range_list", &rl))
		return 0;
	for (size_t i = 0; i < json_object_array_length(rl); i++) {
		json_object *r = json_object_array_get_idx(rl, i);

		if (jget(r, "start") == s && jget(r, "end") == e)
			return jget(r, "cost");
	}
	return 0;
}

static json_object *object_named(json_object *show, const char *kind, const char *name)
{
	json_object *arr, *v;

	if (!show || !json_object_object_get_ex(show, "objects", &arr))
		return NULL;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *o = json_object_array_get_idx(arr, i);

		if (json_object_object_get_ex(o, "kind", &v) && !strcmp(json_object_get_string(v), kind) &&
		    (!name || (json_object_object_get_ex(o, "name", &v) &&
			       !strcmp(json_object_get_string(v), name))))
			return o;
	}
	return NULL;
}

static void test_show_ranges(void)
{
	struct tgt a = spawn_target();
	unsigned long addr;
	json_object *show, *o;
	char *out;
	int st;

	cmd(&a, "region ranges-r 256 zero");
	cmd(&a, "mark 0 0 4");
	cmd(&a, "prio 0 5");
	cmd(&a, "mark 0 8 4");
	cmd(&a, "markc 0 16 4 100");
	cmd(&a, "markc 0 20 4 7");
	sscanf(cmd(&a, "anon 64"), "ok %lx", &addr);
	show = run_json(20, NULL, "show", pids(0, a.pid), "--ranges", "--json", NULL);
	o = object_named(show, "region", "ranges-r");
	CHECK(o, "region object named ranges-r");
	CHECK(o && jget(o, "size") == 256 << 10, "size");
	CHECK(o && jget(o, "ranges") == 4, "4 ranges");
	CHECK(o && has_range(o, 0, 4 * page, "volatile", 0), "range [0,4p) prio 0");
	CHECK(o && has_range(o, 8 * page, 12 * page, "volatile", 5), "range [8p,12p) prio 5");
	/* Ranges of different cost side by side stay apart. */
	CHECK(o && range_cost(o, 0, 4 * page) == 1, "range [0,4p) cost 1");
	CHECK(o && range_cost(o, 16 * page, 20 * page) == 100, "range [16p,20p) cost 100");
	CHECK(o && range_cost(o, 20 * page, 24 * page) == 7, "range [20p,24p) cost 7");
	o = object_named(show, "anonymous", NULL);
	CHECK(o && has_range(o, addr, addr + (64 << 10), "volatile", 0), "anonymous range");
	CHECK(o && jget(o, "resident_bytes") == 64 << 10, "anon resident %llu",
	      (unsigned long long)(o ? jget(o, "resident_bytes") : 0));
	json_object_put(show);
	/* The table form and its ranges. */
	st = run(&out, 20, NULL, "show", pids(0, a.pid), "--ranges", NULL);
	CHECK(st == 0 && strstr(out, "ranges-r") && strstr(out, "prio 5") &&
	      strstr(out, "cost 100"), "show table: %s", out);
	free(out);
	stop(&a);
}

/* One order across processes: lowest priority, then least recently marked. */
static void test_global_order(void)
{
	struct tgt a = spawn_target(), b = spawn_target();
	const char *expect[4] = { "b1", "a1", "b0", "a0" };
	json_object *j;
	char bytes[32];

	cmd(&a, "region a0 64 zero");
	cmd(&a, "region a1 64 zero");
	cmd(&b, "region b0 64 zero");
	cmd(&b, "region b1 64 zero");
	cmd(&b, "prio 1 -2"); /* b1: lowest priority, purged first */
	cmd(&a, "prio 1 -1");
	cmd(&b, "mark 0 0 16"); /* b0 marked before a0: older */
	usleep(30000);
	cmd(&a, "mark 0 0 16");
	usleep(30000);
	cmd(&a, "mark 1 0 16");
	usleep(30000);
	cmd(&b, "mark 1 0 16");
	snprintf(bytes, sizeof(bytes), "--bytes=%ld", 16 * page);
	for (int step = 0; step < 4; step++) {
		j = run_json(20, NULL, "purge", bytes, "--json", NULL);
		CHECK(j && jget(j, "freed_bytes") == (uint64_t)(16 * page), "step %d freed", step);
		json_object_put(j);
		/* Exactly the expected region went (the earlier ones are
		 * non-volatile again), the later ones are intact so far. */
		{
			struct tgt *t = expect[step][0] == 'a' ? &a : &b;
			char *r = cmd(t, "unmark %d 0 16", expect[step][1] - '0');

			CHECK(!strncmp(r, "ok purged", 9), "step %d: %s purged (%s)", step,
			      expect[step], r);
		}
		for (int k = step + 1; k < 4; k++) {
			struct tgt *t = expect[k][0] == 'a' ? &a : &b;
			/* Query without disturbing: the tool shows it unpurged. */
			json_object *show = run_json(20, NULL, "show", pids(0, t->pid), "--json", NULL);
			json_object *o = object_named(show, "region", expect[k]);

			CHECK(o && jget(o, "purged_bytes") == 0, "step %d: %s still intact", step, expect[k]);
			json_object_put(show);
		}
	}
	stop(&a);
	stop(&b);
}

/* The cost order across processes: a dear range one process marked goes
 * after a cheap one another process marked later, at the same priority
 * (contract 10; by age alone the dear one would go first). */
static void test_cost_order(void)
{
	struct tgt a = spawn_target(), b = spawn_target();
	json_object *j;
	char bytes[32], *r;

	cmd(&a, "region dear 64 zero");
	cmd(&b, "region cheap 64 zero");
	cmd(&a, "markc 0 0 16 100000");
	usleep(30000);
	cmd(&b, "mark 0 0 16");
	snprintf(bytes, sizeof(bytes), "--bytes=%ld", 16 * page);
	j = run_json(20, NULL, "purge", bytes, "--json", NULL);
	CHECK(j && jget(j, "freed_bytes") == (uint64_t)(16 * page), "cost order: freed");
	CHECK(j && jget(j, "purged_cost") == 16, "cost order: 16 pages of cost 1 went");
	json_object_put(j);
	r = cmd(&b, "unmark 0 0 16");
	CHECK(!strncmp(r, "ok purged", 9), "cost order: the cheap range went (%s)", r);
	r = cmd(&a, "unmark 0 0 16");
	CHECK(!strncmp(r, "ok intact", 9), "cost order: the dear range stayed (%s)", r);
	stop(&a);
	stop(&b);
}

/*
 * A purge of everything without --pid reaches every process /proc shows:
 * here only the test's own (the witness outside is checked by main once
 * the namespace is gone; without the namespace it is purged here).
 */
static void test_purge_everything_inside(void)
{
	struct tgt a = spawn_target();
	char *out, *r;
	int st;

	cmd(&a, "region inside 64 zero");
	cmd(&a, "mark 0 0 16");
	st = run(&out, 20, NULL, "purge", "--all", NULL);
	CHECK(st == 0, "purge --all without --pid: exit %d (%s)", st, out);
	free(out);
	r = cmd(&a, "unmark 0 0 16");
	CHECK(!strncmp(r, "ok purged", 9), "purge --all reached the test's own process (%s)", r);
	stop(&a);
}

/* The witness: a process outside the test's namespaces, volatile pages
 * marked before the cases ran, none of them purged since. */
static void witness_start(struct tgt *w)
{
	*w = spawn_target();
	cmd(w, "region witness 64 zero");
	cmd(w, "mark 0 0 16");
}

static void witness_check(struct tgt *w)
{
	unsigned long long reg = 0, files = 0, vol = 0, pur = ~0ull;
	char *r = cmd(w, "unmark 0 0 16");
	bool intact = !strncmp(r, "ok intact", 9);

	CHECK(intact, "a process outside the test was purged by it (%s)", r);
	sscanf(cmd(w, "stats"), "ok %llu %llu %llu %llu", &reg, &files, &vol, &pur);
	CHECK(pur == 0, "the process outside the test counts %llu bytes purged", pur);
	if (intact && pur == 0)
		fprintf(stderr, "the process outside the test's namespaces is untouched\n");
	stop(w);
}

/* A purge from outside while the owner marks and unmarks: every "intact"
 * answer must be true. */
static void test_truthful_purge(void)
{
	struct tgt a = spawn_target();
	int rounds = 0;
	unsigned long long r = 0, purged = 0, bad = 0;
	pid_t pid;
	char *out;

	cmd(&a, "region churn 256 zero");
	pid = fork();
	if (pid == 0) {
		double end = now_s() + 2.5;

		while (now_s() < end) {
			char *o2;

			run(&o2, 20, NULL, "purge", "--all", "--pid", pids(1, a.pid), NULL);
			free(o2);
		}
		_exit(0);
	}
	sscanf(cmd(&a, "churn 0 64 2000"), "ok %llu %llu %llu", &r, &purged, &bad);
	waitpid(pid, NULL, 0);
	CHECK(bad == 0, "%llu pages reported intact were not", bad);
	CHECK(purged > 0, "the purges raced the unmarks (%llu purged in %llu rounds)", purged, r);
	fprintf(stderr, "truthful purge: %llu rounds, %llu pages purged under the owner, 0 lies\n",
		r, purged);
	(void)rounds;
	(void)out;
	stop(&a);
}

/* A process that does not use the library is not listed. */
static void test_not_library(void)
{
	char *argv[] = { "sh", "-c", "echo ready; exec sleep 30", NULL };
	struct tgt s = spawn(argv);
	json_object *list = run_json(20, NULL, "list", "--json", NULL);
	char *out;
	int st;

	CHECK(list && !find_proc(list, s.pid), "sleep is not listed");
	json_object_put(list);
	st = run(&out, 20, NULL, "show", pids(0, s.pid), NULL);
	CHECK(st == 1, "show of a non-library process: exit %d", st);
	free(out);
	st = run(&out, 20, NULL, "show", "999999999", NULL);
	CHECK(st == 1 || st == 2, "show of a pid that cannot exist: exit %d", st);
	free(out);
	st = run(&out, 20, NULL, "purge", "--all", "--bytes=1", NULL);
	CHECK(st == 2, "--all with --bytes is usage: exit %d", st);
	free(out);
	st = run(&out, 20, NULL, "purge", NULL);
	CHECK(st == 2, "purge alone is usage: exit %d", st);
	free(out);
	stop(&s);
}

/*
 * Copies of the target, the tool and the library in a directory other
 * users can reach: a build tree under a private directory (mktemp -d is
 * 0700) is not.  The copies' directory in dir; 0, or -1.
 */
static int reachable_copies(char *dir, char *tbin, char *cbin, size_t n)
{
	const char *ld = getenv("LD_LIBRARY_PATH");
	size_t ldlen = ld ? strcspn(ld, ":") : 0;
	char cmdline[4096];

	if (!mkdtemp(dir) || chmod(dir, 0755) < 0)
		return -1;
	snprintf(cmdline, sizeof(cmdline), "cp '%s' '%s' '%.*s/libvrange.so.0' '%s'/",
		 target_bin, ctl, ldlen ? (int)ldlen : 3, ldlen ? ld : "src", dir);
	if (system(cmdline) != 0)
		return -1;
	snprintf(tbin, n, "%s/%s", dir, strrchr(target_bin, '/') ? strrchr(target_bin, '/') + 1 : target_bin);
	snprintf(cbin, n, "%s/%s", dir, strrchr(ctl, '/') ? strrchr(ctl, '/') + 1 : ctl);
	return setenv("LD_LIBRARY_PATH", dir, 1);
}

static void test_other_user_in(void);

/* Another user's process: invisible and untouchable. */
static void test_other_user(void)
{
	char dir[] = "/tmp/vrangectl-other-XXXXXX", tbin[256], cbin[256], cmdline[128];
	const char *ctl_orig = ctl, *target_orig = target_bin;
	char *ld = getenv("LD_LIBRARY_PATH") ? strdup(getenv("LD_LIBRARY_PATH")) : NULL;

	if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
		fprintf(stderr, "SKIP other-user case: needs root and setpriv\n");
		free(ld);
		return;
	}
	if (reachable_copies(dir, tbin, cbin, sizeof(tbin)) != 0) {
		CHECK(0, "copies for the other users in %s", dir);
		free(ld);
		return;
	}
	ctl = cbin;
	target_bin = tbin;
	test_other_user_in();
	ctl = ctl_orig;
	target_bin = target_orig;
	if (ld)
		setenv("LD_LIBRARY_PATH", ld, 1);
	else
		unsetenv("LD_LIBRARY_PATH");
	free(ld);
	snprintf(cmdline, sizeof(cmdline), "rm -rf '%s'", dir);
	if (system(cmdline) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

static void test_other_user_in(void)
{
	char *as_a[] = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
			 (char *)target_bin, NULL };
	char *as_b[] = { "setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", "--", NULL };
	char *as_same[] = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", NULL };
	unsigned long long reg, files, vol, pur;
	json_object *list;
	struct tgt t;
	char *out;
	int st;

	t = spawn(as_a);
	cmd(&t, "region other 256 zero");
	cmd(&t, "mark 0 0 64");
	/* Positive control: the same user sees it. */
	list = run_json(20, as_same, "list", "--json", NULL);
	CHECK(list && find_proc(list, t.pid), "the owner's user sees it");
	json_object_put(list);
	list = run_json(20, as_b, "list", "--json", NULL);
	CHECK(list && !find_proc(list, t.pid), "another user does not see it");
	json_object_put(list);
	st = run(&out, 20, as_b, "show", pids(0, t.pid), NULL);
	CHECK(st == 1 && strstr(out, "") , "show by another user: exit %d", st);
	free(out);
	st = run(&out, 20, as_b, "purge", "--pid", pids(0, t.pid), "--all", NULL);
	CHECK(st == 1, "purge --pid by another user: exit %d", st);
	free(out);
	st = run(&out, 20, as_b, "purge", "--all", NULL);
	CHECK(st == 0, "purge --all by another user: exit %d", st);
	free(out);
	sscanf(cmd(&t, "stats"), "ok %llu %llu %llu %llu", &reg, &files, &vol, &pur);
	CHECK(vol == (uint64_t)(64 * page) && pur == 0, "nothing purged (%llu)", pur);
	stop(&t);
}

/* ---- hostile publishers ---------------------------------------------- */

static int pub_memfd(const void *data, size_t len)
{
	int fd = memfd_create(PUB_NAME, 0);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		exit(1);
	return fd;
}

static void fill_hdr(struct pub_hdr *h, uint32_t nfiles)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, PUB_MAGIC, sizeof(PUB_MAGIC));
	h->version = PUB_VERSION;
	h->hdr_bytes = sizeof(*h);
	h->entry_bytes = sizeof(struct pub_file);
	h->page_size = (uint32_t)page;
	h->pid = getpid();
	h->nfiles = nfiles;
	strcpy(h->pressure_source, "psi\x01\xff");
}

/* A corrupt tree: formatted, marked, then scribbled on. */
static int bad_arena(unsigned int seed, bool header_ok)
{
	size_t bytes = rt_arena_bytes(64);
	char *a = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	struct rt_tree t;
	int fd = memfd_create("vrange-local", 0);

	memset(a, 0, bytes);
	rt_format(&t, a, bytes);
	for (int i = 0; i < 20; i++)
		rt_mark_volatile(&t, (uint64_t)i * 4, (uint64_t)i * 4 + 2, i % 3, (uint64_t)i, NULL);
	srand(seed);
	for (size_t i = header_ok ? 64 : 0; i < bytes; i++)
		if (rand() % 7 == 0)
			a[i] = (char)rand();
	if (write(fd, a, bytes) != (ssize_t)bytes)
		exit(1);
	free(a);
	return fd;
}

static int hostile(int mode)
{
	char buf[8192];
	struct pub_hdr *h = (struct pub_hdr *)buf;
	struct pub_file *e = (struct pub_file *)(h + 1);
	int n = 0;

	memset(buf, 0, sizeof(buf));
	switch (mode) {
	case 0: /* garbage */
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = (char)rand();
		memcpy(h->magic, PUB_MAGIC, sizeof(PUB_MAGIC));
		pub_memfd(buf, sizeof(buf));
		break;
	case 1: /* claims many entries it does not have */
		fill_hdr(h, PUB_MAX_FILES);
		pub_memfd(buf, sizeof(*h) + 10);
		break;
	case 2: { /* a writer forever at work */
		fill_hdr(h, 0);
		h->seq = 1;
		pub_memfd(buf, sizeof(*h));
		break;
	}
	case 3: { /* entries naming a FIFO, a device, stdin, corrupt trees */
		int fifo[2], dz = open("/dev/zero", O_RDWR), tty = open("/dev/null", O_RDWR);
		int m1 = memfd_create("looks-like-a-region", 0), x;

		if (pipe(fifo) || ftruncate(m1, 1 << 20))
			exit(1);
		x = bad_arena(1, true);
		fill_hdr(h, 0);
		e[n++] = (struct pub_file){ .user_fd = fifo[0], .state_fd = fifo[1], .flags = PUB_SHARED };
		e[n++] = (struct pub_file){ .user_fd = dz, .state_fd = tty, .flags = PUB_FD_LAYER };
		e[n++] = (struct pub_file){ .user_fd = 0, .state_fd = 1 };
		e[n++] = (struct pub_file){ .user_fd = -1, .state_fd = x, .flags = PUB_ANON };
		e[n++] = (struct pub_file){ .user_fd = -1, .state_fd = bad_arena(2, false), .flags = PUB_ANON };
		e[n++] = (struct pub_file){ .user_fd = m1, .state_fd = bad_arena(3, true),
					    .flags = PUB_SHARED | PUB_FD_LAYER, .regions = 0xffffffff };
		e[n++] = (struct pub_file){ .user_fd = m1, .state_fd = m1, .flags = PUB_SHARED,
					    .regions = 0xffffffff, .sigbus_regions = 7 };
		e[n++] = (struct pub_file){ .user_fd = 1 << 30, .state_fd = -5, .flags = 0xff };
		for (int i = 0; i < n; i++) {
			struct stat st;

			if (e[i].user_fd >= 0 && e[i].user_fd < 1024 && fstat(e[i].user_fd, &st) == 0) {
				e[i].dev = st.st_dev;
				e[i].ino = st.st_ino;
			}
		}
		h->nfiles = (uint32_t)n;
		pub_memfd(buf, sizeof(*h) + (size_t)n * sizeof(*e));
		break;
	}
	case 4: { /* a real library file whose shared lock it never lets go */
		vrange_region *r;

		if (vrange_region_create("held-lock", 1 << 20, 0, &r) < 0 ||
		    vrange_mark_volatile(r, 0, 1 << 20) < 0 || vfile_lock(r->file) < 0)
			exit(1);
		break;
	}
	case 5: { /* the pub of another pid (as if inherited) */
		fill_hdr(h, 0);
		h->pid = getppid();
		pub_memfd(buf, sizeof(*h));
		break;
	}
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	pause();
	return 0;
}

static void test_hostile(const char *self)
{
	for (int mode = 0; mode <= 5; mode++) {
		char m[8];
		char *argv[] = { (char *)self, "hostile", m, NULL };
		struct tgt t;
		json_object *list;
		char *out;
		double t0;
		int st;

		snprintf(m, sizeof(m), "%d", mode);
		t = spawn(argv);
		t0 = now_s();
		list = run_json(30, NULL, "list", "--json", NULL);
		CHECK(list, "mode %d: list survives", mode);
		if (mode != 3 && mode != 4)
			CHECK(list && !find_proc(list, t.pid), "mode %d: not listed", mode);
		json_object_put(list);
		st = run(&out, 30, NULL, "show", pids(0, t.pid), "--ranges", "--json", NULL);
		CHECK(st == 0 || st == 1, "mode %d: show exit %d", mode, st);
		free(out);
		st = run(&out, 30, NULL, "show", pids(0, t.pid), "--ranges", NULL);
		CHECK(st == 0 || st == 1, "mode %d: show table exit %d", mode, st);
		free(out);
		st = run(&out, 30, NULL, "purge", "--pid", pids(0, t.pid), "--all", "--json", NULL);
		CHECK(st == 0 || st == 1, "mode %d: purge exit %d", mode, st);
		free(out);
		CHECK(now_s() - t0 < 20, "mode %d: took %.1f s", mode, now_s() - t0);
		stop(&t);
	}
}

/* Bind the coordinator address of uid 0 and listen, as whoever runs us. */
static int squat(void)
{
	struct sockaddr_un sa;
	unsigned int len = coord_address(0, &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 8) < 0)
		return 1;
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	pause();
	return 0;
}

static bool wait_for(bool want, double secs)
{
	double end = now_s() + secs;

	while (now_s() < end) {
		if (coord_check(geteuid(), NULL) == want)
			return true;
		usleep(10000);
	}
	return false;
}

/* A coordinator is recognised by the kernel's word on its owner; one of
 * another user is not; when it goes, the processes take over at once. */
static void test_coordinator(const char *self)
{
	char *fg[] = { (char *)ctl, "coordinate", "--foreground", NULL };
	char *sq[] = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		       (char *)self, "squat", NULL };
	struct tgt t;
	pid_t c;
	char *out;
	int st;

	CHECK(!coord_check(geteuid(), NULL), "no coordinator at the start");
	c = fork();
	if (c == 0) {
		execv(fg[0], fg);
		_exit(127);
	}
	CHECK(wait_for(true, 5), "a coordinator of our own user is recognised");
	st = run(&out, 10, NULL, "coordinate", "--foreground", NULL);
	CHECK(st == 1, "a second coordinator refuses: exit %d", st);
	free(out);
	kill(c, SIGTERM);
	waitpid(c, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "coordinator exits 0 on SIGTERM");
	CHECK(wait_for(false, 0.2), "its end is seen at once");
	CHECK(!coord_present() || (usleep(300000), !coord_present()),
	      "coord_present drops it within a second");
	if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
		fprintf(stderr, "SKIP squatting case: needs root and setpriv\n");
		return;
	}
	t = spawn(sq);
	{
		uid_t owner;

		CHECK(!coord_check(0, &owner) && owner == 65534,
		      "an address held by another user is not obeyed (owner %d)", (int)owner);
	}
	st = run(&out, 10, NULL, "coordinate", "--foreground", NULL);
	CHECK(st == 1, "coordinate with the address squatted: exit %d", st);
	free(out);
	stop(&t);
}

/* Descriptors of pid whose link contains what. */
static int count_fds_of(pid_t pid, const char *what)
{
	char dir[64], path[384], link[512];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		ssize_t l;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		l = readlink(path, link, sizeof(link) - 1);
		if (l <= 0)
			continue;
		link[l] = 0;
		n += strstr(link, what) != NULL;
	}
	closedir(d);
	return n;
}

/*
 * The coordinator watches each group it serves with the in-process
 * monitor's event sources (issue 25 item 7): for a process in a v1 memory
 * cgroup with a limit, usage thresholds through eventfds on the group's
 * memory.usage_in_bytes - not only polls.
 */
static void test_coordinator_events(void)
{
	char *fg[] = { (char *)ctl, "coordinate", "--foreground", NULL };
	char mnt[] = "/sys/fs/cgroup/memory", dir[256], path[300], val[32];
	int usage = 0, efds = 0, fd;
	struct tgt t;
	double end;
	pid_t c;

	if (geteuid() != 0 || access(mnt, W_OK) != 0) {
		fprintf(stderr, "SKIP coordinator events: needs root and a v1 memory hierarchy\n");
		return;
	}
	snprintf(dir, sizeof(dir), "%s/vrangectl-test-%d", mnt, own_ns_tag());
	snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", dir);
	if (mkdir(dir, 0755) < 0 || (fd = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "SKIP coordinator events: cannot make %s: %s\n", dir, strerror(errno));
		rmdir(dir);
		return;
	}
	CHECK(write(fd, "536870912", 9) == 9, "limit set");
	close(fd);
	t = spawn_target();
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(val, sizeof(val), "%d", (int)t.pid);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	CHECK(fd >= 0 && write(fd, val, strlen(val)) > 0, "target moved into %s", dir);
	if (fd >= 0)
		close(fd);
	cmd(&t, "region evented 1024 zero");
	cmd(&t, "mark 0 0 256");
	c = fork();
	if (c == 0) {
		execv(fg[0], fg);
		_exit(127);
	}
	for (end = now_s() + 5; now_s() < end; usleep(50000)) {
		usage = count_fds_of(c, "memory.usage_in_bytes");
		efds = count_fds_of(c, "[eventfd]");
		if (usage >= 1 && efds >= 2)
			break;
	}
	CHECK(usage >= 1 && efds >= 2, "the coordinator armed usage thresholds on the "
	      "target's cgroup (%d usage files, %d eventfds open)", usage, efds);
	kill(c, SIGTERM);
	waitpid(c, NULL, 0);
	stop(&t);
	for (int i = 0; i < 100 && rmdir(dir) < 0 && errno == EBUSY; i++)
		usleep(20000);
}

/* kB of locked memory of pid (VmLck), or -1. */
static long locked_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* Whether this process may make a thread real-time (asked in a child). */
static bool may_realtime(void)
{
	int st;
	pid_t c = fork();

	if (c == 0) {
		struct sched_param sp = { .sched_priority = 1 };

		_exit(sched_setscheduler(0, SCHED_RR, &sp) == 0 ? 0 : 1);
	}
	return c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/*
 * Under a CPU hog per core the coordinator must not wait for a CPU after
 * its event (issue 25 item 7): where it is permitted it runs SCHED_RR, and
 * its memory is locked; with --no-realtime it stays SCHED_OTHER.
 */
static void test_coordinator_priority(void)
{
	for (int no_rt = 0; no_rt <= 1; no_rt++) {
		char *fg[] = { (char *)ctl, "coordinate", "--foreground",
			       no_rt ? "--no-realtime" : NULL, NULL };
		int policy = -1, st;
		long lck = -1;
		pid_t c = fork();

		if (c == 0) {
			execv(fg[0], fg);
			_exit(127);
		}
		CHECK(wait_for(true, 5), "coordinator up");
		if (waitpid(c, &st, WNOHANG) != 0) {
			fprintf(stderr, "SKIP coordinator priority: another coordinator holds "
				"the address\n");
			return;
		}
		/* Both are set just after it listens: look for a moment. */
		for (double end = now_s() + 5; now_s() < end; usleep(20000)) {
			policy = sched_getscheduler(c) & ~SCHED_RESET_ON_FORK;
			lck = locked_kb(c);
			if (lck > 0 && (no_rt || policy == SCHED_RR || !may_realtime()))
				break;
		}
		if (no_rt)
			CHECK(policy == SCHED_OTHER, "--no-realtime: SCHED_OTHER (policy %d)", policy);
		else if (may_realtime())
			CHECK(policy == SCHED_RR, "the coordinator runs SCHED_RR (policy %d)", policy);
		else
			fprintf(stderr, "SKIP coordinator real-time: not permitted here\n");
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow memory cannot be locked */
		CHECK(geteuid() != 0 || lck > 0, "the coordinator's memory is locked (VmLck %ld kB)",
		      lck);
#endif
		kill(c, SIGTERM);
		waitpid(c, NULL, 0);
		CHECK(wait_for(false, 5), "coordinator gone");
	}
}

static uint64_t object_purged(pid_t pid, const char *kind)
{
	json_object *show = run_json(20, NULL, "show", pids(2, pid), "--json", NULL);
	json_object *o = object_named(show, kind, NULL);
	uint64_t v = o ? jget(o, "purged_bytes") : UINT64_MAX;

	json_object_put(show);
	return v;
}

/* A fake /proc/meminfo of 16 GiB with avail_mib MiB available (the
 * monitor's headroom there is 1 GiB, critical below 256 MiB), rewritten in
 * place with one write (the monitor keeps the file open). */
static void fake_meminfo(const char *root, unsigned int avail_mib)
{
	char path[192], buf[128];
	int fd, n;

	snprintf(path, sizeof(path), "%s/proc/meminfo", root);
	n = snprintf(buf, sizeof(buf), "MemTotal: 16777216 kB\nMemFree: %u kB\n"
		     "MemAvailable: %u kB\n", avail_mib << 10, avail_mib << 10);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	CHECK(fd >= 0 && write(fd, buf, (size_t)n) == n, "writing %s", path);
	if (fd >= 0)
		close(fd);
}

/*
 * Hand-over, end to end: a process whose own monitor sees pressure (a
 * fake /proc/meminfo, inside the headroom, not critical) purges its
 * anonymous memory at once but leaves its region to a running coordinator
 * (which sees no pressure) - for the first moments of the pressure only:
 * pressure that lasts means the coordinator is not relieving it, and the
 * monitor takes the region itself, the coordinator still running.
 */
static void test_handover(void)
{
	char root[128], path[192], env_root[160];
	char *fg[] = { (char *)ctl, "coordinate", "--foreground", NULL };
	char *argv[] = { "env", "VRANGE_MONITOR=1", env_root, (char *)target_bin, NULL };
	struct tgt t;
	double end, t0;
	pid_t c;
	uint64_t anon = UINT64_MAX, reg = UINT64_MAX;

	snprintf(root, sizeof(root), "/tmp/vrangectl-fake-%d", own_ns_tag());
	snprintf(path, sizeof(path), "%s/proc", root);
	mkdir(root, 0755);
	mkdir(path, 0755);
	fake_meminfo(root, 1100); /* outside the headroom, polled often */
	snprintf(env_root, sizeof(env_root), "VRANGE_FS_ROOT=%s", root);
	c = fork();
	if (c == 0) {
		execv(fg[0], fg);
		_exit(127);
	}
	CHECK(wait_for(true, 5), "coordinator up");
	t = spawn(argv);
	cmd(&t, "region handed 1024 zero");
	cmd(&t, "mark 0 0 256");
	cmd(&t, "anon 256");
	fake_meminfo(root, 600); /* inside, not critical */
	t0 = now_s();
	for (end = now_s() + 5; now_s() < end; usleep(10000)) {
		anon = object_purged(t.pid, "anonymous");
		reg = object_purged(t.pid, "region");
		if (anon == 256 << 10)
			break;
	}
	CHECK(anon == 256 << 10, "the monitor purged the anonymous memory (%llu)",
	      (unsigned long long)anon);
	CHECK(reg == 0, "and left the region to the coordinator at first (%llu purged)",
	      (unsigned long long)reg);
	for (end = now_s() + 5; now_s() < end; usleep(20000)) {
		reg = object_purged(t.pid, "region");
		if (reg == 1u << 20)
			break;
	}
	CHECK(reg == 1u << 20, "pressure that lasts: the monitor takes the region, the "
	      "coordinator running (%llu)", (unsigned long long)reg);
	fprintf(stderr, "hand-over: monitor took the region %.2f s after the pressure began\n",
		now_s() - t0);
	kill(c, SIGTERM);
	waitpid(c, NULL, 0);
	stop(&t);
	snprintf(path, sizeof(path), "%s/proc/meminfo", root);
	unlink(path);
	snprintf(path, sizeof(path), "%s/proc", root);
	rmdir(path);
	rmdir(root);
}

/*
 * The record shows the monitor from the moment it exists: a process whose
 * monitor started by itself with its first region is listed with the
 * monitor on and its pressure source, before any purge or stats call of
 * its own (issue 25 item 6).  The source is found by the monitor thread
 * just after it starts: allow it a moment.
 */
static void test_monitor_shown(void)
{
	struct tgt a;
	json_object *list = NULL, *p, *v;
	const char *src = "";
	bool on = false;
	double end;

	setenv("VRANGE_MONITOR", "1", 1);
	a = spawn_target();
	setenv("VRANGE_MONITOR", "0", 1);
	cmd(&a, "region shown 64 zero");
	end = now_s() + 5;
	do {
		json_object_put(list);
		list = run_json(20, NULL, "list", "--json", NULL);
		p = find_proc(list, a.pid);
		on = p && json_object_object_get_ex(p, "monitor", &v) &&
		     json_object_get_boolean(v);
		src = p && json_object_object_get_ex(p, "pressure_source", &v) ?
		      json_object_get_string(v) : "";
		if (on && strcmp(src, "none"))
			break;
		usleep(50000);
	} while (now_s() < end);
	CHECK(p, "process %d listed", (int)a.pid);
	CHECK(on, "monitor shown off for a process whose monitor runs");
	CHECK(src && *src && strcmp(src, "none"), "pressure source \"%s\" before any stats call",
	      src ? src : "(null)");
	json_object_put(list);
	stop(&a);
}

int main(int argc, char **argv)
{
	page = sysconf(_SC_PAGESIZE);
	if (argc == 3 && !strcmp(argv[1], "hostile"))
		return hostile(atoi(argv[2]));
	if (argc == 2 && !strcmp(argv[1], "squat"))
		return squat();
	if (argc != 3) {
		fprintf(stderr, "usage: test-vrangectl VRANGECTL TARGET\n");
		return 2;
	}
	ctl = argv[1];
	target_bin = argv[2];
	signal(SIGPIPE, SIG_IGN);
	setenv("VRANGE_MONITOR", "0", 1);
	{
		struct tgt w;
		int r, status = 1;

		witness_start(&w);
		r = own_ns_enter(&outside_why, &status);
		if (r == 1) {
			/* The namespace ended, and every process in it. */
			witness_check(&w);
			/* It can fork no more (own_ns.h): LeakSanitizer's
			 * exit-time check could not start its tracer. */
			fflush(NULL);
			_exit(status ? status : failures ? 1 : 0);
		}
		inside = r == 0;
		if (inside) {
			/* Its pipes are the outer process's; its pid means
			 * nothing here. */
			fclose(w.in);
			fclose(w.out);
		} else {
			fprintf(stderr, "SKIP the cases that reach every process of the user "
				"(purge without --pid, the coordinator): %s: %s\n",
				outside_why, strerror(-r));
			stop(&w);
		}
	}
	test_exact_figures();
	test_monitor_shown();
	test_show_ranges();
	if (inside) {
		test_global_order();
		test_cost_order();
		test_purge_everything_inside();
	}
	test_truthful_purge();
	test_not_library();
	test_other_user();
	test_hostile(argv[0]);
	if (inside) {
		test_coordinator(argv[0]);
		test_coordinator_events();
		test_coordinator_priority();
		test_handover();
	}
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
