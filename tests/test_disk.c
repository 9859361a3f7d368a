/* SPDX-License-Identifier: MIT */
/*
 * test_disk.c - volatile ranges on files of real file systems (contract 9)
 * against ext4, xfs and btrfs images this program makes itself: sparse
 * files, mkfs, loop mounts under unique directories in /tmp (root only;
 * each file system is skipped with its reason where it cannot be made).
 *
 * Every case runs in its own forked process (CK_FORK); the mounts are made
 * once, in the runner's process (an unchecked fixture), and every case
 * runs on each file system that could be mounted.  Processes that must
 * not share the case's library state (a "later process") are forked
 * before the case touches the library and exec nothing: they use the file
 * through its path only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

#define NFS 3
struct tfs {
	const char *type;
	char img[128], dir[128];
	char loopdev[64];
	bool mounted;
	char why[160];
};
static struct tfs fss[NFS] = { { .type = "ext4" }, { .type = "xfs" }, { .type = "btrfs" } };
static size_t ps;

static int run(const char *cmd)
{
	int st = system(cmd);

	return st == 0 ? 0 : -1;
}

static int fs_mount(struct tfs *f)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "mount -o loop %s %s 2>/dev/null", f->img, f->dir);
	return run(cmd);
}

static int fs_umount(struct tfs *f)
{
	for (int i = 0; i < 50; i++) {
		if (umount(f->dir) == 0)
			return 0;
		usleep(100000);
	}
	return -1;
}

static void make_fs(struct tfs *f)
{
	char cmd[512];
	const char *mkfs;
	int fd;

	snprintf(f->img, sizeof(f->img), "/tmp/vrange-disk-%d-%s.img", (int)getpid(), f->type);
	snprintf(f->dir, sizeof(f->dir), "/tmp/vrange-disk-%d-%s", (int)getpid(), f->type);
	if (geteuid() != 0) {
		snprintf(f->why, sizeof(f->why), "not root: no loop mounts");
		return;
	}
	mkfs = strcmp(f->type, "ext4") == 0 ? "mkfs.ext4 -q -F -b 4096" :
	       strcmp(f->type, "xfs") == 0 ? "mkfs.xfs -q -f" : "mkfs.btrfs -q -f";
	snprintf(cmd, sizeof(cmd), "command -v mkfs.%s >/dev/null 2>&1", f->type);
	if (run(cmd) < 0) {
		snprintf(f->why, sizeof(f->why), "mkfs.%s is not installed", f->type);
		return;
	}
	fd = open(f->img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	/* 320 MiB: xfs wants 300 MiB at least; sparse, so it costs nothing */
	if (fd < 0 || ftruncate(fd, 320 << 20) < 0) {
		snprintf(f->why, sizeof(f->why), "cannot make %s", f->img);
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	snprintf(cmd, sizeof(cmd), "%s %s >/dev/null 2>&1", mkfs, f->img);
	if (run(cmd) < 0 || mkdir(f->dir, 0755) < 0) {
		snprintf(f->why, sizeof(f->why), "mkfs.%s failed", f->type);
		unlink(f->img);
		return;
	}
	if (fs_mount(f) < 0) {
		snprintf(f->why, sizeof(f->why), "loop mount of %s failed", f->type);
		rmdir(f->dir);
		unlink(f->img);
		return;
	}
	f->mounted = true;
}

static void setup_all(void)
{
	bool one = getenv("VRANGE_UNDER_VALGRIND") != NULL;

	ps = (size_t)sysconf(_SC_PAGESIZE);
	for (int i = 0; i < NFS; i++) {
		/* under valgrind one file system is enough (and a third of
		 * the time): the library's code is the same on each */
		if (one && i > 0 && fss[0].mounted) {
			snprintf(fss[i].why, sizeof(fss[i].why), "valgrind: ext4 only");
			continue;
		}
		make_fs(&fss[i]);
	}
}

static void teardown_all(void)
{
	for (int i = 0; i < NFS; i++) {
		if (!fss[i].mounted)
			continue;
		fs_umount(&fss[i]);
		rmdir(fss[i].dir);
		unlink(fss[i].img);
		fss[i].mounted = false;
	}
}

/* Files a failed case left behind ("<name>-<pid>"): removed, so that one
 * failure does not fill the file system under every later case. */
static void remove_leftovers(const struct tfs *f)
{
	DIR *d = opendir(f->dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		const char *dash = strrchr(e->d_name, '-');
		char path[400];

		if (e->d_type != DT_REG || !dash || !dash[1] ||
		    strspn(dash + 1, "0123456789") != strlen(dash + 1))
			continue;
		snprintf(path, sizeof(path), "%s/%s", f->dir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
}

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
	for (const struct tfs *f = fss; f < fss + NFS; f++)
		if (f->mounted)
			remove_leftovers(f);
}

static unsigned char fill_byte(size_t i)
{
	return (unsigned char)(0x11 + i * 7);
}

/* A file of npages pages at path, page i filled with fill_byte(i), synced
 * (so the blocks are allocated on every file system). */
static int make_file(const char *path, size_t npages)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	unsigned char *buf = malloc(ps);

	ck_assert_int_ge(fd, 0);
	ck_assert_ptr_nonnull(buf);
	for (size_t i = 0; i < npages; i++) {
		memset(buf, fill_byte(i), ps);
		ck_assert_int_eq(pwrite(fd, buf, ps, (off_t)(i * ps)), (ssize_t)ps);
	}
	ck_assert_int_eq(fsync(fd), 0);
	free(buf);
	return fd;
}

