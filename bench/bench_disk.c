/* SPDX-License-Identifier: MIT */
/*
 * bench_disk.c - volatile ranges on disk files (contract 9), per file
 * system (loop-mounted ext4, xfs, btrfs images made here; root only):
 *
 *   pair     mark/unmark of one page of a disk file vs of a memfd
 *   purge    vrange_purge_disk of 64 ranges of 1 MiB (clean data, the
 *            durable record included) vs a raw fallocate(PUNCH_HOLE) loop
 *            over the same ranges of the same file
 *   dirty    32 MiB written, not synced, marked volatile and purged: MiB the
 *            loop device wrote (its stat counter), vs a raw punch of the
 *            same dirty data and vs writing it back (fsync)
 *   reserve  a writer at about 200 MB/s takes free space below the reserve:
 *            ms until the worker has it back above
 *
 * Ratios against baselines measured in the same run; nothing asserts.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "bench_util.h"

#define MIB (1u << 20)

static size_t ps;

static int sh(const char *cmd)
{
	return system(cmd) == 0 ? 0 : -1;
}

static bool make_fs(const char *type, char *dir, size_t n, char *img, size_t m)
{
	char cmd[1024];

	snprintf(img, m, "/tmp/vrange-bench-disk-%d-%s.img", (int)getpid(), type);
	snprintf(dir, n, "/tmp/vrange-bench-disk-%d-%s", (int)getpid(), type);
	snprintf(cmd, sizeof(cmd),
		 "command -v mkfs.%s >/dev/null && truncate -s 1G %s && "
		 "mkfs.%s %s %s >/dev/null 2>&1 && mkdir -p %s && mount -o loop %s %s",
		 type, img, type,
		 type[0] == 'e' ? "-q -F -b 4096" : "-q -f", img, dir, img, dir);
	if (sh(cmd) < 0) {
		printf("%-6s skipped: cannot make and mount it\n", type);
		unlink(img);
		rmdir(dir);
		return false;
	}
	return true;
}

static void drop_fs(const char *dir, const char *img)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "umount %s; rmdir %s; rm -f %s", dir, dir, img);
	if (sh(cmd) < 0)
		fprintf(stderr, "cleanup of %s failed\n", dir);
}

/* Sectors the loop device under dir has written (its stat, field 7). */
static uint64_t written_sectors(const char *dir)
{
	char cmd[256], dev[64] = "", path[128];
	unsigned long long v[8] = { 0 };
	FILE *p;

	snprintf(cmd, sizeof(cmd), "findmnt -n -o SOURCE %s", dir);
	p = popen(cmd, "r");
	if (!p || !fgets(dev, sizeof(dev), p)) {
		if (p)
			pclose(p);
		return 0;
	}
	pclose(p);
	dev[strcspn(dev, "\n")] = 0;
	snprintf(path, sizeof(path), "/sys/block/%s/stat", strrchr(dev, '/') + 1);
	p = fopen(path, "r");
	if (!p)
		return 0;
	if (fscanf(p, "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6]) != 7)
		v[6] = 0;
	fclose(p);
	return v[6];
}

static int fill(const char *path, size_t bytes, bool sync_it)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char *buf = malloc(MIB);

	if (fd < 0 || !buf)
		die("open", errno);
	memset(buf, 0x6b, MIB);
	for (size_t o = 0; o < bytes; o += MIB)
		if (pwrite(fd, buf, MIB, (off_t)o) != MIB)
			die("pwrite", errno);
	if (sync_it && fsync(fd) < 0)
		die("fsync", errno);
	free(buf);
	return fd;
}

static double pair_ns(int fd, int n)
{
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		off_t o = (off_t)((size_t)(i % 256) * ps);

		if (vrange_fd_mark_volatile(fd, o, (off_t)ps) < 0 ||
		    vrange_fd_mark_nonvolatile(fd, o, (off_t)ps) < 0)
			die("pair", EIO);
	}
	return (now_ns() - t0) / n;
}

