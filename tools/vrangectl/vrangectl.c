/* SPDX-License-Identifier: MIT */
/*
 * vrangectl - see every process's volatile memory, and purge it in one
 * order across processes (contract §8).  This file: the command line.
 * Exit status: 0 success, 1 error (one line on stderr), 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "vrange.h"
#include "output.h"
#include "publish.h"
#include <sys/stat.h>

#include "purge_all.h"

static const char usage_text[] =
	"usage: vrangectl list [--json]\n"
	"       vrangectl show PID [--ranges] [--json]\n"
	"       vrangectl purge [--pid PID] [--disk PATH] (--bytes N[K|M|G] | --all) [--json]\n"
	"       vrangectl watch [--interval SECONDS]\n"
	"       vrangectl coordinate [--foreground] [--verbose] [--no-realtime]\n"
	"       vrangectl --help | --version\n";

static const char help_text[] =
	"\n"
	"Show and manage the volatile memory of processes using libvrange that the\n"
	"caller may inspect (same user, or root; the kernel's ptrace-read check).\n"
	"\n"
	"  list        one row per process: pid, command, regions, files, caches,\n"
	"              volatile, purged and resident bytes, access mode, pressure\n"
	"              source, monitor on/off\n"
	"  show PID    per region, file, cache and the anonymous state: name, size,\n"
	"              volatile, purged, resident, ranges, age of the oldest range;\n"
	"              --ranges lists every range [start, end) with state and priority\n"
	"  purge       discard volatile memory of library files (regions, shim areas,\n"
	"              caches), lowest priority then least recently marked first,\n"
	"              across every process reached (--pid: one process); --bytes N\n"
	"              stops once N bytes are freed, --all frees everything volatile;\n"
	"              private anonymous memory is reported as unreachable;\n"
	"              --disk PATH: punch volatile ranges of disk files on PATH's file\n"
	"              system instead, counting the disk space freed\n"
	"  watch       the list, refreshed every --interval seconds (default 1)\n"
	"  coordinate  one memory-pressure watcher for every process of this user;\n"
	"              their own monitors leave library files to it while it runs;\n"
	"              runs in the background unless --foreground; --verbose logs\n"
	"              each purge on stderr; real-time (SCHED_RR 1) where permitted\n"
	"              unless --no-realtime\n"
	"\n"
	"  --json      one JSON document on stdout\n"
	"\n"
	"Exit status: 0 success, 1 error (\"no such process\" for a pid that does not\n"
	"exist, does not use the library or may not be inspected), 2 bad usage.\n";

static int usage(void)
{
	fputs(usage_text, stderr);
	return 2;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "vrangectl: %s: %s\n", what, strerror(err > 0 ? err : -err));
	return 1;
}

static bool parse_pid(const char *s, pid_t *out)
{
	char *end;
	long v;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v <= 0 || v > INT_MAX)
		return false;
	*out = (pid_t)v;
	return true;
}

/* getopt_long over argv[1..]: the subcommand is argv[1]. */
static int next_opt(int argc, char **argv, const struct option *opts)
{
	return getopt_long(argc - 1, argv + 1, "", opts, NULL);
}

static int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = { { "json", no_argument, 0, 'j' }, { 0 } };
	bool json = false;
	struct vc_proc *p;
	size_t n;
	int c, r;

	while ((c = next_opt(argc, argv, opts)) != -1) {
		if (c != 'j')
			return usage();
		json = true;
	}
	if (optind + 1 != argc)
		return usage();
	r = vc_read_all(VC_TOTALS, &p, &n);
	if (r < 0)
		return fail("reading /proc", r);
	if (json)
		r = vc_json_print(vc_json_list(p, n));
	else
		vc_print_list(stdout, p, n);
	vc_procs_free(p, n);
	return r < 0 ? fail("writing", r) : 0;
}

static int cmd_show(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, 0, 'j' }, { "ranges", no_argument, 0, 'r' }, { 0 }
	};
	bool json = false, ranges = false;
	struct vc_proc p;
	pid_t pid;
	int c, r;

	while ((c = next_opt(argc, argv, opts)) != -1) {
		if (c == 'j')
			json = true;
		else if (c == 'r')
			ranges = true;
		else
			return usage();
	}
	if (optind + 2 != argc || !parse_pid(argv[optind + 1], &pid))
		return usage();
	r = vc_read_proc(pid, ranges ? VC_RANGES : VC_OBJECTS, &p);
	if (r == -ESRCH) {
		fprintf(stderr, "vrangectl: %d: no such process\n", (int)pid);
		return 1;
	}
	if (r < 0)
		return fail("reading the process", r);
	if (json)
		r = vc_json_print(vc_json_show(&p, ranges));
	else
		vc_print_show(stdout, &p, ranges);
	vc_proc_free(&p);
	return r < 0 ? fail("writing", r) : 0;
}