/* 1 if every byte of page pg is b. */
static int page_all(int fd, size_t pg, unsigned char b)
{
	unsigned char *buf = malloc(ps);
	int ok;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pread(fd, buf, ps, (off_t)(pg * ps)), (ssize_t)ps);
	ok = 1;
	for (size_t i = 0; i < ps; i++)
		if (buf[i] != b)
			ok = 0;
	free(buf);
	return ok;
}

static uint64_t blocks_of(int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

static void path_in(const struct tfs *f, const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s/%s-%d", f->dir, name, (int)getpid());
}

/* make_file() at path_in(f, name): the usual start of a case. */
static int make_file_in(const struct tfs *f, const char *name, size_t npages,
			char path[static 256])
{
	path_in(f, name, path, 256);
	return make_file(path, npages);
}

/* Run fn(f, arg) in a forked process that has not used the library on
 * anything of the case; its exit status (0 = passed). */
static int in_child(int (*fn)(const struct tfs *f, const char *path), const struct tfs *f,
		    const char *path)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(fn(f, path));
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* Run one case on every mounted file system: fn returns 1 where it ran, 0
 * where it does not apply; the test is skipped where it ran nowhere. */
static void on_each_fs(int (*fn)(const struct tfs *f), const char *name,
		       const char *none)
{
	int ran = 0;

	for (const struct tfs *f = fss; f < fss + NFS; f++) {
		if (!f->mounted)
			fprintf(stderr, "SKIP %s on %s: %s\n", name, f->type, f->why);
		else
			ran |= fn(f);
	}
	if (!ran)
		TEST_SKIP("%s", none);
}

#define DISK_TEST(name, none)                                                   \
	START_TEST(name)                                                        \
	{                                                                       \
		on_each_fs(name##_on, #name, none);                             \
	}                                                                       \
	END_TEST

static int errors_on(const struct tfs *f)
{
	char path[256];
	int fd, ro, dfd, p[2];

	fd = make_file_in(f, "err", 8, path);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(ro, 0);
	/* not open for writing: as fallocate(2) */
	ck_assert_int_eq(vrange_fd_mark_volatile(ro, 0, (off_t)ps), -EBADF);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(ro, 0, (off_t)ps), -EBADF);
	ck_assert_int_eq(vrange_fd_is_volatile(ro, 0, (off_t)ps), -EBADF);
	/* a directory, a pipe */
	dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(dfd, 0, (off_t)ps), -EOPNOTSUPP);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(p[1], 0, (off_t)ps), -EOPNOTSUPP);
	/* rounding and bounds as for shared memory */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, -1, (off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(9 * ps)), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, 0), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 1, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 1, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)ps, 1), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, 1), 0);
	/* the read-only descriptor of a file with state: still -EBADF */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(ro, 0, (off_t)ps), -EBADF);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(3 * ps)),
			 VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(p[0]);
	close(p[1]);
	close(dfd);
	close(ro);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(errors, "no file system could be mounted")

/* A file system that does not punch (ramfs, as root): -EOPNOTSUPP. */
static void ramfs_not_punchable(void)
{
	char dir[128], path[160];
	int fd;

	snprintf(dir, sizeof(dir), "/tmp/vrange-ramfs-%d", (int)getpid());
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	if (mount("none", dir, "ramfs", 0, NULL) == 0) {
		snprintf(path, sizeof(path), "%s/f", dir);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ftruncate(fd, (off_t)(4 * ps)), 0);
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), -EOPNOTSUPP);
		close(fd);
		umount(dir);
	} else {
		fprintf(stderr, "SKIP ramfs: %s\n", strerror(errno));
	}
	rmdir(dir);
}

/* What does not punch: /proc files, devices, ramfs. */
START_TEST(errors_not_punchable)
{
	static const struct {
		const char *path;
		int flags;
	} files[] = {
		{"/proc/self/status", O_RDONLY},
		{"/proc/self/comm", O_RDWR},
		{"/dev/null", O_RDWR},
	};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		int fd = open(files[i].path, files[i].flags | O_CLOEXEC);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, 1), -EOPNOTSUPP);
		close(fd);
	}
	if (geteuid() == 0)
		ramfs_not_punchable();
}
END_TEST

/* The later process of purge_roundtrip: sees PURGED, then INTACT. */
static int later_unmark(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	(void)f;
	if (fd < 0)
		return 10;
	if (vrange_fd_mark_nonvolatile(fd, (off_t)(4 * ps), (off_t)(4 * ps)) != VRANGE_PURGED)
		return 11;
	if (vrange_fd_mark_nonvolatile(fd, (off_t)(4 * ps), (off_t)(4 * ps)) != VRANGE_INTACT)
		return 12;
	if (!page_all(fd, 4, 0) || !page_all(fd, 3, fill_byte(3)))
		return 13;
	return 0;
}

