/* SPDX-License-Identifier: MIT */
/*
 * test_region.c - the region layer (contract section 2 without refill and
 * SIGBUS mode), the vrange() address form on regions, the purge half of
 * section 3, and the matching fixed details of section 6.
 *
 * Regions are created with VRANGE_ACCESS_ZERO (purged volatile pages read as
 * zeros) unless a case is about the access mode itself.  Every case runs in
 * its own forked process, so process-wide state starts empty.  Pages are
 * written before they are marked volatile, so a purge certainly frees them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

static unsigned char fill_byte(size_t i)
{
	return (unsigned char)(0x21 + i * 13);
}

/* A ZERO-mode region of npages pages, page i filled with fill_byte(i). */
static vrange_region *make_region(size_t npages)
{
	vrange_region *r = NULL;
	unsigned char *b;

	ck_assert_int_eq(vrange_region_create("test-region", npages * ps,
					      VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_ptr_nonnull(r);
	b = vrange_region_base(r);
	for (size_t i = 0; i < npages; i++)
		memset(b + i * ps, fill_byte(i), ps);
	return r;
}

static int mem_all(const unsigned char *p, size_t len, unsigned char v)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static int pg_intact(vrange_region *r, size_t pg)
{
	return mem_all((unsigned char *)vrange_region_base(r) + pg * ps, ps,
		       fill_byte(pg));
}

static int pg_zero(vrange_region *r, size_t pg)
{
	return mem_all((unsigned char *)vrange_region_base(r) + pg * ps, ps, 0);
}

static int pg_vol(vrange_region *r, size_t pg)
{
	return vrange_is_volatile(r, pg * ps, ps);
}

static long long fd_blocks(int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return (long long)st.st_blocks;
}

static long long region_blocks(vrange_region *r)
{
	return fd_blocks(vrange_region_fd(r));
}

static long long pages_blocks(size_t n)
{
	return (long long)(n * ps / 512);
}

/* Pages of [p, p + len) that mincore reports resident. */
static size_t resident_pages(void *p, size_t len)
{
	size_t n = (len + ps - 1) / ps, count = 0;
	unsigned char *vec = malloc(n);

	ck_assert_ptr_nonnull(vec);
	ck_assert_int_eq(mincore(p, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		count += vec[i] & 1;
	free(vec);
	return count;
}

/* Is [p, p + len) wholly unmapped?  Read from /proc/self/maps, the kernel's
 * own view (under valgrind, mincore reports the tool's view instead). */
static int unmapped(void *p, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	uintptr_t lo = (uintptr_t)p, hi = lo + len;
	unsigned long a, b;
	char line[512];
	int free_ = 1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a < hi && b > lo)
			free_ = 0;
	fclose(f);
	return free_;
}

static struct vrange_stats stats(void)
{
	struct vrange_stats s;

	ck_assert_int_eq(vrange_get_stats(&s), 0);
	return s;
}

/* Resident set size of this process, in bytes. */
static size_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size, res;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &res), 2);
	fclose(f);
	return res * ps;
}

static int make_memfd(size_t npages, unsigned char fill)
{
	int fd = memfd_create("test-adopt", MFD_CLOEXEC);
	unsigned char *buf = malloc(ps);

	ck_assert_int_ge(fd, 0);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(ftruncate(fd, (off_t)(npages * ps)), 0);
	for (size_t i = 0; i < npages; i++) {
		memset(buf, fill + (unsigned char)i, ps);
		ck_assert_int_eq(pwrite(fd, buf, ps, (off_t)(i * ps)), (ssize_t)ps);
	}
	free(buf);
	return fd;
}

/* ---- create -------------------------------------------------------------- */