static int print_purge(const struct vc_proc *p, size_t n,
		       const struct vc_purge_result *res, bool json)
{
	char a[16], b[16];

	if (json) {
		struct json_object *doc = json_object_new_object();
		struct json_object *arr = json_object_new_array();

		json_object_object_add(doc, "freed_bytes", json_object_new_uint64(res->freed_bytes));
		json_object_object_add(doc, "purged_cost",
				       json_object_new_uint64(res->purged_cost));
		json_object_object_add(doc, "unreachable_bytes",
				       json_object_new_uint64(res->unreachable_bytes));
		for (size_t i = 0; i < n; i++) {
			struct json_object *o = json_object_new_object();

			json_object_object_add(o, "pid", json_object_new_int(p[i].pid));
			json_object_object_add(o, "freed_bytes",
					       json_object_new_uint64(res->freed[i]));
			json_object_array_add(arr, o);
		}
		json_object_object_add(doc, "processes", arr);
		return vc_json_print(doc);
	}
	for (size_t i = 0; i < n; i++)
		printf("%7d %-16s freed %s\n", p[i].pid, "", vc_human(res->freed[i], a, sizeof(a)));
	printf("freed %" PRIu64 " bytes (%s) from %zu processes, at a re-creation "
	       "cost of %" PRIu64 "; %s volatile unreachable from outside "
	       "(anonymous memory)\n", res->freed_bytes,
	       vc_human(res->freed_bytes, a, sizeof(a)), n, res->purged_cost,
	       vc_human(res->unreachable_bytes, b, sizeof(b)));
	return 0;
}

static int cmd_purge(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, 0, 'j' }, { "all", no_argument, 0, 'a' },
		{ "bytes", required_argument, 0, 'b' }, { "pid", required_argument, 0, 'p' },
		{ "disk", required_argument, 0, 'd' }, { 0 }
	};
	bool json = false, all = false, have_bytes = false, have_pid = false;
	const char *disk_path = NULL;
	struct stat dst;
	struct vc_purge_result res;
	struct vc_proc *p = NULL;
	size_t n = 0, bytes = 0;
	pid_t pid = 0;
	int c, r;

	while ((c = next_opt(argc, argv, opts)) != -1) {
		if (c == 'j')
			json = true;
		else if (c == 'a')
			all = true;
		else if (c == 'b' && !have_bytes && vr_parse_size(optarg, &bytes) == 0)
			have_bytes = true;
		else if (c == 'p' && !have_pid && parse_pid(optarg, &pid))
			have_pid = true;
		else if (c == 'd' && !disk_path)
			disk_path = optarg;
		else
			return usage();
	}
	if (optind + 1 != argc || all == have_bytes)
		return usage();
	if (disk_path && stat(disk_path, &dst) < 0)
		return fail(disk_path, -errno);
	if (have_pid) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return fail("purge", -ENOMEM);
		r = vc_read_proc(pid, VC_TOTALS, p);
		if (r < 0) {
			free(p);
			if (r != -ESRCH)
				return fail("reading the process", r);
			fprintf(stderr, "vrangectl: %d: no such process\n", (int)pid);
			return 1;
		}
		n = 1;
	} else {
		r = vc_read_all(VC_TOTALS, &p, &n);
		if (r < 0)
			return fail("reading /proc", r);
	}
	r = vc_purge(p, n, all ? UINT64_MAX : bytes, disk_path ? &dst.st_dev : NULL, &res);
	if (r == 0)
		r = print_purge(p, n, &res, json);
	free(res.freed);
	vc_procs_free(p, n);
	return r < 0 ? fail("purge", r) : 0;
}

int main(int argc, char **argv)
{
	/* The tool reads others; it is not itself a process to list. */
	publish_disable();
	vr_init_basic();
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage_text, stdout);
		fputs(help_text, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("vrangectl %s\n", vrange_version());
		return 0;
	}
	opterr = 0;
	if (!strcmp(argv[1], "list"))
		return cmd_list(argc, argv);
	if (!strcmp(argv[1], "show"))
		return cmd_show(argc, argv);
	if (!strcmp(argv[1], "purge"))
		return cmd_purge(argc, argv);
	if (!strcmp(argv[1], "watch"))
		return vc_cmd_watch(argc - 1, argv + 1);
	if (!strcmp(argv[1], "coordinate"))
		return vc_cmd_coordinate(argc - 1, argv + 1);
	return usage();
}