static int purge_roundtrip_on(const struct tfs *f)
{
	char path[256];
	uint64_t before, after;
	struct vrange_stats s;
	ssize_t freed;
	off_t hole;
	int fd, st;

	fd = make_file_in(f, "rt", 64, path);
	before = blocks_of(fd);
	/* pages 4..11 and 20..23 volatile (rounded inward) */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(4 * ps - 1),
						 (off_t)(8 * ps + 2)), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(20 * ps), (off_t)(4 * ps)), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(3 * ps), (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(4 * ps), 1), 1);
	ck_assert_int_eq(vrange_get_stats(&s), 0);
	ck_assert_uint_eq(s.disk_volatile_bytes, 12 * ps);
	/* memory purges take only what is in the page cache: none */
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(20 * ps), (off_t)ps),
			 VRANGE_INTACT);
	/* oldest first: 4..11 was marked first, and goes as one */
	freed = vrange_purge_disk(f->dir, 8 * ps);
	ck_assert_int_ge(freed, (ssize_t)(8 * ps));
	after = blocks_of(fd);
	ck_assert_uint_lt(after, before);
	hole = lseek(fd, 0, SEEK_HOLE);
	ck_assert_int_eq(hole, (off_t)(4 * ps));
	ck_assert_int_eq(lseek(fd, hole, SEEK_DATA), (off_t)(12 * ps));
	ck_assert_int_eq(vrange_get_stats(&s), 0);
	ck_assert_uint_ge(s.disk_purged_bytes, 8 * ps);
	ck_assert_uint_ge(s.disk_freed_total, 8 * ps);
	ck_assert_str_eq(s.disk_unpunchable_why, "");
	/* another process, through the path: PURGED, then forgotten */
	st = in_child(later_unmark, f, path);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child %d",
		      f->type, st);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(4 * ps), (off_t)ps),
			 VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(5 * ps), (off_t)(7 * ps)),
			 VRANGE_PURGED);
	vrange_fd_mark_nonvolatile(fd, (off_t)(20 * ps), (off_t)(4 * ps));
	for (size_t pg = 5; pg < 12; pg++)
		ck_assert(page_all(fd, pg, 0));
	ck_assert(page_all(fd, 12, fill_byte(12)));
	ck_assert_int_eq(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(purge_roundtrip, "no file system could be mounted")

/* Memory purges punch a disk file's volatile pages where they are in the
 * page cache (clean or dirty), and leave the others volatile and whole.
 * purged_cost counts what was punched, not what was put back. */
static int memory_purge_takes_cached_pages_on(const struct tfs *f)
{
	char path[256];
	unsigned char *b = malloc(ps);
	struct vrange_stats s0, s1, s2;
	ssize_t freed;
	int fd;

	fd = make_file_in(f, "mem", 32, path);
	/* pages 0..15 leave the page cache; 24..31 become dirty */
	ck_assert_int_eq(posix_fadvise(fd, 0, (off_t)(16 * ps), POSIX_FADV_DONTNEED), 0);
	for (size_t pg = 24; pg < 32; pg++) {
		memset(b, fill_byte(pg), ps);
		ck_assert_int_eq(pwrite(fd, b, ps, (off_t)(pg * ps)), (ssize_t)ps);
	}
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(32 * ps)), 0);
	ck_assert_int_eq(vrange_get_stats(&s0), 0);
	freed = vrange_purge(SIZE_MAX);
	ck_assert_int_eq(vrange_get_stats(&s1), 0);
	ck_assert_int_ge(freed, (ssize_t)(16 * ps));
	ck_assert_int_le(freed, (ssize_t)(16 * ps + 4 * ps)); /* readahead */
	/* cost 1: the pages punched, each once */
	ck_assert_uint_eq(s1.purged_cost - s0.purged_cost,
			  (s1.disk_purged_bytes - s0.disk_purged_bytes) / ps);
	ck_assert_uint_lt(s1.purged_cost - s0.purged_cost, 32);
	/* the cached half went, the rest is volatile still */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(12 * ps)), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(16 * ps), (off_t)(16 * ps)),
			 VRANGE_PURGED);
	for (size_t pg = 16; pg < 32; pg++)
		ck_assert(page_all(fd, pg, 0));
	/* a disk purge takes the rest, which the memory pass put back */
	ck_assert_int_gt(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	ck_assert_int_eq(vrange_get_stats(&s2), 0);
	ck_assert_uint_eq(s2.purged_cost - s0.purged_cost, 32); /* each page once */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(16 * ps)),
			 VRANGE_PURGED);
	free(b);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(memory_purge_takes_cached_pages, "no file system could be mounted")

/* vrange() on the application's own MAP_SHARED mapping of a disk file
 * works as on the file; the mapping reads zeros where a range was punched. */
