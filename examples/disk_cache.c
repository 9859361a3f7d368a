/* SPDX-License-Identifier: MIT */
/*
 * disk_cache - a disk cache that gives space back (contract 9), in one run.
 *
 * On a fresh 256 MiB ext4 file system (a loop-mounted image made here), a
 * cache stores entries of 1 MiB in one file until the file system is
 * nearly full.  Then another program needs 96 MiB for its own file.
 * With the entries marked volatile the library punches the oldest ones
 * as the writer takes the space below the reserve (16 MiB here), the
 * writer gets all it asked for, and the cache learns which entries it
 * lost at its next lookup (VRANGE_PURGED).  Without the marks the writer
 * fails with ENOSPC.
 *
 *   disk_cache              run both and print them side by side
 *
 * Needs root, mkfs.ext4 and loop devices; exits 77 when it cannot make
 * the file system, 1 when the volatile run's writer did not get its space.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#define MIB (1u << 20)
#define WANT_MIB 96

struct result {
	unsigned int entries, lost;  /* cache entries stored, found purged */
	unsigned int writer_mib;     /* what the writer got */
	int writer_errno;            /* 0, or why it stopped */
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The other program: WANT_MIB MiB in 1 MiB writes, retrying ENOSPC for
 * up to three seconds (as a patient downloader would). */
static int writer(const char *dir)
{
	char path[256], *buf = malloc(MIB);
	unsigned int got = 0;
	double since = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/download", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || !buf)
		return 100;
	memset(buf, 0xd0, MIB);
	while (got < WANT_MIB) {
		ssize_t n = pwrite(fd, buf, MIB, (off_t)got * MIB);

		if (n == MIB) {
			got++;
			since = 0;
			continue;
		}
		if (n >= 0 || errno != ENOSPC)
			break;
		fsync(fd); /* ext4 reuses freed blocks after a commit */
		if (!since)
			since = now();
		else if (now() - since > 3)
			break;
		usleep(20000);
	}
	printf("%u\n", got);
	fflush(stdout);
	return got == WANT_MIB ? 0 : ENOSPC;
}

static int run(const char *dir, bool vol, struct result *res)
{
	char path[256], line[32] = "", *buf = malloc(MIB);
	struct statvfs sv;
	unsigned int n = 0;
	int fd, p[2], st;
	pid_t pid;

	memset(res, 0, sizeof(*res));
	snprintf(path, sizeof(path), "%s/cache-%s", dir, vol ? "volatile" : "plain");
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || !buf || statvfs(dir, &sv) < 0)
		return -1;
	if (vol)
		vrange_set_disk_reserve(dir, 16 * MIB);
	/* fill: entries until 8 MiB are left */
	for (;; n++) {
		memset(buf, (int)(n & 0xff), MIB);
		if (statvfs(dir, &sv) < 0 || (uint64_t)sv.f_bavail * sv.f_frsize < 8 * MIB ||
		    pwrite(fd, buf, MIB, (off_t)n * MIB) != MIB)
			break;
		/* an entry the cache could fetch again: volatile while unused */
		if (vol)
			vrange_fd_mark_volatile(fd, (off_t)n * MIB, MIB);
	}
	fsync(fd);
	res->entries = n;
	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		_exit(writer(dir));
	}
	close(p[1]);
	if (read(p[0], line, sizeof(line) - 1) < 0)
		line[0] = 0;
	close(p[0]);
	waitpid(pid, &st, 0);
	res->writer_mib = (unsigned int)strtoul(line, NULL, 10);
	res->writer_errno = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	/* the cache looks its entries up again */
	for (unsigned int i = 0; vol && i < n; i++)
		res->lost += vrange_fd_mark_nonvolatile(fd, (off_t)i * MIB, MIB) == VRANGE_PURGED;
	if (vol)
		vrange_fd_forget(fd);
	close(fd);
	unlink(path);
	snprintf(path, sizeof(path), "%s/download", dir);
	unlink(path);
	free(buf);
	return 0;
}

int main(void)
{
	char dir[64], img[80], cmd[512];
	struct result v, pl;
	int rc = 0;

	if (geteuid() != 0) {
		fprintf(stderr, "disk_cache: needs root for a loop mount\n");
		return 77;
	}
	snprintf(dir, sizeof(dir), "/tmp/vrange-disk-cache-%d", (int)getpid());
	snprintf(img, sizeof(img), "%s.img", dir);
	snprintf(cmd, sizeof(cmd),
		 "truncate -s 256M %s && mkfs.ext4 -q -F -b 4096 -m 0 %s >/dev/null 2>&1 && "
		 "mkdir -p %s && mount -o loop %s %s", img, img, dir, img, dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "disk_cache: cannot make an ext4 file system here\n");
		snprintf(cmd, sizeof(cmd), "rm -f %s; rmdir %s 2>/dev/null", img, dir);
		if (system(cmd) != 0)
			fprintf(stderr, "disk_cache: cleanup failed\n");
		return 77;
	}
	if (run(dir, true, &v) < 0 || run(dir, false, &pl) < 0) {
		fprintf(stderr, "disk_cache: %s\n", strerror(errno));
		rc = 1;
	}
	snprintf(cmd, sizeof(cmd), "umount %s && rmdir %s && rm -f %s", dir, dir, img);
	if (system(cmd) != 0)
		fprintf(stderr, "disk_cache: cleanup of %s failed\n", dir);
	if (rc)
		return rc;
	printf("                       cache entries   writer wanted   writer got   entries lost\n");
	printf("  volatile entries        %5u MiB       %5u MiB      %5u MiB   %5u (VRANGE_PURGED)\n",
	       v.entries, WANT_MIB, v.writer_mib, v.lost);
	printf("  plain entries           %5u MiB       %5u MiB      %5u MiB   %s\n",
	       pl.entries, WANT_MIB, pl.writer_mib,
	       pl.writer_errno == ENOSPC ? "  -  (writer: ENOSPC)" : "  -");
	return v.writer_mib == WANT_MIB ? 0 : 1;
}
