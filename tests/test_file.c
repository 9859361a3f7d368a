/* SPDX-License-Identifier: MIT */
/*
 * test_file.c - the file layer (contract section 1, the conventions, and the
 * matching fixed details of section 6), checked sentence by sentence against
 * real memfds, tmpfs files and the purge engine.
 *
 * Every case runs in its own forked process (CK_FORK), so the library's
 * process-wide state (purge order, counters) starts empty in each.  Pages are
 * always written before they are marked volatile: a purge frees allocated
 * pages, so only touched pages are certain to be discarded.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

/* A memfd of npages pages, page i filled with byte fill_byte(i). */
static unsigned char fill_byte(size_t i)
{
	return (unsigned char)(0x11 + i * 7);
}

static int make_memfd(size_t npages)
{
	int fd = memfd_create("test-file", MFD_CLOEXEC);
	unsigned char *buf;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(npages * ps)), 0);
	buf = malloc(ps);
	ck_assert_ptr_nonnull(buf);
	for (size_t i = 0; i < npages; i++) {
		memset(buf, fill_byte(i), ps);
		ck_assert_int_eq(pwrite(fd, buf, ps, (off_t)(i * ps)), (ssize_t)ps);
	}
	free(buf);
	return fd;
}

/* 1 if every byte of page pg of fd is b (read through the file). */
static int page_all(int fd, size_t pg, unsigned char b)
{
	unsigned char *buf = malloc(ps);
	int ok = 1;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pread(fd, buf, ps, (off_t)(pg * ps)), (ssize_t)ps);
	for (size_t i = 0; i < ps; i++)
		if (buf[i] != b) {
			ok = 0;
			break;
		}
	free(buf);
	return ok;
}

static int page_intact(int fd, size_t pg)
{
	return page_all(fd, pg, fill_byte(pg));
}

static int page_zero(int fd, size_t pg)
{
	return page_all(fd, pg, 0);
}

static long long blocks(int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return (long long)st.st_blocks;
}

static long long pages_blocks(size_t npages)
{
	return (long long)(npages * ps / 512);
}

static struct vrange_stats stats(void)
{
	struct vrange_stats s;

	ck_assert_int_eq(vrange_get_stats(&s), 0);
	return s;
}

static int is_vol(int fd, size_t pg)
{
	return vrange_fd_is_volatile(fd, (off_t)(pg * ps), (off_t)ps);
}

/* ---- version ---------------------------------------------------------- */

START_TEST(version_format)
{
	const char *v = vrange_version();
	unsigned int a, b, c;
	char tail;

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(sscanf(v, "%u.%u.%u%c", &a, &b, &c, &tail), 3);
	ck_assert_ptr_eq(vrange_version(), v);
}
END_TEST

/* ---- the basic cycle -------------------------------------------------- */

/* mark_nonvolatile with no purge in between: VRANGE_INTACT, bytes as left. */
START_TEST(mark_unmark_intact)
{
	int fd = make_memfd(4);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(4 * ps)), 0);
	for (size_t i = 0; i < 4; i++)
		ck_assert_int_eq(is_vol(fd, i), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(4 * ps)),
			 VRANGE_INTACT);
	for (size_t i = 0; i < 4; i++) {
		ck_assert_int_eq(is_vol(fd, i), 0);
		ck_assert(page_intact(fd, i));
	}
	close(fd);
}
END_TEST

/* A purge discards volatile pages (the file reads zeros there, every
 * mapping of it too); mark_nonvolatile then says VRANGE_PURGED once, and
 * forgets it: the next report on the same range is VRANGE_INTACT. */
START_TEST(purge_reports_purged_once)
{
	int fd = make_memfd(4);
	unsigned char *m1, *m2;

	m1 = mmap(NULL, 4 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	m2 = mmap(NULL, 4 * ps, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m1, MAP_FAILED);
	ck_assert_ptr_ne(m2, MAP_FAILED);
	ck_assert_int_eq(m2[ps], fill_byte(1));

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));

	/* Purged pages read zeros through the fd and through both mappings. */
	ck_assert(page_intact(fd, 0));
	ck_assert(page_zero(fd, 1));
	ck_assert(page_zero(fd, 2));
	ck_assert(page_intact(fd, 3));
	for (size_t i = ps; i < 3 * ps; i++) {
		ck_assert_int_eq(m1[i], 0);
		ck_assert_int_eq(m2[i], 0);
	}
	ck_assert_int_eq(m1[0], fill_byte(0));
	ck_assert_int_eq(m2[3 * ps], fill_byte(3));

	/* Purged pages are still volatile until marked non-volatile. */
	ck_assert_int_eq(is_vol(fd, 1), 1);
	ck_assert_int_eq(is_vol(fd, 2), 1);

	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, (off_t)(2 * ps)),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, (off_t)(2 * ps)),
			 VRANGE_INTACT);
	ck_assert_int_eq(is_vol(fd, 1), 0);

	/* The pages are usable again and a new cycle without purge is intact. */
	m1[ps] = 0x5a;
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, (off_t)(2 * ps)),
			 VRANGE_INTACT);
	ck_assert_int_eq(m2[ps], 0x5a);
	munmap(m1, 4 * ps);
	munmap(m2, 4 * ps);
	close(fd);
}
END_TEST