static int vrange_on_a_mapping_on(const struct tfs *f)
{
	char path[256];
	unsigned char *m;
	int fd, purged = -1;

	fd = make_file_in(f, "map", 16, path);
	m = mmap(NULL, 16 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	ck_assert_int_eq(vrange(m + 4 * ps, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(4 * ps), (off_t)ps), 1);
	ck_assert_int_gt(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	ck_assert_int_eq(vrange(m + 4 * ps, 4 * ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	for (size_t i = 4 * ps; i < 8 * ps; i += 512)
		ck_assert_uint_eq(m[i], 0);
	ck_assert_uint_eq(m[3 * ps], fill_byte(3));
	ck_assert_uint_eq(m[8 * ps], fill_byte(8));
	/* another page through the file, back through the mapping */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(10 * ps), (off_t)ps), 0);
	ck_assert_int_eq(vrange(m + 10 * ps, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);
	ck_assert_uint_eq(m[10 * ps], fill_byte(10));
	munmap(m, 16 * ps);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(vrange_on_a_mapping, "no file system could be mounted")

/* Where the record cannot hold more, nothing more is punched, the pages
 * stay volatile and whole, and the stats say why; a malformed record
 * counts as every page purged. */
static int record_full_and_malformed_on(const struct tfs *f)
{
	char path[256];
	struct vrange_stats s;
	size_t npg = 400, punched = 0, intact = 0;
	int fd;

	fd = make_file_in(f, "full", npg, path);
	/* 200 separate pages: more runs than a record holds (120) */
	for (size_t pg = 0; pg < npg; pg += 2)
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(pg * ps),
							 (off_t)ps), 0);
	vrange_purge_disk(f->dir, SIZE_MAX);
	ck_assert_int_eq(vrange_get_stats(&s), 0);
	ck_assert_uint_eq(s.disk_unpunchable, 1);
	ck_assert_str_eq(s.disk_unpunchable_why, "its record of punched ranges is full");
	for (size_t pg = 0; pg < npg; pg += 2) {
		int r = vrange_fd_mark_nonvolatile(fd, (off_t)(pg * ps), (off_t)ps);

		if (r == VRANGE_PURGED) {
			punched++;
			ck_assert(page_all(fd, pg, 0));
		} else {
			ck_assert_int_eq(r, VRANGE_INTACT);
			ck_assert(page_all(fd, pg, fill_byte(pg)));
			intact++;
		}
	}
	ck_assert_uint_gt(punched, 0);
	ck_assert_uint_le(punched, 120);
	ck_assert_uint_gt(intact, 0);
	/* reported, the record is empty again: punching resumes */
	ck_assert_int_eq(vrange_get_stats(&s), 0);
	ck_assert_uint_eq(s.disk_unpunchable, 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(1 * ps), (off_t)ps), 0);
	/* one block out of a fragmented file may free nothing net (an
	 * extent split): the hole is what counts */
	ck_assert_int_ge(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(1 * ps), (off_t)ps),
			 VRANGE_PURGED);
	ck_assert(page_all(fd, 1, 0));
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
	unlink(path);

	/* a record that is not ours: every page counts as purged */
	fd = make_file_in(f, "bad", 4, path);
	ck_assert_int_eq(fsetxattr(fd, "user.vrange.purged", "garbage", 7, 0), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(3 * ps), (off_t)ps),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	ck_assert(page_all(fd, 0, fill_byte(0)));
	ck_assert_int_eq(vrange_get_stats(&s), 0);
	ck_assert_uint_eq(s.disk_unpunchable, 1);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(record_full_and_malformed, "no file system could be mounted")

/* Sectors the loop device under dir has written (its stat, field 7); 0 if
 * it cannot be read. */
static uint64_t written_sectors(const char *dir)
{
	char cmd[256], dev[64] = "", path[128];
	unsigned long long v[7] = { 0 };
	FILE *p;

	snprintf(cmd, sizeof(cmd), "findmnt -n -o SOURCE %s", dir);
	p = popen(cmd, "r");
	if (!p)
		return 0;
	if (!fgets(dev, sizeof(dev), p))
		dev[0] = 0;
	pclose(p);
	dev[strcspn(dev, "\n")] = 0;
	if (!strrchr(dev, '/'))
		return 0;
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

/* ext4 drops dirty pages it punches without writing them: the record's
 * own path to the disk must not write them first (fsync of the file
 * would: 16 MiB here).  xfs and btrfs write dirty pages back before any
 * punch, so only ext4 is asked. */
static int dirty_pages_not_written_back_on(const struct tfs *f)
{
	char path[256];
	uint64_t w0, w1;
	char *buf;
	int fd;

	if (strcmp(f->type, "ext4") != 0)
		return 0;
	path_in(f, "dirty", path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	/* the record's first write and commit, before measuring */
	ck_assert_int_eq(ftruncate(fd, (off_t)ps), 0);
	ck_assert_int_eq(fsync(fd), 0);
	sync();
	buf = malloc(16 << 20);
	ck_assert_ptr_nonnull(buf);
	memset(buf, 0x3c, 16 << 20);
	ck_assert_int_eq(pwrite(fd, buf, 16 << 20, 0), 16 << 20);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, 16 << 20), 0);
	w0 = written_sectors(f->dir);
	if (!w0) {
		fprintf(stderr, "SKIP %s: no loop device counter\n", __func__);
		free(buf);
		close(fd);
		unlink(path);
		return 0;
	}
	ck_assert_int_gt(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	sync();
	w1 = written_sectors(f->dir);
	fprintf(stderr, "%s: 16 MiB of dirty volatile pages punched: %.1f MiB written\n",
		f->type, (double)(w1 - w0) * 512 / (1 << 20));
	ck_assert_uint_lt((w1 - w0) * 512, 4u << 20);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, 16 << 20), VRANGE_PURGED);
	free(buf);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(dirty_pages_not_written_back, "no ext4 file system could be mounted")

/* Marks pages 2..9, purges them, and is killed by the library's test hook
 * after the record is durable and before the punch. */
static int killed_purger(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return 10;
	setenv("VRANGE_TEST_KILL_AFTER_RECORD", "1", 1);
	if (vrange_fd_mark_volatile(fd, (off_t)(2 * ps), (off_t)(8 * ps)) != 0)
		return 11;
	vrange_purge_disk(f->dir, SIZE_MAX);
	return 12; /* not reached: the hook kills */
}

/* Marks pages 2..9, purges them for good, exits. */
static int purger(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return 10;
	if (vrange_fd_mark_volatile(fd, (off_t)(2 * ps), (off_t)(8 * ps)) != 0)
		return 11;
	if (vrange_purge_disk(f->dir, SIZE_MAX) <= 0)
		return 12;
	return 0;
}

/* After the remount: pages 2..9 PURGED once, the rest INTACT and whole. */
static int after_remount(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	(void)f;
	if (fd < 0)
		return 10;
	/* recorded pages are purged, and purged pages count as volatile
	 * until they are marked non-volatile (contract 1) */
	if (vrange_fd_is_volatile(fd, 0, (off_t)(2 * ps)) != 0 ||
	    vrange_fd_is_volatile(fd, (off_t)(10 * ps), (off_t)(6 * ps)) != 0 ||
	    vrange_fd_is_volatile(fd, (off_t)(2 * ps), (off_t)ps) != 1)
		return 11;
	if (vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)) != VRANGE_INTACT)
		return 12;
	if (vrange_fd_mark_nonvolatile(fd, (off_t)(9 * ps), (off_t)ps) != VRANGE_PURGED)
		return 13;
	if (vrange_fd_mark_nonvolatile(fd, 0, (off_t)(16 * ps)) != VRANGE_PURGED)
		return 14;
	if (vrange_fd_mark_nonvolatile(fd, 0, (off_t)(16 * ps)) != VRANGE_INTACT)
		return 15;
	for (size_t pg = 0; pg < 16; pg++)
		if (pg < 2 || pg >= 10 ? !page_all(fd, pg, fill_byte(pg)) : 0)
			return 16;
	return 0;
}