START_TEST(create_basic)
{
	vrange_region *r = NULL;
	unsigned char *b;
	char link[PATH_MAX], path[64];
	struct stat st;
	ssize_t n;
	int fd;

	ck_assert_int_eq(vrange_region_create("basic", 3 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_ptr_nonnull(r);
	b = vrange_region_base(r);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq((uintptr_t)b % ps, 0);
	ck_assert_uint_eq(vrange_region_size(r), 3 * ps);
	ck_assert_uint_eq(vrange_region_access(r), VRANGE_ACCESS_ZERO);
	fd = vrange_region_fd(r);
	ck_assert_int_ge(fd, 0);

	/* A memfd holding the region, carrying the name.  (Exactly the
	 * region's size: see create_memfd_exact_size.) */
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_ge(st.st_size, (off_t)(3 * ps));
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	ck_assert_int_gt(n, 0);
	link[n] = 0;
	ck_assert_msg(strncmp(link, "/memfd:basic", 12) == 0, "link %s", link);

	/* Mapped shared and read-write: the file and the mapping agree. */
	memset(b, 0xab, 3 * ps);
	ck_assert_int_eq(pread(fd, path, 8, (off_t)ps), 8);
	ck_assert(mem_all((unsigned char *)path, 8, 0xab));
	ck_assert_int_eq(pwrite(fd, "hello", 5, (off_t)(2 * ps)), 5);
	ck_assert_int_eq(memcmp(b + 2 * ps, "hello", 5), 0);

	ck_assert_uint_eq(stats().regions, 1);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	ck_assert_uint_eq(stats().regions, 0);
	/* The region's fd went with it. */
	ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
}
END_TEST

/*
 * "create makes a memfd of size bytes (rounded up to pages)" and "creating
 * a region makes none of it resident": exactly the size, no block allocated.
 */
START_TEST(create_memfd_exact_size)
{
	vrange_region *r = NULL;
	struct stat st;

	ck_assert_int_eq(vrange_region_create("exact", 3 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_eq(fstat(vrange_region_fd(r), &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)(3 * ps));
	ck_assert_int_eq(st.st_blocks, 0);
	vrange_region_destroy(r);
}
END_TEST

/* size is rounded up to pages; name may be NULL. */
START_TEST(create_rounds_size)
{
	const size_t sizes[] = { 1, 100, ps - 1, ps, ps + 1, 5 * ps - 3 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		vrange_region *r = NULL;
		size_t want = (sizes[i] + ps - 1) / ps * ps;
		struct stat st;

		ck_assert_int_eq(vrange_region_create(i % 2 ? NULL : "round", sizes[i],
						      VRANGE_ACCESS_ZERO, &r), 0);
		ck_assert_uint_eq(vrange_region_size(r), want);
		ck_assert_int_eq(fstat(vrange_region_fd(r), &st), 0);
		ck_assert_int_ge(st.st_size, (off_t)want);
		/* The whole rounded size is usable. */
		((char *)vrange_region_base(r))[want - 1] = 1;
		ck_assert_int_eq(vrange_mark_volatile(r, 0, want), 0);
		ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, want), VRANGE_INTACT);
		ck_assert_int_eq(vrange_region_destroy(r), 0);
	}
}
END_TEST

START_TEST(create_errors)
{
	vrange_region *const sentinel = (vrange_region *)(uintptr_t)0x1234;
	vrange_region *r = sentinel;

	ck_assert_int_eq(vrange_region_create("e", 0, VRANGE_ACCESS_ZERO, &r), -EINVAL);
	ck_assert_ptr_eq(r, sentinel);
	ck_assert_int_eq(vrange_region_create("e", 0, 0, &r), -EINVAL);
	ck_assert_int_eq(vrange_region_create("e", ps, VRANGE_ACCESS_ZERO, NULL), -EINVAL);
	ck_assert_int_eq(vrange_region_create("e", ps,
					      VRANGE_ACCESS_ZERO | VRANGE_ACCESS_SIGBUS, &r),
			 -EINVAL);
	ck_assert_int_eq(vrange_region_create("e", ps, 1u << 2, &r), -EINVAL);
	ck_assert_int_eq(vrange_region_create("e", ps, VRANGE_ACCESS_ZERO | (1u << 7), &r),
			 -EINVAL);
	ck_assert_int_eq(vrange_region_create("e", ps, 1u << 31, &r), -EINVAL);
	ck_assert_ptr_eq(r, sentinel);
	/* Sizes no memfd can have fail cleanly with some -errno. */
	ck_assert_int_lt(vrange_region_create("e", SIZE_MAX, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_lt(vrange_region_create("e", SIZE_MAX - ps + 2, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_lt(vrange_region_create("e", (size_t)1 << 62, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_ptr_eq(r, sentinel);
	ck_assert_uint_eq(stats().regions, 0);
}
END_TEST

/* A name longer than a memfd takes is truncated or -EINVAL; never overflows. */
START_TEST(create_long_name)
{
	const size_t lens[] = { 200, 248, 249, 250, 255, 256, 300, 4096, 70000 };

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		char *name = malloc(lens[i] + 1);
		vrange_region *r = NULL;
		char link[PATH_MAX], path[64];
		ssize_t n;
		int ret;

		ck_assert_ptr_nonnull(name);
		for (size_t j = 0; j < lens[i]; j++)
			name[j] = (char)('a' + j % 26);
		name[lens[i]] = 0;
		ret = vrange_region_create(name, ps, VRANGE_ACCESS_ZERO, &r);
		ck_assert_msg(ret == 0 || ret == -EINVAL, "len %zu: %d", lens[i], ret);
		if (lens[i] <= 200)
			ck_assert_int_eq(ret, 0);
		if (ret == 0) {
			snprintf(path, sizeof(path), "/proc/self/fd/%d", vrange_region_fd(r));
			n = readlink(path, link, sizeof(link) - 1);
			ck_assert_int_gt(n, 7);
			link[n] = 0;
			ck_assert_int_eq(strncmp(link, "/memfd:", 7), 0);
			/* What was kept is a prefix of the name. */
			char *end = strstr(link, " (deleted)");
			size_t kept = (end ? (size_t)(end - link) : (size_t)n) - 7;

			ck_assert_uint_gt(kept, 0);
			ck_assert_uint_le(kept, lens[i]);
			ck_assert_int_eq(strncmp(link + 7, name, kept), 0);
			ck_assert_int_eq(vrange_region_destroy(r), 0);
		}
		free(name);
	}
}
END_TEST

/* Creating a region makes none of it resident, even 1 GiB; nor does marking
 * it volatile and back. */
START_TEST(create_gib_nothing_resident)
{
	const size_t gib = (size_t)1 << 30;
	vrange_region *r = NULL;
	size_t rss0, rss1;
	long long blk0;
	char *b;

	rss0 = rss_bytes();
	ck_assert_int_eq(vrange_region_create("gib", gib, VRANGE_ACCESS_ZERO, &r), 0);
	b = vrange_region_base(r);
	ck_assert_uint_eq(vrange_region_size(r), gib);
	/* No page of the region (create_memfd_exact_size asks for no block
	 * at all; here a few pages of library state would be tolerated). */
	blk0 = region_blocks(r);
	ck_assert_msg(blk0 <= pages_blocks(16), "%lld blocks at creation", blk0);
	ck_assert_uint_eq(resident_pages(b, gib), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, gib), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, gib), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, gib), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_volatile(r, gib / 2, gib / 2), 0);
	ck_assert_int_eq(region_blocks(r), blk0);
	ck_assert_uint_eq(resident_pages(b, gib), 0);
	rss1 = rss_bytes();
	/* The library's own bookkeeping must not scale with the size. */
	ck_assert_msg(rss1 < rss0 + (2u << 20), "RSS grew by %zu bytes",
		      rss1 > rss0 ? rss1 - rss0 : 0);

	/* Pages are allocated as they are first touched. */
	b[gib - 1] = 1;
	b[12345] = 2;
	ck_assert_int_eq(region_blocks(r), blk0 + pages_blocks(2));
	ck_assert_uint_eq(resident_pages(b, gib), 2);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
}
END_TEST

/* ---- NULL region ---------------------------------------------------------- */

static int dummy_refill(vrange_region *r, size_t off, void *buf, size_t len, void *arg)
{
	return -1;
}

START_TEST(null_region)
{
	int purged = 7;

	ck_assert_int_eq(vrange_region_destroy(NULL), 0);
	ck_assert_ptr_null(vrange_region_base(NULL));
	ck_assert_uint_eq(vrange_region_size(NULL), 0);
	ck_assert_uint_eq(vrange_region_access(NULL), 0);
	ck_assert_int_eq(vrange_region_fd(NULL), -EINVAL);
	ck_assert_int_eq(vrange_region_set_priority(NULL, 1), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(NULL, 0, ps), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(NULL, 0, 0), -EINVAL);
	ck_assert_int_eq(vrange_mark_nonvolatile(NULL, 0, ps), -EINVAL);
	ck_assert_int_eq(vrange_is_volatile(NULL, 0, ps), -EINVAL);
	ck_assert_int_eq(vrange_region_purge(NULL), -EINVAL);
	ck_assert_int_eq(vrange_region_set_refill(NULL, dummy_refill, NULL), -EINVAL);
	ck_assert_int_eq(vrange_region_set_refill(NULL, NULL, NULL), -EINVAL);
	ck_assert_int_eq(purged, 7);
}
END_TEST

/* ---- access mode ----------------------------------------------------------- */

/* Without a flag the mode is SIGBUS where userfaultfd is usable, else ZERO;
 * exactly one flag is in force, and stats.access_fallback says which. */
START_TEST(access_default_and_explicit)
{
	vrange_region *r = NULL, *z = NULL, *s = NULL;
	struct vrange_stats st;
	unsigned int a;
	int ret;

	ck_assert_int_eq(vrange_region_create("dflt", ps, 0, &r), 0);
	a = vrange_region_access(r);
	ck_assert_msg(a == VRANGE_ACCESS_ZERO || a == VRANGE_ACCESS_SIGBUS, "access %u", a);
	st = stats();
	if (st.access_fallback[0] == 0)
		ck_assert_uint_eq(a, VRANGE_ACCESS_SIGBUS);
	else
		ck_assert_uint_eq(a, VRANGE_ACCESS_ZERO);

	ck_assert_int_eq(vrange_region_create("zero", ps, VRANGE_ACCESS_ZERO, &z), 0);
	ck_assert_uint_eq(vrange_region_access(z), VRANGE_ACCESS_ZERO);

	ret = vrange_region_create("sigbus", ps, VRANGE_ACCESS_SIGBUS, &s);
	if (st.access_fallback[0] == 0) {
		ck_assert_int_eq(ret, 0);
		ck_assert_uint_eq(vrange_region_access(s), VRANGE_ACCESS_SIGBUS);
	} else {
		ck_assert_int_eq(ret, -EOPNOTSUPP);
		ck_assert_ptr_null(s);
	}
	vrange_region_destroy(s);
	vrange_region_destroy(z);
	vrange_region_destroy(r);
}
END_TEST

/* In ZERO mode a purged page that is still volatile reads zeros, no signal;
 * it is writable after mark_nonvolatile. */
START_TEST(zero_mode_reads_zeros)
{
	vrange_region *r = make_region(2);
	unsigned char *b = vrange_region_base(r);

	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(pg_zero(r, 0));
	ck_assert(pg_zero(r, 1));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 2 * ps), VRANGE_PURGED);
	memset(b, 0x77, 2 * ps);
	ck_assert(mem_all(b, 2 * ps, 0x77));
	vrange_region_destroy(r);
}
END_TEST

/* ---- adopt -------------------------------------------------------------------- */

START_TEST(adopt_basic)
{
	int fd = make_memfd(3, 0x40);
	vrange_region *r = NULL;
	struct stat a, b;
	unsigned char *base, c = 0;
	int rfd;

	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r), 0);
	base = vrange_region_base(r);
	ck_assert_uint_eq(vrange_region_size(r), 3 * ps);
	ck_assert_uint_eq(vrange_region_access(r), VRANGE_ACCESS_ZERO);
	ck_assert(mem_all(base, ps, 0x40));
	ck_assert(mem_all(base + 2 * ps, ps, 0x42));
	/* The region keeps its own dup of the file. */
	rfd = vrange_region_fd(r);
	ck_assert_int_ge(rfd, 0);
	ck_assert_int_ne(rfd, fd);
	ck_assert_int_eq(fstat(fd, &a), 0);
	ck_assert_int_eq(fstat(rfd, &b), 0);
	ck_assert_uint_eq(a.st_ino, b.st_ino);
	ck_assert_uint_eq(a.st_dev, b.st_dev);
	ck_assert_uint_eq(stats().regions, 1);
	close(fd);
	/* Still usable with the caller's fd gone. */
	base[ps] = 0x99;
	ck_assert_int_eq(pread(rfd, &c, 1, (off_t)ps), 1);
	ck_assert_int_eq(c, 0x99);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 3 * ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(3 * ps));
	ck_assert(mem_all(base, 3 * ps, 0));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 3 * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	ck_assert_uint_eq(stats().regions, 0);
	ck_assert_int_eq(fcntl(rfd, F_GETFD), -1);
}
END_TEST