/* VRANGE_PURGED only for a range that contains a purged page. */
START_TEST(purged_only_where_purged)
{
	int fd = make_memfd(4);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	/* Marked after the purge: not purged. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, (off_t)ps),
			 VRANGE_INTACT);
	ck_assert(page_intact(fd, 1));
	/* Never volatile at all. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(2 * ps), (off_t)(2 * ps)),
			 VRANGE_INTACT);
	/* A range covering the purged page among others. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(4 * ps)),
			 VRANGE_PURGED);
	close(fd);
}
END_TEST

/* "A purged page stays purged until it is marked non-volatile": marking it
 * volatile again does not clear the purge. */
START_TEST(purged_stays_purged_across_remark)
{
	int fd = make_memfd(2);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(is_vol(fd, 0), 1);
	/* Only page 1 is asked about: it was purged too. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, (off_t)ps),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)),
			 VRANGE_INTACT);
	close(fd);
}
END_TEST

/* Purge never touches non-volatile pages, even when asked for everything. */
START_TEST(purge_spares_nonvolatile)
{
	int fd = make_memfd(5);
	long long before = blocks(fd);
	ssize_t freed;

	ck_assert_int_eq(before, pages_blocks(5));
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(3 * ps), (off_t)ps), 0);
	freed = vrange_purge(SIZE_MAX);
	ck_assert_int_eq(freed, (ssize_t)(2 * ps));
	ck_assert_int_eq(blocks(fd), before - pages_blocks(2));
	ck_assert(page_intact(fd, 0));
	ck_assert(page_zero(fd, 1));
	ck_assert(page_intact(fd, 2));
	ck_assert(page_zero(fd, 3));
	ck_assert(page_intact(fd, 4));
	/* Nothing volatile left to purge. */
	ck_assert_int_eq(vrange_purge(SIZE_MAX), 0);
	ck_assert(page_intact(fd, 0));
	close(fd);
}
END_TEST

/* Memory is given back for real: st_blocks of the file drops. */
START_TEST(purge_releases_memory)
{
	const size_t n = 512; /* 2 MiB with 4 KiB pages */
	int fd = make_memfd(n);

	ck_assert_int_eq(blocks(fd), pages_blocks(n));
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(n * ps)), 0);
	ck_assert_int_eq(blocks(fd), pages_blocks(n)); /* marking frees nothing */
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(n * ps));
	ck_assert_int_eq(blocks(fd), 0);
	close(fd);
}
END_TEST

/* vrange_purge(bytes) frees at least bytes and stops there, oldest first. */
START_TEST(purge_bytes_partial)
{
	const size_t n = 8;
	int fd = make_memfd(n);
	ssize_t freed;

	/* One range per page, marked 0, 1, 2, ... (oldest first). */
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(i * ps), (off_t)ps), 0);
	/* A partial page asks for a whole one. */
	freed = vrange_purge(1);
	ck_assert_int_eq(freed, (ssize_t)ps);
	ck_assert(page_zero(fd, 0));
	ck_assert(page_intact(fd, 1));
	freed = vrange_purge(3 * ps);
	ck_assert_int_eq(freed, (ssize_t)(3 * ps));
	ck_assert(page_zero(fd, 1));
	ck_assert(page_zero(fd, 3));
	ck_assert(page_intact(fd, 4));
	ck_assert_int_eq(blocks(fd), pages_blocks(n - 4));
	/* More than is volatile: everything volatile, and the real count. */
	freed = vrange_purge(1000 * ps);
	ck_assert_int_eq(freed, (ssize_t)(4 * ps));
	ck_assert_int_eq(blocks(fd), 0);
	close(fd);
}
END_TEST

/* vrange_purge(0) returns 0 and discards nothing. */
START_TEST(purge_zero)
{
	int fd = make_memfd(2);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_purge(0), 0);
	ck_assert_int_eq(blocks(fd), pages_blocks(2));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)),
			 VRANGE_INTACT);
	ck_assert(page_intact(fd, 0));
	close(fd);
}
END_TEST

/* ---- order ------------------------------------------------------------- */