/* Pages 2..9 were punched: zeros. */
static int zeros_there(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	(void)f;
	for (size_t pg = 2; pg < 10; pg++)
		if (fd < 0 || !page_all(fd, pg, 0))
			return 20;
	return 0;
}

static void remount(const struct tfs *f)
{
	ck_assert_int_eq(fs_umount((struct tfs *)f), 0);
	ck_assert_int_eq(fs_mount((struct tfs *)f), 0);
}

static int crash_and_remount_on(const struct tfs *f)
{
	char path[256];
	int fd, st;

	fd = make_file_in(f, "crash", 16, path);
	close(fd);
	/* killed between the durable record and the punch */
	st = in_child(killed_purger, f, path);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: %d", f->type, st);
	remount(f);
	st = in_child(after_remount, f, path);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: after kill %d",
		      f->type, st);
	/* purged for good, then unmounted and mounted again */
	st = in_child(purger, f, path);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: purger %d", f->type, st);
	remount(f);
	st = in_child(zeros_there, f, path);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: zeros %d", f->type, st);
	/* the rest is intact (the file was rewritten nowhere) */
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	for (size_t pg = 2; pg < 10; pg++) {
		unsigned char *b = malloc(ps);

		memset(b, fill_byte(pg), ps);
		ck_assert_int_eq(pwrite(fd, b, ps, (off_t)(pg * ps)), (ssize_t)ps);
		free(b);
	}
	close(fd);
	st = in_child(after_remount, f, path);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: after purge %d",
		      f->type, st);
	unlink(path);
	return 1;
}
DISK_TEST(crash_and_remount, "no file system could be mounted")

/* Marks pages 0..7 volatile and exits: the marks end with it. */
static int marker(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	(void)f;
	if (fd < 0 || vrange_fd_mark_volatile(fd, 0, (off_t)(8 * ps)) != 0)
		return 10;
	return 0;
}

static int marks_end_with_last_holder_on(const struct tfs *f)
{
	char path[256];
	int fd, st;

	fd = make_file_in(f, "last", 8, path);
	st = in_child(marker, f, path);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(8 * ps)), 0);
	ck_assert_int_eq(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(8 * ps)),
			 VRANGE_INTACT);
	for (size_t pg = 0; pg < 8; pg++)
		ck_assert(page_all(fd, pg, fill_byte(pg)));
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(marks_end_with_last_holder, "no file system could be mounted")

static int rename_over_is_another_file_on(const struct tfs *f)
{
	char path[256], tmp[280];
	int fd, nfd;

	path_in(f, "ren", path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	fd = make_file(path, 8);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(8 * ps)), 0);
	ck_assert_int_gt(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	/* a new file renamed over the old name */
	nfd = make_file(tmp, 8);
	ck_assert_int_eq(rename(tmp, path), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(nfd, 0, (off_t)(8 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(nfd, 0, (off_t)(8 * ps)),
			 VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_mark_volatile(nfd, 0, (off_t)(8 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(nfd, 0, (off_t)(8 * ps)),
			 VRANGE_INTACT);
	/* the old file still knows what it lost */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(8 * ps)),
			 VRANGE_PURGED);
	close(fd);
	/* unlinked and recreated under the same name */
	ck_assert_int_eq(vrange_fd_mark_volatile(nfd, 0, (off_t)(8 * ps)), 0);
	ck_assert_int_gt(vrange_purge_disk(f->dir, SIZE_MAX), 0);
	close(nfd);
	ck_assert_int_eq(unlink(path), 0);
	fd = make_file(path, 8);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(8 * ps)),
			 VRANGE_INTACT);
	close(fd);
	unlink(path);
	return 1;
}
DISK_TEST(rename_over_is_another_file, "no file system could be mounted")

/* A cache of bytes (whole MiB) at path: written, synced, and each MiB
 * entry marked volatile in turn, oldest first.  Its descriptor. */
static int volatile_cache(const char *path, uint64_t bytes, const char *buf)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	ck_assert_int_ge(fd, 0);
	for (uint64_t o = 0; o < bytes; o += 1 << 20)
		ck_assert_int_eq(pwrite(fd, buf, 1 << 20, (off_t)o), 1 << 20);
	ck_assert_int_eq(fsync(fd), 0);
	for (uint64_t o = 0; o < bytes; o += 1 << 20)
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)o, 1 << 20), 0);
	return fd;
}

/* The end of a space test: what a space purge of the cache at cpath (cfd,
 * bytes) reports - its oldest entry punched, its newest intact - and the
 * cache and the writer's file (wfd at wpath) gone. */
static void end_space_test(int cfd, uint64_t bytes, const char *cpath, int wfd,
			   const char *wpath)
{
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(cfd, 0, 1 << 20), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(cfd, (off_t)(bytes - (1 << 20)), 1 << 20),
			 VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_forget(cfd), 0);
	close(cfd);
	close(wfd);
	unlink(cpath);
	unlink(wpath);
}

/*
 * The file system fills up before anything was ever punched: the record
 * must still be written (xfs refuses every attribute change on a full
 * file system, ext4 one that needs a block), from the room the library
 * keeps for it, and the punch then gives the space to the writer.
 */
/*
 * fork() while another thread takes and lets go of disk files: the child
 * must find no lock of the disk layer held by a thread it does not have
 * (the room's lock is held across a close or a commit).  Each child
 * marks a disk file of its own (it takes room) and exits; one stuck
 * shows as a child that does not exit.
 */