/* Size from fstat, page-rounded; whole pages of it can be marked. */
START_TEST(adopt_unaligned_size)
{
	int fd = make_memfd(3, 1);
	vrange_region *r = NULL;

	ck_assert_int_eq(ftruncate(fd, (off_t)(2 * ps + 100)), 0);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_uint_ge(vrange_region_size(r), 2 * ps + 100);
	ck_assert_uint_le(vrange_region_size(r), 3 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r, ps, ps), 1);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), -EINVAL);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	close(fd);
}
END_TEST

START_TEST(adopt_errors)
{
	vrange_region *const sentinel = (vrange_region *)(uintptr_t)0x4321;
	vrange_region *r = sentinel;
	char path[] = "/var/tmp/vrange-adopt-XXXXXX";
	int fd, p[2], closed;

	ck_assert_int_eq(vrange_region_adopt(-1, VRANGE_ACCESS_ZERO, &r), -EBADF);
	closed = memfd_create("closed", MFD_CLOEXEC);
	ck_assert_int_ge(closed, 0);
	close(closed);
	ck_assert_int_eq(vrange_region_adopt(closed, VRANGE_ACCESS_ZERO, &r), -EBADF);

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(vrange_region_adopt(p[0], VRANGE_ACCESS_ZERO, &r), -EOPNOTSUPP);
	close(p[0]);
	close(p[1]);
	fd = mkstemp(path);
	if (fd >= 0) {
		unlink(path);
		ck_assert_int_eq(ftruncate(fd, (off_t)ps), 0);
		ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r),
				 -EOPNOTSUPP);
		close(fd);
	}

	/* An empty file: -EINVAL. */
	fd = memfd_create("empty", MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r), -EINVAL);
	ck_assert_int_eq(ftruncate(fd, (off_t)ps), 0);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, NULL), -EINVAL);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO | VRANGE_ACCESS_SIGBUS,
					     &r), -EINVAL);
	ck_assert_int_eq(vrange_region_adopt(fd, 1u << 3, &r), -EINVAL);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO | (1u << 30), &r),
			 -EINVAL);
	ck_assert_ptr_eq(r, sentinel);
	ck_assert_uint_eq(stats().regions, 0);
	/* And the file itself was not changed by the failures. */
	r = NULL;
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 0);
	vrange_region_destroy(r);
	close(fd);
}
END_TEST

/* An adopted region shares file-layer state with the fd. */
START_TEST(adopt_shares_with_fd_layer)
{
	int fd = make_memfd(4, 0x10);
	vrange_region *r = NULL;
	unsigned char *b;

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r), 0);
	b = vrange_region_base(r);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 1);
	ck_assert_int_eq(vrange_is_volatile(r, ps, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, ps), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(2 * ps), (off_t)ps), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(vrange_region_fd(r), (off_t)(2 * ps), 1), 1);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(mem_all(b, ps, 0));
	ck_assert(mem_all(b + ps, ps, 0x11));
	ck_assert(mem_all(b + 2 * ps, ps, 0));
	ck_assert(mem_all(b + 3 * ps, ps, 0x13));
	/* Purged through one, reported through the other. */
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(2 * ps), (off_t)ps),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_is_volatile(r, 2 * ps, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_INTACT);
	vrange_region_destroy(r);
	close(fd);
}
END_TEST

/* Two regions of one file (two mappings): one state, both see the purge. */
START_TEST(adopt_second_mapping)
{
	int fd = make_memfd(2, 0x30);
	vrange_region *a = NULL, *b = NULL;
	unsigned char *ba, *bb;

	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &a), 0);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &b), 0);
	ba = vrange_region_base(a);
	bb = vrange_region_base(b);
	ck_assert_ptr_ne(ba, bb);
	ba[0] = 0x55;
	ck_assert_int_eq(bb[0], 0x55);
	ck_assert_uint_eq(stats().regions, 2);

	ck_assert_int_eq(vrange_mark_volatile(a, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_is_volatile(b, ps, ps), 1);
	ck_assert_uint_eq(stats().volatile_bytes, 2 * ps); /* one file, counted once */
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(mem_all(ba, 2 * ps, 0));
	ck_assert(mem_all(bb, 2 * ps, 0));
	ck_assert_int_eq(vrange_mark_nonvolatile(b, 0, ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 0, ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_nonvolatile(a, ps, ps), VRANGE_PURGED);
	/* Destroying one mapping leaves the other working. */
	ck_assert_int_eq(vrange_region_destroy(a), 0);
	ck_assert_int_eq(vrange_mark_volatile(b, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(b, 0, ps), VRANGE_INTACT);
	bb[0] = 1;
	ck_assert_int_eq(vrange_region_destroy(b), 0);
	close(fd);
}
END_TEST

/* A dup'd fd is the same file. */
START_TEST(adopt_dup)
{
	int fd = make_memfd(1, 0x60);
	int d = dup(fd);
	vrange_region *r = NULL;

	ck_assert_int_ge(d, 0);
	ck_assert_int_eq(vrange_region_adopt(d, VRANGE_ACCESS_ZERO, &r), 0);
	close(d);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 1), 1);
	ck_assert_int_eq(vrange_region_purge(r), (ssize_t)ps);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_PURGED);
	vrange_region_destroy(r);
	close(fd);
}
END_TEST

/* Reopening a region's memfd through /proc/self/fd and adopting that gives
 * a second region sharing the first one's state. */