/* Least recently marked first, across files. */
START_TEST(order_oldest_first_across_files)
{
	int a = make_memfd(1), b = make_memfd(1), c = make_memfd(1);

	ck_assert_int_eq(vrange_fd_mark_volatile(b, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(a, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(c, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(page_zero(b, 0));
	ck_assert(page_intact(a, 0));
	ck_assert(page_intact(c, 0));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(page_zero(a, 0));
	ck_assert(page_intact(c, 0));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(c, 0, (off_t)ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(a, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(b, 0, (off_t)ps), VRANGE_PURGED);
	close(a);
	close(b);
	close(c);
}
END_TEST

/* Least recently marked first within one file, whatever the offsets. */
START_TEST(order_oldest_first_in_file)
{
	int fd = make_memfd(4);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(3 * ps), (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(1 * ps), (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(2 * ps), (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(page_zero(fd, 3));
	ck_assert(page_intact(fd, 1));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(page_zero(fd, 1));
	ck_assert(page_intact(fd, 2));
	ck_assert(page_intact(fd, 0));
	close(fd);
}
END_TEST

/* Marking an already-volatile page again keeps it volatile and makes it the
 * most recently marked. */
START_TEST(remark_refreshes_age)
{
	int a = make_memfd(1), b = make_memfd(1);

	ck_assert_int_eq(vrange_fd_mark_volatile(a, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(b, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(a, 0, (off_t)ps), 0);
	ck_assert_int_eq(is_vol(a, 0), 1);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(page_zero(b, 0));
	ck_assert(page_intact(a, 0));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(a, 0, (off_t)ps), VRANGE_INTACT);
	close(a);
	close(b);
}
END_TEST

/* Re-marking part of an old range refreshes only that part. */
START_TEST(remark_part_refreshes_part)
{
	int fd = make_memfd(3), other = make_memfd(1);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(3 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(other, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)ps), 0);
	/* Old: pages 0 and 2; then other; then page 1. */
	ck_assert_int_eq(vrange_purge(2 * ps), (ssize_t)(2 * ps));
	ck_assert(page_zero(fd, 0));
	ck_assert(page_zero(fd, 2));
	ck_assert(page_intact(fd, 1));
	ck_assert(page_intact(other, 0));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(page_zero(other, 0));
	ck_assert(page_intact(fd, 1));
	close(fd);
	close(other);
}
END_TEST

/*
 * The library keeps a descriptor of its own for every file it punches.  An
 * application that closes that number by mistake (a double close) and
 * opens another file there must not see a purge punch that other file.
 */
START_TEST(purge_never_punches_reused_descriptor)
{
	int fd = make_memfd(2), other = make_memfd(2), lib = -1;
	struct stat st, o;

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	for (int i = 0; i < 1024 && lib < 0; i++)
		if (i != fd && fstat(i, &o) == 0 && o.st_dev == st.st_dev &&
		    o.st_ino == st.st_ino)
			lib = i;
	ck_assert_msg(lib >= 0, "the library's own descriptor of the file not found");
	/* The application's double close, then a new file in that number. */
	ck_assert_int_eq(dup2(other, lib), lib);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), 0);
	ck_assert(page_intact(other, 0));
	ck_assert(page_intact(other, 1));
	/* What was volatile is not reported intact. */
	ck_assert_int_ge(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)), 0);
	close(fd);
	close(other);
}
END_TEST

/* ---- sharing: state belongs to the file -------------------------------- */

START_TEST(shared_through_dup)
{
	int fd = make_memfd(2);
	int d = dup(fd);

	ck_assert_int_ge(d, 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(is_vol(d, 0), 1);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(d, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert_int_eq(is_vol(fd, 0), 0);
	ck_assert_int_eq(is_vol(fd, 1), 1);
	/* Closing the fd that marked does not lose the state. */
	close(fd);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(d, (off_t)ps, (off_t)ps),
			 VRANGE_PURGED);
	close(d);
}
END_TEST

START_TEST(shared_through_proc_reopen)
{
	int fd = make_memfd(2);
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(r, 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(r, 0, (off_t)ps), 0);
	ck_assert_int_eq(is_vol(fd, 0), 1);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)ps), 0);
	ck_assert_int_eq(is_vol(r, 1), 1);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(r, (off_t)ps, (off_t)ps),
			 VRANGE_PURGED);
	/* One file counted once. */
	ck_assert_uint_eq(stats().files, 1);
	close(r);
	close(fd);
}
END_TEST

/* A tmpfs file in /dev/shm, opened twice by name. */
START_TEST(shared_dev_shm_file)
{
	char path[64];
	int a, b;

	snprintf(path, sizeof(path), "/dev/shm/vrange-test-%d", (int)getpid());
	a = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (a < 0)
		TEST_SKIP("cannot create %s: %s", path, strerror(errno));
	unlink(path);
	ck_assert_int_eq(ftruncate(a, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(pwrite(a, "x", 1, 0), 1);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a);
	b = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(b, 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(a, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(b, 1, 1), 1);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(b, 0, (off_t)(2 * ps)),
			 VRANGE_PURGED);
	close(a);
	close(b);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(bad_fd)
{
	int closed = memfd_create("closed", MFD_CLOEXEC);

	ck_assert_int_ge(closed, 0);
	close(closed);
	int fds[] = { -1, -100, closed, INT_MAX };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		int fd = fds[i];

		ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), -EBADF);
		ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), -EBADF);
		ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)ps), -EBADF);
		ck_assert_int_eq(vrange_fd_forget(fd), -EBADF);
	}
	ck_assert_uint_eq(stats().files, 0);
}
END_TEST

