/* SPDX-License-Identifier: MIT */
/*
 * watch.c - `vrangectl watch`: the list, for people.  On a terminal the
 * table is redrawn in place, with a bar per process: '#' volatile and still
 * there, '.' volatile and purged, '-' resident and not volatile; elsewhere
 * (a pipe, a file) a new table is printed each interval.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "output.h"

#define BAR 30

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void bar(const struct vc_proc *p, uint64_t scale, char *out)
{
	uint64_t vol = p->volatile_bytes - p->purged_bytes;
	uint64_t other = p->resident_bytes > vol ? p->resident_bytes - vol : 0;
	size_t a = 0, b = 0, c = 0;

	if (scale) {
		a = (size_t)((double)vol * BAR / (double)scale + 0.5);
		b = (size_t)((double)p->purged_bytes * BAR / (double)scale + 0.5);
		c = (size_t)((double)other * BAR / (double)scale + 0.5);
	}
	a = a > BAR ? BAR : a;
	b = b > BAR - a ? BAR - a : b;
	c = c > BAR - a - b ? BAR - a - b : c;
	memset(out, '#', a);
	memset(out + a, '.', b);
	memset(out + a + b, '-', c);
	memset(out + a + b + c, ' ', BAR - a - b - c);
	out[BAR] = 0;
}

static void draw(const struct vc_proc *p, size_t n, bool tty, double interval)
{
	char v[16], pu[16], r[16], line[BAR + 1], cm[17];
	uint64_t scale = 0, tv = 0, tp = 0, tr = 0;
	time_t now = time(NULL);

	for (size_t i = 0; i < n; i++) {
		uint64_t s = p[i].volatile_bytes > p[i].resident_bytes + p[i].purged_bytes ?
			     p[i].volatile_bytes : p[i].resident_bytes + p[i].purged_bytes;

		scale = s > scale ? s : scale;
		tv += p[i].volatile_bytes;
		tp += p[i].purged_bytes;
		tr += p[i].resident_bytes;
	}
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("vrangectl watch: %zu processes, every %.1f s, %s", n, interval, ctime(&now));
	printf("total: volatile %s, purged %s, resident %s   "
	       "[# volatile  . purged  - resident, not volatile]\n\n",
	       vc_human(tv, v, sizeof(v)), vc_human(tp, pu, sizeof(pu)),
	       vc_human(tr, r, sizeof(r)));
	printf("%7s %-16s %10s %10s %10s %-6s %-3s  %s\n", "PID", "COMMAND", "VOLATILE",
	       "PURGED", "RESIDENT", "ACCESS", "MON", "");
	for (size_t i = 0; i < n; i++) {
		size_t k;

		for (k = 0; p[i].comm[k] && k < 16; k++)
			cm[k] = p[i].comm[k] >= 0x20 && p[i].comm[k] < 0x7f ? p[i].comm[k] : '?';
		cm[k] = 0;
		bar(&p[i], scale, line);
		printf("%7d %-16s %10s %10s %10s %-6s %-3s [%s]\n", p[i].pid, cm,
		       vc_human(p[i].volatile_bytes, v, sizeof(v)),
		       vc_human(p[i].purged_bytes, pu, sizeof(pu)),
		       vc_human(p[i].resident_bytes, r, sizeof(r)), vc_access(&p[i]),
		       p[i].hdr.monitor ? "on" : "off", line);
	}
	if (!tty)
		putchar('\n');
	fflush(stdout);
}

int vc_cmd_watch(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, 0, 'i' }, { 0 }
	};
	struct sigaction sa = { .sa_handler = on_signal };
	double interval = 1.0;
	bool tty = isatty(STDOUT_FILENO);
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c != 'i')
			goto bad;
		errno = 0;
		interval = strtod(optarg, &end);
		if (errno || *end || !(interval >= 0.05 && interval <= 86400))
			goto bad;
	}
	if (optind != argc)
		goto bad;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!stop) {
		struct vc_proc *p;
		size_t n;
		struct timespec ts = { (time_t)interval,
				       (long)((interval - (double)(time_t)interval) * 1e9) };

		if (vc_read_all(VC_TOTALS, &p, &n) < 0) {
			fprintf(stderr, "vrangectl: reading /proc: %s\n", strerror(errno));
			return 1;
		}
		draw(p, n, tty, interval);
		vc_procs_free(p, n);
		while (!stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	return 0;
bad:
	fputs("usage: vrangectl watch [--interval SECONDS]\n", stderr);
	return 2;
}