START_TEST(adopt_proc_reopen_of_region)
{
	vrange_region *r = make_region(2), *r2 = NULL;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", vrange_region_fd(r));
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &r2), 0);
	close(fd);
	ck_assert_uint_eq(vrange_region_size(r2), 2 * ps);
	ck_assert(mem_all(vrange_region_base(r2), ps, fill_byte(0)));
	ck_assert_int_eq(vrange_mark_volatile(r, ps, ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r2, ps, ps), 1);
	ck_assert_int_eq(vrange_is_volatile(r2, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(r2, 0, ps), 0);
	ck_assert_int_eq(pg_vol(r, 0), 1);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(mem_all(vrange_region_base(r2), 2 * ps, 0));
	ck_assert_int_eq(vrange_mark_nonvolatile(r2, ps, ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 2 * ps), VRANGE_INTACT);
	vrange_region_destroy(r2);
	vrange_region_destroy(r);
}
END_TEST

/* The file layer on a region's own fd: the same state, and the file's end
 * is the region's end (whatever else the library keeps in the file). */
START_TEST(fd_layer_on_region_fd)
{
	vrange_region *r = make_region(3);
	int fd = vrange_region_fd(r);
	struct stat st;

	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)ps, (off_t)ps), 0);
	ck_assert_int_eq(pg_vol(r, 1), 1);
	ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, ps), 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(2 * ps), (off_t)ps), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, (off_t)(3 * ps), (off_t)ps), -EINVAL);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, (off_t)(3 * ps), 1), -EINVAL);
	if (st.st_size > (off_t)(3 * ps))
		ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, st.st_size), -EINVAL);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, (off_t)(2 * ps), (off_t)ps),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, ps), VRANGE_PURGED);
	/* The region still works after all that. */
	ck_assert(pg_intact(r, 0));
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 3 * ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 3 * ps), VRANGE_INTACT);
	ck_assert(pg_intact(r, 0));
	vrange_region_destroy(r);
}
END_TEST

/* ---- destroy ----------------------------------------------------------------- */

START_TEST(destroy_forgets)
{
	vrange_region *r = make_region(4), *keep = make_region(1);
	unsigned char *base = vrange_region_base(r), *m;
	struct vrange_stats s;
	int purged = 5, ret;

	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange_region_purge(r), (ssize_t)(4 * ps));
	ck_assert_int_eq(vrange_mark_volatile(keep, 0, ps), 0);
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 5 * ps);
	ck_assert_uint_eq(s.purged_bytes, 4 * ps);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	s = stats();
	ck_assert_uint_eq(s.regions, 1);
	ck_assert_uint_eq(s.volatile_bytes, ps);
	ck_assert_uint_eq(s.purged_bytes, 0);

	/*
	 * New memory at the same address is not the old region: no stale
	 * purge report, and its bytes are not discarded.  (Anonymous memory
	 * is section 5's business: accepted as fresh, or refused; never
	 * taken for the destroyed region.)
	 */
	m = mmap(base, 4 * ps, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m == base) {
		memset(m, 0x42, 4 * ps);
		ret = vrange(m, 4 * ps, VRANGE_NONVOLATILE, &purged);
		ck_assert_msg(ret == 0 || ret == -ENOENT || ret == -EOPNOTSUPP, "ret %d", ret);
		if (ret == 0)
			ck_assert_int_eq(purged, 0);
		else
			ck_assert_int_eq(purged, 5);
	} else if (m != MAP_FAILED) {
		munmap(m, 4 * ps);
		m = NULL;
	} else {
		m = NULL;
	}
	/* Nothing of the destroyed region is left to purge. */
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	if (m) {
		ck_assert(mem_all(m, 4 * ps, 0x42));
		munmap(m, 4 * ps);
	}
	ck_assert_int_eq(vrange_mark_nonvolatile(keep, 0, ps), VRANGE_PURGED);
	vrange_region_destroy(keep);
}
END_TEST

/* ---- the mark cycle on regions ---------------------------------------------- */

START_TEST(region_mark_cycle)
{
	vrange_region *r = make_region(4);

	ck_assert_int_eq(vrange_mark_volatile(r, ps, 2 * ps), 0);
	ck_assert_int_eq(pg_vol(r, 0), 0);
	ck_assert_int_eq(pg_vol(r, 1), 1);
	ck_assert_int_eq(pg_vol(r, 2), 1);
	ck_assert_int_eq(pg_vol(r, 3), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, 2 * ps), VRANGE_INTACT);
	for (size_t i = 0; i < 4; i++)
		ck_assert(pg_intact(r, i));

	ck_assert_int_eq(vrange_mark_volatile(r, ps, 2 * ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(pg_vol(r, 1), 1); /* purged pages are still volatile */
	ck_assert(pg_intact(r, 0));
	ck_assert(pg_zero(r, 1));
	ck_assert(pg_zero(r, 2));
	ck_assert(pg_intact(r, 3));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, 2 * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, 2 * ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, 2 * ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, 2 * ps), VRANGE_INTACT);
	vrange_region_destroy(r);
}
END_TEST

/* PURGED exactly for ranges holding a page purged since it was marked; a
 * purged page stays purged across a re-mark. */
START_TEST(region_purged_exactly)
{
	vrange_region *r = make_region(4);

	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps, 2 * ps), VRANGE_INTACT);
	/* Re-marking the purged page does not clear the purge. */
	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_INTACT);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(region_len_zero)
{
	vrange_region *r = make_region(2);

	ck_assert_int_eq(vrange_mark_volatile(r, 0, 0), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, 0), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_is_volatile(r, 0, 0), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 0), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, 0), VRANGE_INTACT);
	ck_assert_int_eq(pg_vol(r, 0), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 2 * ps), VRANGE_PURGED);
	vrange_region_destroy(r);
}
END_TEST

/*
 * len == 0 is a no-op wherever off points: unaligned, on the last byte, at
 * or past the end.  Rounding an empty range outward used to name the page
 * around off, so an empty unmark forgot a purge and the real unmark then
 * said INTACT over a zeroed page.
 */
START_TEST(region_len_zero_unaligned)
{
	vrange_region *r = make_region(3);
	char *b = vrange_region_base(r);
	const size_t offs[] = { 1, 100, ps - 1, ps + 1, 3 * ps - 1, 3 * ps,
				3 * ps + 5, SIZE_MAX };
	int purged = 4;

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		ck_assert_int_eq(vrange_mark_volatile(r, offs[i], 0), 0);
		ck_assert_int_eq(vrange_is_volatile(r, offs[i], 0), 0);
	}
	ck_assert_int_eq(vrange_is_volatile(r, 0, 3 * ps), 0);

	ck_assert_int_eq(vrange_mark_volatile(r, 0, 3 * ps), 0);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		ck_assert_msg(vrange_is_volatile(r, offs[i], 0) == 0,
			      "is_volatile(off %zu, 0) on volatile pages", offs[i]);
		ck_assert_int_eq(vrange_mark_nonvolatile(r, offs[i], 0), VRANGE_INTACT);
	}
	/* The empty unmarks left every page volatile. */
	for (size_t pg = 0; pg < 3; pg++)
		ck_assert_int_eq(pg_vol(r, pg), 1);

	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(3 * ps));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps + 1, 0), VRANGE_INTACT);
	ck_assert_int_eq(vrange(b + ps + 1, 0, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);
	/* The purge is still remembered, page by page. */
	for (size_t pg = 0; pg < 3; pg++)
		ck_assert_int_eq(vrange_mark_nonvolatile(r, pg * ps, ps), VRANGE_PURGED);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(region_range_errors)
{
	vrange_region *r = make_region(4);
	const size_t size = 4 * ps;

	ck_assert_int_eq(vrange_is_volatile(r, 0, size), 0);
	ck_assert_int_eq(vrange_is_volatile(r, size - 1, 1), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, size), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, size, ps), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, size + ps, 1), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, SIZE_MAX, 1), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, SIZE_MAX), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, SIZE_MAX - ps + 1, 2 * ps), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, SIZE_MAX, SIZE_MAX), -EINVAL);
	ck_assert_int_eq(vrange_is_volatile(r, 0, size), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), 0);

	ck_assert_int_eq(vrange_is_volatile(r, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_is_volatile(r, size, 1), -EINVAL);
	ck_assert_int_eq(vrange_is_volatile(r, ps, SIZE_MAX), -EINVAL);

	ck_assert_int_eq(vrange_mark_volatile(r, 0, size), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, size + 1), -EINVAL);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, ps, SIZE_MAX), -EINVAL);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, SIZE_MAX, 2), -EINVAL);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, size + ps), -EINVAL);
	for (size_t i = 0; i < 4; i++)
		ck_assert_int_eq(pg_vol(r, i), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, size), VRANGE_INTACT);
	for (size_t i = 0; i < 4; i++)
		ck_assert(pg_intact(r, i));
	vrange_region_destroy(r);
}
END_TEST