/*
 * The very first library call of a process, on an fd the caller has just
 * closed, is -EBADF.  Start-up (the monitor) opens descriptors of its own;
 * the lowest free number is the one just closed, so a library that started
 * up before it looked at the caller's fd examined its own file instead.
 * Each entry point runs first in a fresh child with the monitor enabled.
 */
static int first_call(int which, int fd)
{
	vrange_region *r = NULL;

	switch (which) {
	case 0: return vrange_fd_mark_volatile(fd, 0, (off_t)ps);
	case 1: return vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps);
	case 2: return vrange_fd_is_volatile(fd, 0, (off_t)ps);
	case 3: return vrange_fd_forget(fd);
	default: return vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r);
	}
}

START_TEST(bad_fd_first_call)
{
	static const char *const names[] = { "fd_mark_volatile",
		"fd_mark_nonvolatile", "fd_is_volatile", "fd_forget",
		"region_adopt" };

	for (int which = 0; which < 5; which++) {
		int status, r;
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int fd = memfd_create("closed", MFD_CLOEXEC);

			setenv("VRANGE_MONITOR", "1", 1);
			if (fd < 0 || ftruncate(fd, (off_t)ps) < 0)
				_exit(100);
			close(fd);
			r = first_call(which, fd);
			_exit(r == -EBADF ? 0 : r < 0 && r > -100 ? -r : 101);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "first call %s on a closed fd: %s %d", names[which],
			      WIFEXITED(status) ? "returned -" : "signal",
			      WIFEXITED(status) ? WEXITSTATUS(status)
						: WTERMSIG(status));
	}
}
END_TEST

static void expect_notsup(int fd, const char *what)
{
	int r;

	r = vrange_fd_mark_volatile(fd, 0, 1);
	ck_assert_msg(r == -EOPNOTSUPP, "%s: mark_volatile %d", what, r);
	r = vrange_fd_mark_volatile(fd, 0, 0);
	ck_assert_msg(r == -EOPNOTSUPP || r == 0, "%s: mark_volatile len 0 %d", what, r);
	r = vrange_fd_mark_nonvolatile(fd, 0, 1);
	ck_assert_msg(r == -EOPNOTSUPP, "%s: mark_nonvolatile %d", what, r);
	r = vrange_fd_is_volatile(fd, 0, 1);
	ck_assert_msg(r == -EOPNOTSUPP, "%s: is_volatile %d", what, r);
	/* Never state for such a file: -ENOENT (no state) or -EOPNOTSUPP. */
	r = vrange_fd_forget(fd);
	ck_assert_msg(r == -ENOENT || r == -EOPNOTSUPP, "%s: forget %d", what, r);
}

/* Anything but a shared-memory file or a disk file of a file system that
 * punches holes (contract 9: tests/test_disk.c) is -EOPNOTSUPP. */
START_TEST(not_shmem)
{
	char path[] = "/var/tmp/vrange-test-XXXXXX";
	int p[2], sv[2], fd, r;

	/* A regular file on a disk file system: taken where it punches; a
	 * half page rounds to nothing. */
	fd = mkstemp(path);
	if (fd >= 0) {
		unlink(path);
		ck_assert_int_eq(ftruncate(fd, (off_t)(4 * ps)), 0);
		r = vrange_fd_mark_volatile(fd, 0, 1);
		ck_assert_msg(r == 0 || r == -EOPNOTSUPP, "disk file: %d", r);
		close(fd);
	}
	ck_assert_int_eq(pipe(p), 0);
	expect_notsup(p[0], "pipe read end");
	expect_notsup(p[1], "pipe write end");
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	expect_notsup(sv[0], "socket");
	close(sv[0]);
	close(sv[1]);
	fd = open("/dev/null", O_RDWR);
	ck_assert_int_ge(fd, 0);
	expect_notsup(fd, "/dev/null");
	close(fd);
	fd = open("/proc/self/status", O_RDONLY);
	ck_assert_int_ge(fd, 0);
	expect_notsup(fd, "procfs file");
	close(fd);
	/* A directory on tmpfs is not a shared-memory file either. */
	fd = open("/dev/shm", O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		expect_notsup(fd, "tmpfs directory");
		close(fd);
	}
	ck_assert_uint_eq(stats().files, 0);
}
END_TEST