struct churn {
	int fd;
	_Atomic bool stop;
	_Atomic int failed; /* what failed; no assertion in the loop: Check's
			     * would hold its own lock across the forks */
};

static void *churn_files(void *arg)
{
	struct churn *c = arg;

	while (!atomic_load(&c->stop) && !atomic_load(&c->failed))
		if (vrange_fd_mark_volatile(c->fd, 0, (off_t)ps) != 0 ||
		    vrange_fd_forget(c->fd) != 0)
			atomic_store(&c->failed, 1);
	return NULL;
}

/* The child's own file: no Check assertion after fork (its lock may be
 * another thread's). */
static int child_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	return fd >= 0 && ftruncate(fd, (off_t)(2 * ps)) == 0 ? fd : -1;
}

static int fork_while_files_come_and_go_on(const struct tfs *f)
{
	struct churn c = { 0 };
	struct timespec t0, t1;
	char path[256], cpath[256];
	pthread_t th;
	int forks = 0, stuck = 0;

	path_in(f, "forked", path, sizeof(path));
	c.fd = make_file_in(f, "churn", 4, cpath);
	ck_assert_int_eq(pthread_create(&th, NULL, churn_files, &c), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		pid_t pid = fork();
		int status = 0;

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int fd = child_file(path);

			_exit(fd >= 0 && vrange_fd_mark_volatile(fd, 0, (off_t)ps) == 0 &&
			      vrange_fd_forget(fd) == 0 ? 0 : 1);
		}
		/* 10 s for a child that takes milliseconds (even inside
		 * fork(), in the library's handlers) */
		for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
			usleep(10000);
		if (waitpid(pid, &status, WNOHANG) == 0) {
			kill(pid, SIGKILL);
			ck_assert_int_eq(waitpid(pid, &status, 0), pid);
			stuck++;
		} else {
			ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		forks++;
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while (t1.tv_sec - t0.tv_sec < 2 && !stuck);
	atomic_store(&c.stop, true);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(atomic_load(&c.failed), 0);
	close(c.fd);
	unlink(cpath);
	unlink(path);
	if (stuck)
		ck_abort_msg("%s: a child was stuck after %d forks", f->type, forks);
	return 1;
}
START_TEST(fork_while_files_come_and_go)
{
	/* valgrind checks each child for leaks at its exit and counts the
	 * child's copy of an allocation another thread had under way at the
	 * fork as lost */
	if (getenv("VRANGE_UNDER_VALGRIND"))
		TEST_SKIP("valgrind counts a forked child's copy of another thread's "
			  "allocation under way as lost (runs in the plain and "
			  "sanitizer builds)");
	on_each_fs(fork_while_files_come_and_go_on, "fork_while_files_come_and_go",
		   "no file system could be mounted");
}
END_TEST

/* What disk_room.h keeps (DISK_ROOM_BYTES). */
#define DISK_ROOM (1u << 20)

static int full_file_system_still_punches_on(const struct tfs *f)
{
	char cpath[256], wpath[256];
	struct statvfs sv;
	struct vrange_stats st;
	uint64_t avail, cache_bytes;
	char *buf = malloc(1 << 20);
	ssize_t freed;
	int cfd, wfd;

	ck_assert_ptr_nonnull(buf);
	memset(buf, 0x5a, 1 << 20);
	path_in(f, "full-cache", cpath, sizeof(cpath));
	path_in(f, "full-writer", wpath, sizeof(wpath));
	ck_assert_int_eq(statvfs(f->dir, &sv), 0);
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	cache_bytes = (avail / 2) & ~(uint64_t)((1 << 20) - 1);
	cfd = volatile_cache(cpath, cache_bytes, buf);
	/* full: to the last block the writer can have */
	wfd = open(wpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(wfd, 0);
	while (write(wfd, buf, 1 << 20) > 0)
		;
	while (write(wfd, buf, 4096) > 0)
		;
	ck_assert_int_eq(errno, ENOSPC);
	fsync(wfd);
	freed = vrange_purge_disk(f->dir, 8 << 20);
	ck_assert_int_eq(vrange_get_stats(&st), 0);
	if (freed < (8 << 20))
		fprintf(stderr, "%s: freed %zd; %llu files unpunchable%s%s\n", f->type,
			freed, (unsigned long long)st.disk_unpunchable,
			st.disk_unpunchable_why[0] ? ": " : "", st.disk_unpunchable_why);
	ck_assert_int_ge(freed, 8 << 20);
	ck_assert_uint_eq(st.disk_unpunchable, 0);
	/* The space is the file system's again once the punch is committed,
	 * less the room the library takes back, and the writer's.  Not on
	 * btrfs: an extent is freed only when no part of it is referenced,
	 * and the cache's were written a MiB at a time. */
	ck_assert_int_eq(syncfs(cfd), 0);
	ck_assert_int_eq(statvfs(f->dir, &sv), 0);
	if (strcmp(f->type, "btrfs") != 0) {
		/* f_bfree: the writer, root, ate into ext4's reserved blocks */
		ck_assert_uint_ge((uint64_t)sv.f_bfree * sv.f_frsize + DISK_ROOM, 8 << 20);
		if (write(wfd, buf, 1 << 20) != 1 << 20)
			ck_abort_msg("%s: freed %zd, and a write of 1 MiB still fails: %s",
				     f->type, freed, strerror(errno));
	}
	end_space_test(cfd, cache_bytes, cpath, wfd, wpath);
	free(buf);
	return 1;
}
DISK_TEST(full_file_system_still_punches, "no file system could be mounted")

/* The reserve: a cache fills most of the file system and is volatile; a
 * writer then needs the space and gets it, through the worker alone. */
static int reserve_gives_space_to_a_writer_on(const struct tfs *f)
{
	char cpath[256], wpath[256];
	struct statvfs sv;
	uint64_t avail, cache_bytes, want, wrote = 0;
	struct timespec t0, t1;
	char *buf;
	int cfd, wfd;
	double secs = 0;
	/* A bound on liveness, not a speed goal: valgrind runs every thread
	 * one at a time, the reserve worker among them. */
	double limit = getenv("VRANGE_UNDER_VALGRIND") ? 60 : 10;

	/* btrfs updates f_bavail only at a transaction commit (30 s):
	 * the worker cannot see the writer in time (design.md). */
	if (strcmp(f->type, "btrfs") == 0) {
		fprintf(stderr, "SKIP %s on btrfs: f_bavail lags by a commit interval\n",
			__func__);
		return 0;
	}
	path_in(f, "cache", cpath, sizeof(cpath));
	path_in(f, "writer", wpath, sizeof(wpath));
	ck_assert_int_eq(statvfs(f->dir, &sv), 0);
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	cache_bytes = (avail - (avail / 8)) & ~(uint64_t)((1 << 20) - 1);
	buf = malloc(1 << 20);
	ck_assert_ptr_nonnull(buf);
	memset(buf, 0x5a, 1 << 20);
	ck_assert_int_eq(vrange_set_disk_reserve(f->dir, 16 << 20), 0);
	cfd = volatile_cache(cpath, cache_bytes, buf);
	/* the writer wants half the file system */
	want = cache_bytes / 2;
	wfd = open(wpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(wfd, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (wrote < want && secs < limit) {
		size_t len = (1 << 20) - (wrote & ((1 << 20) - 1));
		ssize_t n = pwrite(wfd, buf, len, (off_t)wrote);

		if (n > 0) {
			wrote += (uint64_t)n;
			if ((wrote & ((8 << 20) - 1)) < (uint64_t)n)
				fsync(wfd);
		} else {
			ck_assert_int_eq(errno, ENOSPC);
			fsync(wfd);
			usleep(20000);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	}
	fprintf(stderr, "%s: writer got %llu of %llu MiB in %.2f s\n", f->type,
		(unsigned long long)(wrote >> 20), (unsigned long long)(want >> 20),
		secs);
	if (wrote < want) {
		/* What the worker did.  Seen under valgrind and the
		 * sanitizers, stuck at 49 of 114 MiB, before disk_room.c: the
		 * writer filled the file system before the worker's first
		 * record, which the file system then refused. */
		struct vrange_stats st;

		if (vrange_get_stats(&st) == 0)
			fprintf(stderr, "%s: %llu disk passes freed %llu MiB; %llu MiB "
				"volatile, %llu MiB punched; %llu files unpunchable%s%s\n",
				f->type, (unsigned long long)st.disk_purges,
				(unsigned long long)(st.disk_freed_total >> 20),
				(unsigned long long)(st.disk_volatile_bytes >> 20),
				(unsigned long long)(st.disk_purged_bytes >> 20),
				(unsigned long long)st.disk_unpunchable,
				st.disk_unpunchable_why[0] ? ": " : "",
				st.disk_unpunchable_why);
	}
	ck_assert_uint_ge(wrote, want);
	/* what was punched is reported, oldest first */
	end_space_test(cfd, cache_bytes, cpath, wfd, wpath);
	free(buf);
	return 1;
}
DISK_TEST(reserve_gives_space_to_a_writer, "no file system could be mounted")

/*
 * SIGKILL at random moments.  Two processes mark random ranges of one file
 * volatile and purge its file system, over and over; both are killed at a
 * random moment, the file system is unmounted and mounted again, and a
 * fresh process asks page by page: no page that reads zeros (or lies in a
 * hole) may be VRANGE_INTACT.  The purgers never unmark (an application
 * told VRANGE_PURGED that dies before it rewrites has lost that knowledge:
 * the contract forgets a page once reported).
 */
#define KILL_PAGES 64

/* A purger says here that its first purge is done (a slow start under
 * valgrind must not use up the time before the kill). */
static int started_fd = -1;

static int kill_purger(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	unsigned int seed = (unsigned int)getpid() * 2654435761u;

	if (fd < 0)
		return 10;
	if (vrange_fd_mark_volatile(fd, 0, (off_t)ps) != 0)
		return 11;
	vrange_purge_disk(f->dir, ps);
	if (write(started_fd, "s", 1) != 1)
		return 12;
	for (;;) {
		size_t a = (size_t)rand_r(&seed) % KILL_PAGES;
		size_t n = 1 + (size_t)rand_r(&seed) % 8;

		if (a + n > KILL_PAGES)
			n = KILL_PAGES - a;
		if (vrange_fd_mark_volatile(fd, (off_t)(a * ps), (off_t)(n * ps)) != 0)
			return 11;
		if (rand_r(&seed) % 2)
			vrange_purge_disk(f->dir, (1 + (size_t)rand_r(&seed) % 8) * ps);
	}
}

/* The fresh process after the remount: exit 0, counts on stdout's pipe. */
static int kill_check(const struct tfs *f, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	unsigned char *buf = malloc(ps);
	unsigned int purged = 0, intact = 0;

	(void)f;
	if (fd < 0 || !buf)
		return 10;
	for (size_t pg = 0; pg < KILL_PAGES; pg++) {
		int r = vrange_fd_mark_nonvolatile(fd, (off_t)(pg * ps), (off_t)ps);
		off_t hole = lseek(fd, (off_t)(pg * ps), SEEK_HOLE);
		bool zeros = true, whole = true;

		if (r < 0 || pread(fd, buf, ps, (off_t)(pg * ps)) != (ssize_t)ps)
			return 11;
		for (size_t i = 0; i < ps; i++) {
			zeros &= buf[i] == 0;
			whole &= buf[i] == fill_byte(pg);
		}
		if (r == VRANGE_INTACT && (!whole || hole == (off_t)(pg * ps))) {
			fprintf(stderr, "%s: page %zu INTACT but %s\n", f->type, pg,
				zeros ? "zeros" : "changed");
			return 12;
		}
		purged += r == VRANGE_PURGED;
		intact += r == VRANGE_INTACT;
		if (!whole) { /* the application rebuilds it */
			memset(buf, fill_byte(pg), ps);
			if (pwrite(fd, buf, ps, (off_t)(pg * ps)) != (ssize_t)ps)
				return 13;
		}
	}
	free(buf);
	if (fsync(fd) < 0)
		return 14;
	printf("%u %u\n", purged, intact);
	fflush(stdout); /* the caller leaves by _exit */
	return 0;
}

/*
 * A power cut at this instant, as far as the file system can tell: ext4
 * and xfs shut down without flushing their log (EXT4_IOC_SHUTDOWN and
 * XFS_IOC_GOINGDOWN share the number and the NOLOGFLUSH flag), so what was
 * not committed is lost, as on a power cut; the next mount replays the
 * log.  false where the file system has no such call (btrfs).
 */
#ifndef FS_SHUTDOWN_IOC
#define FS_SHUTDOWN_IOC _IOR('X', 125, uint32_t)
#endif
#define FS_SHUTDOWN_NOLOGFLUSH 0x2

static bool power_cut(const struct tfs *f)
{
	uint32_t how = FS_SHUTDOWN_NOLOGFLUSH;
	int fd, r;

	if (strcmp(f->type, "ext4") != 0 && strcmp(f->type, "xfs") != 0)
		return false;
	fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	r = ioctl(fd, FS_SHUTDOWN_IOC, &how);
	close(fd);
	return r == 0;
}

static int random_kills_on(const struct tfs *f)
{
	int rounds = test_quick() ? 3 : 8;
	unsigned int seed = 12345;
	unsigned int purged = 0, intact = 0;
	char path[256];
	int fd, cuts = 0;

	fd = make_file_in(f, "kill", KILL_PAGES, path);
	close(fd);
	for (int k = 0; k < rounds; k++) {
		pid_t a, b;
		int st, p[2], s[2];
		bool cut;
		char line[64] = "";
		unsigned int pu, in;
		ssize_t n;

		ck_assert_int_eq(pipe(s), 0);
		started_fd = s[1];
		a = fork();
		ck_assert_int_ge(a, 0);
		if (a == 0)
			_exit(kill_purger(f, path));
		b = fork();
		ck_assert_int_ge(b, 0);
		if (b == 0)
			_exit(kill_purger(f, path));
		close(s[1]);
		for (int got = 0; got < 2;) {
			n = read(s[0], line, 2);
			ck_assert_int_gt(n, 0);
			got += (int)n;
		}
		close(s[0]);
		usleep(1000 + (useconds_t)(rand_r(&seed) % 40000));
		/* odd rounds: a power cut first, at this instant */
		cut = k % 2 && power_cut(f);
		cuts += cut;
		kill(a, SIGKILL);
		usleep((useconds_t)(rand_r(&seed) % 5000));
		kill(b, SIGKILL);
		ck_assert_int_eq(waitpid(a, &st, 0), a);
		/* after a cut, a call may fail first (EIO): then it exits */
		ck_assert_msg(WIFSIGNALED(st) || cut, "%s: purger a %d", f->type, st);
		ck_assert_int_eq(waitpid(b, &st, 0), b);
		ck_assert_msg(WIFSIGNALED(st) || cut, "%s: purger b %d", f->type, st);
		remount(f);
		ck_assert_int_eq(pipe(p), 0);
		a = fork();
		ck_assert_int_ge(a, 0);
		if (a == 0) {
			dup2(p[1], STDOUT_FILENO);
			_exit(kill_check(f, path));
		}
		close(p[1]);
		n = read(p[0], line, sizeof(line) - 1);
		close(p[0]);
		ck_assert_int_eq(waitpid(a, &st, 0), a);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "%s: kill %d: check %d", f->type, k, st);
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(sscanf(line, "%u %u", &pu, &in), 2);
		purged += pu;
		intact += in;
	}
	fprintf(stderr, "%s: %d rounds of two kills (%d after a power cut): %u pages "
		"found purged, %u intact and verified\n", f->type, rounds, cuts, purged,
		intact);
	ck_assert_uint_gt(purged, 0);
	unlink(path);
	return 1;
}
DISK_TEST(random_kills, "no file system could be mounted")

Suite *test_suite(void)
{
	Suite *s = suite_create("disk");
	TCase *tc = tcase_create("disk");

	tcase_add_unchecked_fixture(tc, setup_all, teardown_all);
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, errors);
	tcase_add_test(tc, errors_not_punchable);
	tcase_add_test(tc, purge_roundtrip);
	tcase_add_test(tc, memory_purge_takes_cached_pages);
	tcase_add_test(tc, crash_and_remount);
	tcase_add_test(tc, marks_end_with_last_holder);
	tcase_add_test(tc, rename_over_is_another_file);
	tcase_add_test(tc, full_file_system_still_punches);
	tcase_add_test(tc, fork_while_files_come_and_go);
	tcase_add_test(tc, reserve_gives_space_to_a_writer);
	tcase_add_test(tc, random_kills);
	tcase_add_test(tc, dirty_pages_not_written_back);
	tcase_add_test(tc, vrange_on_a_mapping);
	tcase_add_test(tc, record_full_and_malformed);
	suite_add_tcase(s, tc);
	return s;
}