START_TEST(region_rounding)
{
	vrange_region *r = make_region(4);

	/* Volatile rounds inward. */
	ck_assert_int_eq(vrange_mark_volatile(r, 1, ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, ps - 1, 2 * ps + 2), 0);
	ck_assert_int_eq(pg_vol(r, 0), 0);
	ck_assert_int_eq(pg_vol(r, 1), 1);
	ck_assert_int_eq(pg_vol(r, 2), 1);
	ck_assert_int_eq(pg_vol(r, 3), 0);
	/* Up to the region's end, one byte short of the last page. */
	ck_assert_int_eq(vrange_mark_volatile(r, 3 * ps + 1, ps - 1), 0);
	ck_assert_int_eq(pg_vol(r, 3), 0);
	/* Querying rounds outward. */
	ck_assert_int_eq(vrange_is_volatile(r, ps - 1, 1), 0);
	ck_assert_int_eq(vrange_is_volatile(r, ps - 1, 2), 1);
	ck_assert_int_eq(vrange_is_volatile(r, 3 * ps - 1, 1), 1);
	ck_assert_int_eq(vrange_is_volatile(r, 4 * ps - 1, 1), 0);
	/* The partly covered pages survive a purge. */
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(pg_intact(r, 0));
	ck_assert(pg_intact(r, 3));
	/* Non-volatile rounds outward: a byte of page 1 and one of page 2. */
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps - 1, 1), VRANGE_PURGED);
	ck_assert_int_eq(pg_vol(r, 1), 0);
	ck_assert_int_eq(pg_vol(r, 2), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps + ps / 2, 1), VRANGE_PURGED);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 4 * ps), 0);
	vrange_region_destroy(r);
}
END_TEST

/* ---- vrange(), the address form --------------------------------------------- */