START_TEST(negative_off_len)
{
	int fd = make_memfd(2);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, -1, (off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, -1), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, -(off_t)ps, (off_t)(2 * ps)), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, -1, (off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, -(off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, -1, 1), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, -1), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(2 * ps)), 0);
	close(fd);
}
END_TEST

/* A range past the end of the file or whose off + len overflows is -EINVAL,
 * and nothing changes. */
START_TEST(past_end_and_overflow)
{
	int fd = make_memfd(4);
	off_t size = (off_t)(4 * ps);
	const off_t max = (off_t)INT64_MAX;

	/* Ending exactly at the end is fine. */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, size), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, size - 1, 1), 0);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, size), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, size, (off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 100 * size, 1), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, max, max), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 1, max), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, max, 1), -EINVAL);
	/* Nothing was made volatile by the failed calls. */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, size), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), 0);
	for (size_t i = 0; i < 4; i++)
		ck_assert(page_intact(fd, i));

	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, max, max), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, size, 1), -EINVAL);

	/* A failing mark_nonvolatile leaves volatile pages volatile. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, size), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, max), -EINVAL);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, max, max), -EINVAL);
	for (size_t i = 0; i < 4; i++)
		ck_assert_int_eq(is_vol(fd, i), 1);
	/* And a failing mark_volatile over volatile pages keeps them so. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, size + (off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, size), 1);
	close(fd);
}
END_TEST

/* The end of the file is its current size: growing it widens what can be
 * marked, and past the new end is still -EINVAL. */
START_TEST(size_follows_file)
{
	int fd = make_memfd(1);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)ps), -EINVAL);
	ck_assert_int_eq(ftruncate(fd, (off_t)(3 * ps)), 0);
	ck_assert_int_eq(pwrite(fd, "ab", 2, (off_t)(2 * ps)), 2);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(2 * ps), 1), 1);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(4 * ps)), -EINVAL);
	close(fd);
}
END_TEST

/* len == 0 is a no-op that succeeds: 0 / VRANGE_INTACT, nothing changes. */
START_TEST(len_zero)
{
	int fd = make_memfd(2);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, 0), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, 0), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(2 * ps)), 0);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	/* Asking about nothing: no page, so nothing volatile, nothing purged. */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, 0), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, 0), VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps, 0), VRANGE_INTACT);
	/* The no-ops changed nothing: still volatile and still purged. */
	ck_assert_int_eq(is_vol(fd, 0), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)),
			 VRANGE_PURGED);
	close(fd);
}
END_TEST

/* len == 0 asks about no page, wherever off points (unaligned, at or past
 * the end): no state changes, no purge is forgotten. */
START_TEST(len_zero_unaligned)
{
	int fd = make_memfd(3);
	const off_t offs[] = { 1, 100, (off_t)ps - 1, (off_t)ps + 1,
			       (off_t)(3 * ps) - 1, (off_t)(3 * ps),
			       (off_t)(3 * ps) + 5, INT64_MAX };

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(3 * ps)), 0);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		ck_assert_msg(vrange_fd_is_volatile(fd, offs[i], 0) == 0,
			      "is_volatile(off %lld, 0)", (long long)offs[i]);
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, offs[i], 0), 0);
		ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, offs[i], 0),
				 VRANGE_INTACT);
	}
	for (size_t pg = 0; pg < 3; pg++)
		ck_assert_int_eq(is_vol(fd, pg), 1);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(3 * ps));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps + 1, 0),
			 VRANGE_INTACT);
	for (size_t pg = 0; pg < 3; pg++)
		ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(pg * ps),
							    (off_t)ps),
				 VRANGE_PURGED);
	close(fd);
}
END_TEST

/* "No function aborts or prints on bad input": nothing reaches stderr or
 * stdout from a string of bad calls (VRANGE_DEBUG is not set). */
