/* SPDX-License-Identifier: MIT */
/*
 * vrangectl_target - a process using libvrange, driven line by line on
 * stdin, for the vrangectl tests.  Every command answers one line on
 * stdout: "ok ..." or "err ...".
 *
 *   region NAME KIB zero|sigbus  -> ok INDEX  (created and written)
 *   prio I P                     -> ok        (priority of later marks)
 *   mark I PAGE NPAGES           -> ok        (volatile)
 *   unmark I PAGE NPAGES         -> ok intact|purged
 *   anon KIB                     -> ok ADDR   (written, marked volatile)
 *   file KIB                     -> ok        (foreign memfd, file layer)
 *   stats                        -> ok REGIONS FILES VOLATILE PURGED
 *   alloc MIB                    -> ok        (plain memory, written at
 *                                               about 1 MiB per ms)
 *   churn I NPAGES MS            -> ok ROUNDS PURGED BAD
 *       mark/unmark page after page for MS milliseconds; after an
 *       "intact" answer the page must hold what was written (BAD counts
 *       pages that did not)
 *   quit
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vrange.h"

#define MAXR 64

static vrange_region *reg[MAXR];
static size_t nreg;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static vrange_region *get(unsigned long i)
{
	return i < nreg ? reg[i] : NULL;
}

static void churn(vrange_region *r, unsigned long npages, unsigned long ms)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *b = vrange_region_base(r);
	uint64_t end = now_ms() + ms, rounds = 0, purged = 0, bad = 0;

	/* Write, mark all volatile, then take them back one by one while a
	 * purge from outside may be at work: an "intact" page must be whole. */
	while (now_ms() < end) {
		unsigned char v = (unsigned char)(rounds * 7 + 1);

		memset(b, v, npages * ps);
		if (vrange_mark_volatile(r, 0, npages * ps) < 0)
			bad++;
		for (unsigned long p = 0; p < npages; p++) {
			int st = vrange_mark_nonvolatile(r, p * ps, ps);

			if (st == VRANGE_PURGED) {
				purged++;
				continue;
			}
			for (size_t k = 0; k < ps; k++)
				if (b[p * ps + k] != v) {
					bad++;
					break;
				}
			if (p % 8 == 0)
				usleep(100);
		}
		rounds++;
	}
	printf("ok %llu %llu %llu\n", (unsigned long long)rounds,
	       (unsigned long long)purged, (unsigned long long)bad);
}

static void command(char *line)
{
	char name[128], mode[16];
	unsigned long a, b, c, d;
	struct vrange_stats st;
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);

	if (sscanf(line, "region %127s %lu %15s", name, &a, mode) == 3 && nreg < MAXR) {
		unsigned int f = strcmp(mode, "sigbus") ? VRANGE_ACCESS_ZERO : VRANGE_ACCESS_SIGBUS;
		int r = vrange_region_create(name, a * 1024, f, &reg[nreg]);

		if (r < 0) {
			printf("err %d\n", r);
			return;
		}
		memset(vrange_region_base(reg[nreg]), 0x5a, a * 1024);
		printf("ok %zu\n", nreg++);
	} else if (sscanf(line, "prio %lu %ld", &a, (long *)&b) == 2 && get(a)) {
		printf(vrange_region_set_priority(get(a), (int)(long)b) == 0 ? "ok\n" : "err\n");
	} else if (sscanf(line, "markc %lu %lu %lu %lu", &a, &b, &c, &d) == 4 && get(a)) {
		printf(vrange_mark_volatile_cost(get(a), b * ps, c * ps, (uint32_t)d) == 0 ?
		       "ok\n" : "err\n");
	} else if (sscanf(line, "mark %lu %lu %lu", &a, &b, &c) == 3 && get(a)) {
		printf(vrange_mark_volatile(get(a), b * ps, c * ps) == 0 ? "ok\n" : "err\n");
	} else if (sscanf(line, "unmark %lu %lu %lu", &a, &b, &c) == 3 && get(a)) {
		int r = vrange_mark_nonvolatile(get(a), b * ps, c * ps);

		printf(r < 0 ? "err\n" : r == VRANGE_PURGED ? "ok purged\n" : "ok intact\n");
	} else if (sscanf(line, "anon %lu", &a) == 1) {
		void *p = mmap(NULL, a * 1024, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED || (memset(p, 1, a * 1024),
					vrange(p, a * 1024, VRANGE_VOLATILE, NULL)) < 0)
			printf("err\n");
		else
			printf("ok %p\n", p);
	} else if (sscanf(line, "file %lu", &a) == 1) {
		int fd = memfd_create("target-foreign", 0);

		if (fd < 0 || ftruncate(fd, (off_t)(a * 1024)) < 0 ||
		    vrange_fd_mark_volatile(fd, 0, (off_t)(a * 1024)) < 0)
			printf("err\n");
		else
			printf("ok\n");
	} else if (!strncmp(line, "stats", 5) && vrange_get_stats(&st) == 0) {
		printf("ok %llu %llu %llu %llu\n", (unsigned long long)st.regions,
		       (unsigned long long)st.files, (unsigned long long)st.volatile_bytes,
		       (unsigned long long)st.purged_bytes);
	} else if (sscanf(line, "alloc %lu", &a) == 1) {
		for (unsigned long i = 0; i < a; i++) {
			char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (p == MAP_FAILED)
				break;
			memset(p, 0x33, 1 << 20);
			usleep(1000);
		}
		printf("ok\n");
	} else if (sscanf(line, "churn %lu %lu %lu", &a, &b, &c) == 3 && get(a)) {
		churn(get(a), b, c);
	} else if (!strncmp(line, "quit", 4)) {
		exit(0);
	} else {
		printf("err bad command\n");
	}
}

int main(void)
{
	char line[512];

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", (int)getpid());
	while (fgets(line, sizeof(line), stdin))
		command(line);
	return 0;
}