START_TEST(vrange_address_form)
{
	vrange_region *r = make_region(4);
	unsigned char *b = vrange_region_base(r);
	int purged = -1;

	ck_assert_int_eq(vrange(b + ps, 2 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(pg_vol(r, 0), 0);
	ck_assert_int_eq(pg_vol(r, 1), 1);
	ck_assert_int_eq(pg_vol(r, 2), 1);
	ck_assert_int_eq(vrange(b + ps, 2 * ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);
	ck_assert_int_eq(pg_vol(r, 1), 0);

	ck_assert_int_eq(vrange(b + ps, 2 * ps, VRANGE_VOLATILE, &purged), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(pg_zero(r, 1));
	purged = -1;
	ck_assert_int_eq(vrange(b + ps, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	purged = -1;
	ck_assert_int_eq(vrange(b + ps, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 0);
	/* purged may be NULL; the report is then consumed all the same. */
	ck_assert_int_eq(vrange(b + 2 * ps, ps, VRANGE_NONVOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 2 * ps, ps), VRANGE_INTACT);
	/* The whole region, up to its last byte. */
	ck_assert_int_eq(vrange(b, 4 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 4 * ps), 1);
	ck_assert_int_eq(vrange(b + 4 * ps - 1, 1, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(pg_vol(r, 3), 0);
	vrange_region_destroy(r);
}
END_TEST

/* vrange() remembers the thread's last region: a region destroyed and
 * another created (mmap usually hands back the same address) must be
 * found afresh, never the old one's state. */
START_TEST(vrange_after_destroy_and_create)
{
	vrange_region *r1 = make_region(4), *r2, *r3;
	unsigned char *b1 = vrange_region_base(r1);
	int purged = -1;

	ck_assert_int_eq(vrange(b1 + ps, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange(b1 + ps, ps, VRANGE_NONVOLATILE, &purged), 0);
	vrange_region_destroy(r1);
	r2 = make_region(4);
	if ((unsigned char *)vrange_region_base(r2) == b1) {
		ck_assert_int_eq(vrange(b1 + ps, ps, VRANGE_VOLATILE, NULL), 0);
		ck_assert_int_eq(pg_vol(r2, 1), 1);
		ck_assert_int_eq(vrange_mark_nonvolatile(r2, ps, ps), VRANGE_INTACT);
	} else {
		ck_assert_int_lt(vrange(b1 + ps, ps, VRANGE_VOLATILE, NULL), 0);
	}
	/* A smaller region at the same place: the old extent is gone too. */
	vrange_region_destroy(r2);
	r3 = make_region(1);
	ck_assert_int_eq(vrange(vrange_region_base(r3), ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(pg_vol(r3, 0), 1);
	if ((unsigned char *)vrange_region_base(r3) == b1)
		ck_assert_int_lt(vrange(b1, 2 * ps, VRANGE_VOLATILE, NULL), 0);
	vrange_region_destroy(r3);
}
END_TEST

/* The address form mixes freely with the region form. */
START_TEST(vrange_mixes_with_region_calls)
{
	vrange_region *r = make_region(2);
	unsigned char *b = vrange_region_base(r);
	int purged = -1;

	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_region_purge(r), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange(b, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	ck_assert_int_eq(vrange(b, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 2 * ps), VRANGE_PURGED);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(vrange_rounding)
{
	vrange_region *r = make_region(4);
	unsigned char *b = vrange_region_base(r);
	int purged = -1;

	ck_assert_int_eq(vrange(b + 1, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange(b + ps - 1, 2 * ps + 2, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(pg_vol(r, 0), 0);
	ck_assert_int_eq(pg_vol(r, 1), 1);
	ck_assert_int_eq(pg_vol(r, 2), 1);
	ck_assert_int_eq(pg_vol(r, 3), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert(pg_intact(r, 0));
	ck_assert(pg_intact(r, 3));
	/* Two bytes straddling pages 0 and 1: page 1 was purged. */
	ck_assert_int_eq(vrange(b + ps - 1, 2, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	ck_assert_int_eq(pg_vol(r, 1), 0);
	ck_assert_int_eq(pg_vol(r, 2), 1);
	ck_assert_int_eq(vrange(b + 3 * ps - 1, 1, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 4 * ps), 0);
	vrange_region_destroy(r);
}
END_TEST

/* A mode other than the two is -EINVAL and changes nothing. */
START_TEST(vrange_bad_mode)
{
	vrange_region *r = make_region(2);
	unsigned char *b = vrange_region_base(r);
	const int modes[] = { 2, 3, -1, 42, INT_MIN, INT_MAX };
	int purged = 9;

	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		ck_assert_int_eq(vrange(b, 2 * ps, modes[i], &purged), -EINVAL);
		ck_assert_int_eq(vrange(b, 2 * ps, modes[i], NULL), -EINVAL);
		ck_assert_int_eq(purged, 9);
	}
	ck_assert_int_eq(pg_vol(r, 0), 1);
	ck_assert_int_eq(pg_vol(r, 1), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		ck_assert_int_eq(vrange(b, ps, modes[i], &purged), -EINVAL);
	/* The purge report is still there. */
	ck_assert_int_eq(vrange(b, ps, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	vrange_region_destroy(r);
}
END_TEST

static void expect_noent_or_inval(int ret, const char *what)
{
	ck_assert_msg(ret == -ENOENT || ret == -EINVAL, "%s: %d", what, ret);
}

/* NULL, wrapping, and ranges not wholly inside one region. */
START_TEST(vrange_address_errors)
{
	vrange_region *r = make_region(4);
	char *b = vrange_region_base(r);
	const size_t size = 4 * ps;
	int purged = 3, ret;
	char *hole;

	ck_assert_int_eq(vrange_mark_volatile(r, 0, size), 0);

	expect_noent_or_inval(vrange(NULL, ps, VRANGE_VOLATILE, NULL), "NULL vol");
	expect_noent_or_inval(vrange(NULL, ps, VRANGE_NONVOLATILE, &purged), "NULL nonvol");
	expect_noent_or_inval(vrange((void *)(uintptr_t)(UINTPTR_MAX - ps + 1), 2 * ps,
				     VRANGE_VOLATILE, NULL), "wrap at top");
	expect_noent_or_inval(vrange(b + ps, SIZE_MAX, VRANGE_NONVOLATILE, &purged),
			      "wrap from region");
	expect_noent_or_inval(vrange(b, SIZE_MAX - (uintptr_t)b + 2, VRANGE_VOLATILE, NULL),
			      "wrap to low");
	/* Running out of the region at either end. */
	expect_noent_or_inval(vrange(b + size - ps, 2 * ps, VRANGE_NONVOLATILE, &purged),
			      "past end");
	expect_noent_or_inval(vrange(b + size - 1, 2, VRANGE_NONVOLATILE, &purged),
			      "one byte past end");
	expect_noent_or_inval(vrange(b - ps, 2 * ps, VRANGE_NONVOLATILE, &purged),
			      "before start");
	expect_noent_or_inval(vrange(b - 1, ps, VRANGE_NONVOLATILE, &purged),
			      "one byte before start");
	ck_assert_int_eq(purged, 3);
	/* None of that made anything non-volatile. */
	for (size_t i = 0; i < 4; i++)
		ck_assert_int_eq(pg_vol(r, i), 1);

	/* Not mapped at all: -ENOENT. */
	hole = mmap(NULL, 3 * ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(hole, MAP_FAILED);
	ck_assert_int_eq(munmap(hole, 3 * ps), 0);
	/* (The library's own allocations may land in the hole during the
	 * call; only a hole still empty afterwards proves a wrong answer.) */
	ret = vrange(hole + ps, ps, VRANGE_VOLATILE, NULL);
	ck_assert_msg(ret == -ENOENT || !unmapped(hole, 3 * ps), "hole vol %d", ret);
	ret = vrange(hole, 3 * ps, VRANGE_NONVOLATILE, &purged);
	ck_assert_msg(ret == -ENOENT || !unmapped(hole, 3 * ps), "hole nonvol %d", ret);
	purged = 3; /* set above if the library's allocations filled the hole */
	/* Kernel addresses are never mapped for a program. */
	ck_assert_int_eq(vrange((void *)(uintptr_t)0xffff800000001000ULL, ps,
				VRANGE_VOLATILE, NULL), -ENOENT);
	ck_assert_int_eq(vrange((void *)(uintptr_t)0xffff800000001000ULL, ps,
				VRANGE_NONVOLATILE, &purged), -ENOENT);
	ck_assert_int_eq(purged, 3);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, size), VRANGE_INTACT);
	vrange_region_destroy(r);
}
END_TEST

/* len == 0: a no-op that succeeds. */
START_TEST(vrange_len_zero)
{
	vrange_region *r = make_region(1);
	char *b = vrange_region_base(r);
	int purged = 4;

	ck_assert_int_eq(vrange(b, 0, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(pg_vol(r, 0), 0);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(vrange(b, 0, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_msg(purged == 0 || purged == 4, "purged %d", purged);
	ck_assert_int_eq(vrange(b + 10, 0, VRANGE_NONVOLATILE, NULL), 0);
	ck_assert_int_eq(pg_vol(r, 0), 1);
	ck_assert_int_eq(vrange(b, 1, VRANGE_NONVOLATILE, &purged), 0);
	ck_assert_int_eq(purged, 1);
	vrange_region_destroy(r);
}
END_TEST

/*
 * Address lookup among many regions finds the right one: enough regions
 * for the table's blocks (of 128) to split, and destroys that empty whole
 * blocks, with lookups at every region's edges.
 */
START_TEST(vrange_many_regions)
{
	enum { N = 600 };
	vrange_region **rs = calloc(N, sizeof(*rs));
	int purged;

	ck_assert_ptr_nonnull(rs);
	for (int i = 0; i < N; i++)
		rs[i] = make_region(1 + (size_t)(i % 3));
	for (int i = 0; i < N; i += 2)
		ck_assert_int_eq(vrange(vrange_region_base(rs[i]), ps,
					VRANGE_VOLATILE, NULL), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(pg_vol(rs[i], 0), i % 2 == 0);
	ck_assert_uint_eq(stats().regions, N);
	/* Destroy a few in the middle, then a run of 300 made one after
	 * another (neighbours in the table: whole blocks go); the others
	 * are still found, and no range runs from one into the next. */
	for (int i = 0; i < N; i += 4) {
		ck_assert_int_eq(vrange_region_destroy(rs[i]), 0);
		rs[i] = NULL;
	}
	for (int i = 100; i < 400; i++) {
		ck_assert_int_eq(vrange_region_destroy(rs[i]), 0);
		rs[i] = NULL;
	}
	ck_assert_uint_eq(stats().regions, N - N / 4 - 300 + 300 / 4);
	for (int i = 0; i < N; i++) {
		char *b;
		size_t sz;

		if (!rs[i])
			continue;
		b = vrange_region_base(rs[i]);
		sz = vrange_region_size(rs[i]);
		purged = -1;
		ck_assert_int_eq(vrange(b, sz, VRANGE_NONVOLATILE, &purged), 0);
		ck_assert_int_eq(purged, 0);
		ck_assert_int_eq(pg_vol(rs[i], 0), 0);
		ck_assert_int_eq(vrange(b + sz - ps, ps, VRANGE_VOLATILE, NULL), 0);
		ck_assert_int_eq(pg_vol(rs[i], sz / ps - 1), 1);
		expect_noent_or_inval(vrange(b + sz - ps, 2 * ps, VRANGE_NONVOLATILE,
					     &purged), "into the next");
		expect_noent_or_inval(vrange(b - 1, 2, VRANGE_NONVOLATILE, &purged),
				      "from below");
	}
	for (int i = 0; i < N; i++)
		vrange_region_destroy(rs[i]);
	free(rs);
	ck_assert_uint_eq(stats().regions, 0);
}
END_TEST

/* ---- purge order and priority ------------------------------------------------ */

START_TEST(order_lru_across_regions)
{
	vrange_region *a = make_region(1), *b = make_region(1), *c = make_region(1);

	ck_assert_int_eq(vrange_mark_volatile(b, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(c, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(a, 0, ps), 0);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(b, 0));
	ck_assert(pg_intact(c, 0));
	ck_assert(pg_intact(a, 0));
	ck_assert_int_eq(vrange_purge(1), (ssize_t)ps);
	ck_assert(pg_zero(c, 0));
	ck_assert(pg_intact(a, 0));
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 0, ps), VRANGE_INTACT);
	vrange_region_destroy(a);
	vrange_region_destroy(b);
	vrange_region_destroy(c);
}
END_TEST

/*
 * A purge step takes several of a file's oldest ranges at once (and punches
 * neighbours as one hole), but never one that another file's older range
 * should go before: single pages marked alternately in two regions purge
 * in exactly their marking order.
 */
START_TEST(order_exact_across_batches)
{
	enum { N = 16 };
	vrange_region *a = make_region(N), *b = make_region(N);
	vrange_region *order[2 * N];
	size_t page[2 * N];

	for (size_t i = 0; i < N; i++) {
		ck_assert_int_eq(vrange_mark_volatile(a, i * ps, ps), 0);
		ck_assert_int_eq(vrange_mark_volatile(b, i * ps, ps), 0);
		order[2 * i] = a, page[2 * i] = i;
		order[2 * i + 1] = b, page[2 * i + 1] = i;
	}
	ck_assert_int_eq(vrange_purge(5 * ps), (ssize_t)(5 * ps));
	ck_assert_int_eq(vrange_purge(3 * ps), (ssize_t)(3 * ps));
	for (size_t k = 0; k < 2 * N; k++)
		ck_assert_msg(k < 8 ? pg_zero(order[k], page[k]) : pg_intact(order[k], page[k]),
			      "mark #%zu (%s page %zu) %s", k, order[k] == a ? "a" : "b",
			      page[k], k < 8 ? "not purged" : "purged out of order");
	/* One region alone: a page cache's pages, marked one by one. */
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 0, N * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(b, 0, N * ps), VRANGE_PURGED);
	for (size_t i = 0; i < N; i++)
		ck_assert_int_eq(vrange_mark_volatile(a, i * ps, ps), 0);
	ck_assert_int_eq(vrange_purge(5 * ps), (ssize_t)(5 * ps));
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 0, 5 * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 5 * ps, (N - 5) * ps), VRANGE_INTACT);
	vrange_region_destroy(a);
	vrange_region_destroy(b);
}
END_TEST

START_TEST(order_lru_in_region_and_refresh)
{
	vrange_region *r = make_region(5);

	for (size_t pg = 4;; pg--) {
		ck_assert_int_eq(vrange_mark_volatile(r, pg * ps, ps), 0);
		if (pg == 0)
			break;
	}
	/* Order now 4 3 2 1 0; refresh 4 and 2: 3 1 0 4 2. */
	ck_assert_int_eq(vrange_mark_volatile(r, 4 * ps, ps), 0);
	ck_assert_int_eq(vrange(vrange_region_base(r), 0, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange((char *)vrange_region_base(r) + 2 * ps, ps,
				VRANGE_VOLATILE, NULL), 0);
	const size_t expect[] = { 3, 1, 0, 4, 2 };

	for (size_t i = 0; i < 5; i++) {
		ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
		for (size_t j = 0; j < 5; j++) {
			int gone = 0;

			for (size_t k = 0; k <= i; k++)
				gone |= expect[k] == j;
			ck_assert_msg(gone ? pg_zero(r, j) : pg_intact(r, j),
				      "step %zu page %zu", i, j);
		}
	}
	ck_assert_int_eq(vrange_purge(ps), 0);
	vrange_region_destroy(r);
}
END_TEST

/* Lower priority first, whatever the age; within a priority, oldest first. */
START_TEST(order_priority)
{
	vrange_region *hi = make_region(2), *mid = make_region(1), *lo = make_region(1);
	int fd = memfd_create("prio0-file", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)ps), 0);
	ck_assert_int_eq(pwrite(fd, "z", 1, 0), 1);
	ck_assert_int_eq(vrange_region_set_priority(hi, 5), 0);
	ck_assert_int_eq(vrange_region_set_priority(lo, -3), 0);
	ck_assert_int_eq(vrange_region_set_priority(mid, 0), 0);

	ck_assert_int_eq(vrange_mark_volatile(hi, 0, ps), 0);     /* oldest, prio 5 */
	ck_assert_int_eq(vrange_mark_volatile(mid, 0, ps), 0);    /* prio 0 */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0); /* file: 0 */
	ck_assert_int_eq(vrange_mark_volatile(hi, ps, ps), 0);    /* prio 5 */
	ck_assert_int_eq(vrange_mark_volatile(lo, 0, ps), 0);     /* newest, prio -3 */

	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(lo, 0));
	ck_assert(pg_intact(mid, 0));
	ck_assert(pg_intact(hi, 0));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(mid, 0));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert(pg_intact(hi, 0));
	ck_assert(pg_intact(hi, 1));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(hi, 0));
	ck_assert(pg_intact(hi, 1));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(hi, 1));
	vrange_region_destroy(hi);
	vrange_region_destroy(mid);
	vrange_region_destroy(lo);
	close(fd);
}
END_TEST

/* A new priority applies to pages marked after it is set. */
START_TEST(priority_applies_to_new_marks)
{
	vrange_region *a = make_region(1), *b = make_region(1);

	ck_assert_int_eq(vrange_mark_volatile(a, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(b, 0, ps), 0);
	ck_assert_int_eq(vrange_region_set_priority(a, INT_MAX), 0);
	ck_assert_int_eq(vrange_mark_volatile(a, 0, ps), 0);
	ck_assert_int_eq(vrange_region_set_priority(b, INT_MIN), 0);
	ck_assert_int_eq(vrange_region_set_priority(b, 0), 0);
	ck_assert_int_eq(vrange_mark_volatile(b, 0, ps), 0);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(b, 0));
	ck_assert(pg_intact(a, 0));
	vrange_region_destroy(a);
	vrange_region_destroy(b);
}
END_TEST

/* The default priority is 0: between -1 and 1, and equal to the file
 * layer's (so age decides between them). */
START_TEST(priority_default_zero)
{
	vrange_region *dflt = make_region(1), *neg = make_region(1), *pos = make_region(1);
	vrange_region *dflt2 = make_region(1);
	int fd = memfd_create("prio-file", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)ps), 0);
	ck_assert_int_eq(pwrite(fd, "q", 1, 0), 1);
	ck_assert_int_eq(vrange_region_set_priority(neg, -1), 0);
	ck_assert_int_eq(vrange_region_set_priority(pos, 1), 0);
	ck_assert_int_eq(vrange_mark_volatile(pos, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(dflt, 0, ps), 0);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 0, (off_t)ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(dflt2, 0, ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(neg, 0, ps), 0);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(neg, 0));
	ck_assert(pg_intact(dflt, 0));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(dflt, 0));
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, 1), 1);
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_PURGED);
	ck_assert(pg_intact(dflt2, 0));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(dflt2, 0));
	ck_assert(pg_intact(pos, 0));
	ck_assert_int_eq(vrange_purge(ps), (ssize_t)ps);
	ck_assert(pg_zero(pos, 0));
	vrange_region_destroy(dflt);
	vrange_region_destroy(dflt2);
	vrange_region_destroy(neg);
	vrange_region_destroy(pos);
	close(fd);
}
END_TEST

/* ---- vrange_region_purge, real release, stats ------------------------------- */

START_TEST(region_purge_one_region)
{
	vrange_region *a = make_region(8), *b = make_region(2);
	unsigned char *ba = vrange_region_base(a);
	struct vrange_stats s0, s;
	long long blk_a, blk_b;

	ck_assert_int_eq(vrange_region_purge(a), 0); /* nothing volatile */
	ck_assert_int_eq(vrange_mark_volatile(b, 0, 2 * ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(a, 2 * ps, 3 * ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(a, 6 * ps, ps), 0);
	blk_a = region_blocks(a);
	blk_b = region_blocks(b);
	ck_assert_int_ge(blk_a, pages_blocks(8));
	ck_assert_uint_eq(resident_pages(ba, 8 * ps), 8);
	s0 = stats();
	ck_assert_int_eq(vrange_region_purge(a), (ssize_t)(4 * ps));
	s = stats();
	ck_assert_int_eq(region_blocks(a), blk_a - pages_blocks(4));
	ck_assert_uint_eq(resident_pages(ba, 8 * ps), 4);
	ck_assert_uint_eq(resident_pages(ba + 2 * ps, 3 * ps), 0);
	ck_assert_uint_eq(s.purged_bytes, s0.purged_bytes + 4 * ps);
	ck_assert_uint_eq(s.purged_total, s0.purged_total + 4 * ps);
	ck_assert_uint_ge(s.purges, s0.purges + 1);
	for (size_t i = 0; i < 8; i++) {
		int vol = (i >= 2 && i < 5) || i == 6;

		ck_assert(vol ? pg_zero(a, i) : pg_intact(a, i));
		ck_assert_int_eq(pg_vol(a, i), vol);
	}
	/* The other region was left alone. */
	ck_assert(pg_intact(b, 0));
	ck_assert_int_eq(region_blocks(b), blk_b);
	ck_assert_int_eq(vrange_region_purge(a), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(b, 0, 2 * ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 0, 8 * ps), VRANGE_PURGED);
	vrange_region_destroy(a);
	vrange_region_destroy(b);
}
END_TEST

/* A 64 MiB region purged in full: st_blocks and residency fall to zero. */
START_TEST(purge_releases_memory)
{
	const size_t size = 64u << 20;
	vrange_region *r = NULL;
	unsigned char *b;
	long long blk, blk0;

	ck_assert_int_eq(vrange_region_create("big", size, VRANGE_ACCESS_ZERO, &r), 0);
	b = vrange_region_base(r);
	blk0 = region_blocks(r);
	memset(b, 0x3c, size);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, size), 0);
	blk = region_blocks(r);
	ck_assert_int_ge(blk, blk0 + pages_blocks(size / ps));
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)size);
	ck_assert_int_eq(blk - region_blocks(r), pages_blocks(size / ps));
	ck_assert_int_le(region_blocks(r), pages_blocks(16));
	ck_assert_uint_eq(resident_pages(b, size), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, size), VRANGE_PURGED);
	vrange_region_destroy(r);
}
END_TEST

/* Purging frees only allocated pages: never-touched volatile pages add
 * nothing to the bytes returned. */
START_TEST(purge_counts_bytes_really_freed)
{
	vrange_region *r = NULL;
	long long blk0;
	char *b;

	ck_assert_int_eq(vrange_region_create("sparse", 16 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	b = vrange_region_base(r);
	blk0 = region_blocks(r);
	b[0] = 1;
	b[5 * ps] = 1;
	b[15 * ps] = 1;
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 16 * ps), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)(3 * ps));
	ck_assert_int_eq(region_blocks(r), blk0);
	ck_assert_uint_eq(resident_pages(b, 16 * ps), 0);
	vrange_region_destroy(r);
}
END_TEST

START_TEST(stats_regions)
{
	vrange_region *a = make_region(4), *b = make_region(2);
	struct vrange_stats s0 = stats(), s;

	ck_assert_uint_eq(s0.regions, 2);
	ck_assert_uint_eq(s0.volatile_bytes, 0);
	ck_assert_uint_eq(s0.purged_bytes, 0);
	ck_assert_int_eq(vrange_mark_volatile(a, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange_mark_volatile(b, ps, ps), 0);
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 5 * ps);
	ck_assert_uint_eq(s.purged_bytes, 0);
	ck_assert_int_eq(vrange_purge(2 * ps), (ssize_t)(2 * ps));
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 5 * ps);
	ck_assert_uint_eq(s.purged_bytes, 2 * ps);
	ck_assert_uint_eq(s.purged_total, s0.purged_total + 2 * ps);
	ck_assert_uint_ge(s.purges, s0.purges + 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(a, 0, ps), VRANGE_PURGED);
	s = stats();
	ck_assert_uint_eq(s.volatile_bytes, 4 * ps);
	ck_assert_uint_eq(s.purged_bytes, ps);
	ck_assert_int_eq(vrange_region_destroy(a), 0);
	s = stats();
	ck_assert_uint_eq(s.regions, 1);
	ck_assert_uint_eq(s.volatile_bytes, ps);
	ck_assert_uint_eq(s.purged_bytes, 0);
	ck_assert_uint_eq(s.purged_total, s0.purged_total + 2 * ps);
	vrange_region_destroy(b);
	ck_assert_uint_eq(stats().regions, 0);
	ck_assert_uint_eq(stats().volatile_bytes, 0);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("region");
	TCase *tc;

	tc = tcase_create("create");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, create_basic);
	tcase_add_test(tc, create_rounds_size);
	tcase_add_test(tc, create_memfd_exact_size);
	tcase_add_test(tc, create_errors);
	tcase_add_test(tc, create_long_name);
	tcase_add_test(tc, create_gib_nothing_resident);
	tcase_add_test(tc, null_region);
	tcase_add_test(tc, access_default_and_explicit);
	tcase_add_test(tc, zero_mode_reads_zeros);
	suite_add_tcase(s, tc);

	tc = tcase_create("adopt");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, adopt_basic);
	tcase_add_test(tc, adopt_unaligned_size);
	tcase_add_test(tc, adopt_errors);
	tcase_add_test(tc, adopt_shares_with_fd_layer);
	tcase_add_test(tc, adopt_second_mapping);
	tcase_add_test(tc, adopt_dup);
	tcase_add_test(tc, adopt_proc_reopen_of_region);
	tcase_add_test(tc, fd_layer_on_region_fd);
	tcase_add_test(tc, destroy_forgets);
	suite_add_tcase(s, tc);

	tc = tcase_create("mark");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, region_mark_cycle);
	tcase_add_test(tc, region_purged_exactly);
	tcase_add_test(tc, region_len_zero);
	tcase_add_test(tc, region_len_zero_unaligned);
	tcase_add_test(tc, region_range_errors);
	tcase_add_test(tc, region_rounding);
	suite_add_tcase(s, tc);

	tc = tcase_create("vrange");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, vrange_address_form);
	tcase_add_test(tc, vrange_mixes_with_region_calls);
	tcase_add_test(tc, vrange_after_destroy_and_create);
	tcase_add_test(tc, vrange_rounding);
	tcase_add_test(tc, vrange_bad_mode);
	tcase_add_test(tc, vrange_address_errors);
	tcase_add_test(tc, vrange_len_zero);
	tcase_add_test(tc, vrange_many_regions);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, order_lru_across_regions);
	tcase_add_test(tc, order_exact_across_batches);
	tcase_add_test(tc, order_lru_in_region_and_refresh);
	tcase_add_test(tc, order_priority);
	tcase_add_test(tc, priority_applies_to_new_marks);
	tcase_add_test(tc, priority_default_zero);
	suite_add_tcase(s, tc);

	tc = tcase_create("purge");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, region_purge_one_region);
	tcase_add_test(tc, purge_releases_memory);
	tcase_add_test(tc, purge_counts_bytes_really_freed);
	tcase_add_test(tc, stats_regions);
	suite_add_tcase(s, tc);

	return s;
}