START_TEST(errors_print_nothing)
{
	int sink = memfd_create("sink", MFD_CLOEXEC);
	int saved_err = dup(2), saved_out = dup(1), p[2], fd = make_memfd(1);
	vrange_region *r = (vrange_region *)(uintptr_t)1;
	struct stat st;

	if (getenv("VRANGE_DEBUG"))
		TEST_SKIP("VRANGE_DEBUG is set: the library may log");
	ck_assert_int_ge(sink, 0);
	ck_assert_int_eq(pipe(p), 0);
	fflush(stdout);
	fflush(stderr);
	ck_assert_int_eq(dup2(sink, 2), 2);
	ck_assert_int_eq(dup2(sink, 1), 1);

	vrange_fd_mark_volatile(-1, 0, 1);
	vrange_fd_mark_volatile(p[0], 0, 1);
	vrange_fd_mark_volatile(fd, -5, 1);
	vrange_fd_mark_volatile(fd, 0, (off_t)INT64_MAX);
	vrange_fd_mark_nonvolatile(12345, 0, 1);
	vrange_fd_is_volatile(fd, (off_t)(10 * ps), 1);
	vrange_fd_forget(-3);
	vrange_fd_forget(fd);
	vrange_region_create("x", 0, 0, &r);
	vrange_region_create("x", ps, 1u << 9, &r);
	vrange_region_create("x", SIZE_MAX, 0, &r);
	vrange_region_adopt(-1, 0, &r);
	vrange_region_adopt(p[1], 0, &r);
	vrange_mark_volatile(NULL, 0, 1);
	vrange_region_fd(NULL);
	vrange(NULL, 1, VRANGE_VOLATILE, NULL);
	vrange(&st, sizeof(st), 7, NULL);
	vrange_get_stats(NULL);
	vrange_purge(0);
	vrange_region_purge(NULL);

	fflush(stdout);
	fflush(stderr);
	dup2(saved_err, 2);
	dup2(saved_out, 1);
	close(saved_err);
	close(saved_out);
	ck_assert_int_eq(fstat(sink, &st), 0);
	ck_assert_msg(st.st_size == 0, "%lld bytes printed", (long long)st.st_size);
	ck_assert_ptr_eq(r, (vrange_region *)(uintptr_t)1);
	close(sink);
	close(p[0]);
	close(p[1]);
	close(fd);
}
END_TEST

/* ---- rounding ------------------------------------------------------------ */

/* Marking volatile rounds inward: a partly covered page is never volatile. */
START_TEST(round_volatile_inward)
{
	int fd = make_memfd(4);

	/* [1, ps + 1): no whole page. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 1, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(4 * ps)), 0);
	/* [ps - 1, 3 ps + 1): whole pages 1 and 2 only. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps - 1, (off_t)(2 * ps + 2)), 0);
	ck_assert_int_eq(is_vol(fd, 0), 0);
	ck_assert_int_eq(is_vol(fd, 1), 1);
	ck_assert_int_eq(is_vol(fd, 2), 1);
	ck_assert_int_eq(is_vol(fd, 3), 0);
	/* The partly covered pages are never purged. */
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(page_intact(fd, 0));
	ck_assert(page_zero(fd, 1));
	ck_assert(page_zero(fd, 2));
	ck_assert(page_intact(fd, 3));
	/* One byte short of a page at either end. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(3 * ps), (off_t)ps - 1), 0);
	ck_assert_int_eq(is_vol(fd, 3), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(3 * ps) + 1, (off_t)ps - 1), 0);
	ck_assert_int_eq(is_vol(fd, 3), 0);
	close(fd);
}
END_TEST

/* On a file whose size is not a multiple of the page, the last page is only
 * partly inside [0, size): marking [0, size) volatile leaves it alone. */
START_TEST(round_inward_at_unaligned_eof)
{
	int fd = make_memfd(3);
	off_t size = (off_t)(2 * ps + 100);

	ck_assert_int_eq(ftruncate(fd, size), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, size), 0);
	ck_assert_int_eq(is_vol(fd, 1), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(2 * ps), 100), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(2 * ps), 101), -EINVAL);
	close(fd);
}
END_TEST

/* Marking non-volatile and querying round outward. */
START_TEST(round_nonvolatile_outward)
{
	int fd = make_memfd(4);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(4 * ps)), 0);
	/* One byte in page 1 makes all of page 1 non-volatile. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps + 7, 1), VRANGE_INTACT);
	ck_assert_int_eq(is_vol(fd, 0), 1);
	ck_assert_int_eq(is_vol(fd, 1), 0);
	ck_assert_int_eq(is_vol(fd, 2), 1);
	/* Two bytes straddling pages 2 and 3 cover both. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(3 * ps) - 1, 2),
			 VRANGE_INTACT);
	ck_assert_int_eq(is_vol(fd, 2), 0);
	ck_assert_int_eq(is_vol(fd, 3), 0);
	ck_assert_int_eq(is_vol(fd, 0), 1);
	/* Querying: one byte of a volatile page says volatile. */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)ps - 1, 1), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)ps, 1), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)ps - 1, 2), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)ps, (off_t)(3 * ps)), 0);
	close(fd);
}
END_TEST

/* The outward rounding of mark_nonvolatile also reports purges of pages the
 * byte range only touches. */