static void bench_fs(const char *type)
{
	char dir[128], img[128], path[256];
	int fd, mfd, n = 200000;
	double disk, mem, lib, raw;
	uint64_t w0, w1, wlib, wraw, wsync;

	if (!make_fs(type, dir, sizeof(dir), img, sizeof(img)))
		return;
	snprintf(path, sizeof(path), "%s/cache", dir);

	/* pair */
	fd = fill(path, MIB, true);
	mfd = memfd_create("bench", MFD_CLOEXEC);
	if (mfd < 0 || ftruncate(mfd, MIB) < 0)
		die("memfd", errno);
	pair_ns(fd, 1000);
	pair_ns(mfd, 1000);
	disk = pair_ns(fd, n);
	mem = pair_ns(mfd, n);
	printf("%-6s pair: disk file %.0f ns, memfd %.0f ns: %.2fx\n", type, disk, mem,
	       disk / mem);
	vrange_fd_forget(fd);
	close(fd);
	close(mfd);

	/* purge throughput, clean data: the best of five of each */
	lib = raw = 1e18;
	for (int rep = 0; rep < 5; rep++) {
		double t;

		fd = fill(path, 64 * MIB, true);
		for (int i = 0; i < 64; i++)
			vrange_fd_mark_volatile(fd, (off_t)i * MIB, MIB);
		t = now_ns();
		if (vrange_purge_disk(dir, SIZE_MAX) <= 0)
			die("vrange_purge_disk", EIO);
		t = now_ns() - t;
		lib = t < lib ? t : lib;
		vrange_fd_mark_nonvolatile(fd, 0, 64 * MIB);
		vrange_fd_forget(fd);
		close(fd);
		fd = fill(path, 64 * MIB, true);
		t = now_ns();
		for (int i = 0; i < 64; i++)
			if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				      (off_t)i * MIB, MIB) < 0)
				die("fallocate", errno);
		t = now_ns() - t;
		raw = t < raw ? t : raw;
		close(fd);
	}
	printf("%-6s purge 64 MiB in 64 ranges (best of 5): library %.2f ms, raw punch "
	       "%.2f ms: throughput %.2fx of raw\n", type, lib / 1e6, raw / 1e6, raw / lib);

	/* dirty data: what reaches the device */
	sync();
	fd = fill(path, 32 * MIB, false);
	vrange_fd_mark_volatile(fd, 0, 32 * MIB);
	w0 = written_sectors(dir);
	vrange_purge_disk(dir, SIZE_MAX);
	sync();
	w1 = written_sectors(dir);
	wlib = (w1 - w0) * 512;
	vrange_fd_mark_nonvolatile(fd, 0, 32 * MIB);
	vrange_fd_forget(fd);
	close(fd);
	sync();
	fd = fill(path, 32 * MIB, false);
	w0 = written_sectors(dir);
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 32 * MIB) < 0)
		die("fallocate", errno);
	sync();
	wraw = (written_sectors(dir) - w0) * 512;
	close(fd);
	sync();
	fd = fill(path, 32 * MIB, false);
	w0 = written_sectors(dir);
	fsync(fd);
	sync();
	wsync = (written_sectors(dir) - w0) * 512;
	close(fd);
	printf("%-6s dirty 32 MiB purged: device wrote %.1f MiB (library), %.1f MiB "
	       "(raw punch), %.1f MiB (written back)\n", type, wlib / (double)MIB,
	       wraw / (double)MIB, wsync / (double)MIB);
	unlink(path);

	/* reserve reaction under a writer at ~200 MB/s */
	if (strcmp(type, "btrfs") != 0) {
		struct statvfs sv;
		uint64_t reserve = 64 * MIB, avail, cache;
		char wpath[256];
		char *buf = malloc(2 * MIB);
		double crossed = 0, back = 0, t;
		int wfd;

		statvfs(dir, &sv);
		avail = (uint64_t)sv.f_bavail * sv.f_frsize;
		cache = (avail - 2 * reserve) & ~(uint64_t)(MIB - 1);
		fd = fill(path, cache, true);
		vrange_set_disk_reserve(dir, reserve);
		for (uint64_t o = 0; o < cache; o += MIB)
			vrange_fd_mark_volatile(fd, (off_t)o, MIB);
		snprintf(wpath, sizeof(wpath), "%s/writer", dir);
		wfd = open(wpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		memset(buf, 1, 2 * MIB);
		t = now_ns();
		for (uint64_t o = 0; now_ns() - t < 5e9; o += 2 * MIB) {
			if (pwrite(wfd, buf, 2 * MIB, (off_t)o) < 0)
				break;
			statvfs(dir, &sv);
			avail = (uint64_t)sv.f_bavail * sv.f_frsize;
			if (!crossed && avail < reserve)
				crossed = now_ns();
			if (crossed && avail >= reserve) {
				back = now_ns();
				break;
			}
			usleep(10000); /* 2 MiB per 10 ms */
		}
		if (back)
			printf("%-6s reserve: back above %llu MiB %.0f ms after the writer "
			       "crossed it\n", type, (unsigned long long)(reserve / MIB),
			       (back - crossed) / 1e6);
		else
			printf("%-6s reserve: %s\n", type,
			       crossed ? "not back within 5 s" : "the writer never crossed it");
		vrange_fd_forget(fd);
		close(fd);
		close(wfd);
		free(buf);
	} else {
		printf("%-6s reserve: not measured (f_bavail follows transaction "
		       "commits, every 30 s)\n", type);
	}
	drop_fs(dir, img);
}

int main(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	if (geteuid() != 0) {
		printf("bench_disk: skipped, needs root for loop mounts\n");
		return 0;
	}
	bench_fs("ext4");
	bench_fs("xfs");
	bench_fs("btrfs");
	return 0;
}