START_TEST(round_purged_report_outward)
{
	int fd = make_memfd(4);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	/* Last byte of page 0 + first byte of page 1. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)ps - 1, 2), VRANGE_PURGED);
	/* One byte in the middle of page 2. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(2 * ps) + 100, 1),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(4 * ps)), 0);
	close(fd);
}
END_TEST

/* ---- forget ------------------------------------------------------------- */

START_TEST(forget_rules)
{
	int fd = make_memfd(2), other = make_memfd(1);

	/* A valid file with no state: -ENOENT. */
	ck_assert_int_eq(vrange_fd_forget(fd), -ENOENT);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(other, 0, (off_t)ps), 0);
	ck_assert_uint_eq(stats().files, 2);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	ck_assert_uint_eq(stats().files, 1);
	/* Forgotten state is gone: a second forget is -ENOENT. */
	ck_assert_int_eq(vrange_fd_forget(fd), -ENOENT);
	/* Its pages became non-volatile: never purged by this process. */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert(page_intact(fd, 0));
	ck_assert(page_intact(fd, 1));
	ck_assert(page_zero(other, 0));
	ck_assert_int_eq(blocks(fd), pages_blocks(2));
	/* The other file's state was not forgotten with it. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(other, 0, (off_t)ps), VRANGE_PURGED);
	/* The file can be used again after forget. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(is_vol(fd, 0), 1);
	close(fd);
	close(other);
}
END_TEST

/* A purge report pending when the state is forgotten is forgotten too. */
START_TEST(forget_drops_purged)
{
	int fd = make_memfd(1);

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(vrange_fd_forget(fd), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_INTACT);
	close(fd);
}
END_TEST

/*
 * Asking is not marking: is_volatile and mark_nonvolatile on a file that
 * was never marked volatile leave no state behind, so stats.files stays 0
 * and vrange_fd_forget says -ENOENT ("a valid file with no state").
 * KNOWN FAILING, left out of the suite: the core attaches file-layer state
 * (and keeps its own descriptor of the file, so the file outlives the
 * caller's last close) on the first call of any kind.  Enable it in
 * test_suite() once the core creates state only when marking volatile.
 */
START_TEST(query_leaves_no_state)
{
	int fd = make_memfd(2);

	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(2 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_INTACT);
	ck_assert_uint_eq(stats().files, 0);
	ck_assert_int_eq(vrange_fd_forget(fd), -ENOENT);
	close(fd);
}
END_TEST

/* Forget through a dup or reopen: the file is the key. */
START_TEST(forget_through_other_fd)
{
	int fd = make_memfd(1), d = dup(fd);

	ck_assert_int_ge(d, 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_forget(d), 0);
	ck_assert_uint_eq(stats().files, 0);
	ck_assert_int_eq(vrange_fd_forget(fd), -ENOENT);
	ck_assert_int_eq(is_vol(fd, 0), 0);
	close(fd);
	close(d);
}
END_TEST

/*
 * Hundreds of files at once, each found again by its descriptor: the file
 * layer's index (by device and inode) grows past its first table three
 * times, loses every other file, and still finds each of the rest - and
 * only those.  400 files: the library keeps a descriptor of each, under a
 * limit of 1024.
 */
START_TEST(many_files_each_found)
{
	enum { N = 400 };
	static int fds[N];

	for (int i = 0; i < N; i++) {
		fds[i] = make_memfd(1);
		ck_assert_int_eq(vrange_fd_mark_volatile(fds[i], 0, (off_t)ps), 0);
	}
	ck_assert_uint_eq(stats().files, N);
	for (int i = 0; i < N; i += 2) {
		ck_assert_int_eq(vrange_fd_forget(fds[i]), 0);
		ck_assert_int_eq(is_vol(fds[i], 0), 0);
	}
	ck_assert_uint_eq(stats().files, N / 2);
	for (int i = 1; i < N; i += 2)
		ck_assert_msg(is_vol(fds[i], 0) == 1, "file %d lost", i);
	/* Purged through the index: each kept file answers PURGED. */
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(N / 2 * ps));
	for (int i = 0; i < N; i++) {
		int want = i % 2 ? VRANGE_PURGED : VRANGE_INTACT;

		ck_assert_msg(vrange_fd_mark_nonvolatile(fds[i], 0, (off_t)ps) == want,
			      "file %d", i);
		ck_assert_int_eq(vrange_fd_forget(fds[i]), i % 2 ? 0 : -ENOENT);
		close(fds[i]);
	}
	ck_assert_uint_eq(stats().files, 0);
}
END_TEST

/* ---- stats --------------------------------------------------------------- */

START_TEST(stats_counts)
{
	int a = make_memfd(4), b = make_memfd(2);
	struct vrange_stats s0, s;
	ssize_t freed;

	ck_assert_int_eq(vrange_get_stats(NULL), -EINVAL);
	s0 = stats();
	ck_assert_uint_eq(s0.files, 0);
	ck_assert_uint_eq(s0.regions, 0);
	ck_assert_uint_eq(s0.volatile_bytes, 0);
	ck_assert_uint_eq(s0.purged_bytes, 0);
	/* Both strings are terminated within their arrays. */
	ck_assert_int_lt(strnlen(s0.pressure_source, sizeof(s0.pressure_source)),
			 (int)sizeof(s0.pressure_source));
	ck_assert_int_lt(strnlen(s0.access_fallback, sizeof(s0.access_fallback)),
			 (int)sizeof(s0.access_fallback));

	ck_assert_int_eq(vrange_fd_mark_volatile(a, 0, (off_t)(3 * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(b, 0, (off_t)ps), 0);
	s = stats();
	ck_assert_uint_eq(s.files, 2);
	ck_assert_uint_eq(s.volatile_bytes, 4 * ps);
	ck_assert_uint_eq(s.purged_bytes, 0);

	/* Re-marking does not count twice (b stays the newest). */
	ck_assert_int_eq(vrange_fd_mark_volatile(b, 0, (off_t)ps), 0);
	ck_assert_uint_eq(stats().volatile_bytes, 4 * ps);

	freed = vrange_purge(3 * ps); /* the three pages of a, oldest */
	ck_assert_int_eq(freed, (ssize_t)(3 * ps));
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 4 * ps); /* purged pages stay volatile */
	ck_assert_uint_eq(s.purged_bytes, 3 * ps);
	ck_assert_uint_ge(s.purges, s0.purges + 1);
	ck_assert_uint_eq(s.purged_total, s0.purged_total + 3 * ps);

	ck_assert_int_eq(vrange_fd_mark_nonvolatile(a, 0, (off_t)ps), VRANGE_PURGED);
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 3 * ps);
	ck_assert_uint_eq(s.purged_bytes, 2 * ps);
	/* purged_total is a running total: it never goes down. */
	ck_assert_uint_eq(s.purged_total, s0.purged_total + 3 * ps);

	ck_assert_int_eq(vrange_fd_mark_nonvolatile(a, 0, (off_t)(4 * ps)), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(b, 0, (off_t)(2 * ps)), VRANGE_INTACT);
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 0);
	ck_assert_uint_eq(s.purged_bytes, 0);
	ck_assert_uint_eq(s.files, 2);
	close(a);
	close(b);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("file");
	TCase *tc;

	tc = tcase_create("basic");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, version_format);
	tcase_add_test(tc, mark_unmark_intact);
	tcase_add_test(tc, purge_reports_purged_once);
	tcase_add_test(tc, purged_only_where_purged);
	tcase_add_test(tc, purged_stays_purged_across_remark);
	suite_add_tcase(s, tc);

	tc = tcase_create("purge");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, purge_spares_nonvolatile);
	tcase_add_test(tc, purge_releases_memory);
	tcase_add_test(tc, purge_bytes_partial);
	tcase_add_test(tc, purge_zero);
	tcase_add_test(tc, purge_never_punches_reused_descriptor);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, order_oldest_first_across_files);
	tcase_add_test(tc, order_oldest_first_in_file);
	tcase_add_test(tc, remark_refreshes_age);
	tcase_add_test(tc, remark_part_refreshes_part);
	suite_add_tcase(s, tc);

	tc = tcase_create("sharing");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, shared_through_dup);
	tcase_add_test(tc, shared_through_proc_reopen);
	tcase_add_test(tc, shared_dev_shm_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, bad_fd);
	tcase_add_test(tc, bad_fd_first_call);
	tcase_add_test(tc, not_shmem);
	tcase_add_test(tc, negative_off_len);
	tcase_add_test(tc, past_end_and_overflow);
	tcase_add_test(tc, size_follows_file);
	tcase_add_test(tc, len_zero);
	tcase_add_test(tc, len_zero_unaligned);
	tcase_add_test(tc, errors_print_nothing);
	suite_add_tcase(s, tc);

	tc = tcase_create("rounding");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, round_volatile_inward);
	tcase_add_test(tc, round_inward_at_unaligned_eof);
	tcase_add_test(tc, round_nonvolatile_outward);
	tcase_add_test(tc, round_purged_report_outward);
	suite_add_tcase(s, tc);

	tc = tcase_create("forget");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, forget_rules);
	tcase_add_test(tc, forget_drops_purged);
	tcase_add_test(tc, forget_through_other_fd);
	tcase_add_test(tc, many_files_each_found);
	tcase_add_test(tc, query_leaves_no_state); /* known failing, see above */
	suite_add_tcase(s, tc);

	tc = tcase_create("stats");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, stats_counts);
	suite_add_tcase(s, tc);

	return s;
}
