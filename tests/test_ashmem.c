/* SPDX-License-Identifier: MIT */
/*
 * test_ashmem - the ashmem shim, driven the way Android code drives the
 * driver: raw ioctls with the numbers defined here, no libvrange header.
 * Run with LD_PRELOAD=libvrange-ashmem.so (shim/meson.build does that), once
 * built plain and once with -D_FILE_OFFSET_BITS=64.
 *
 * Cross-process cases fork, exec this very binary (a constructor below
 * runs the exec'd child's half) or pass the fd over a Unix socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "test_main.h"

#if defined(_FILE_OFFSET_BITS) && _FILE_OFFSET_BITS == 64
#define _FILE_OFFSET_BITS_NAME "ashmem (_FILE_OFFSET_BITS=64)"
#else
#define _FILE_OFFSET_BITS_NAME "ashmem"
#endif

/* The driver's ABI, as clients define it. */
#define ASHMEM_NAME_LEN 256
struct ashmem_pin {
	uint32_t offset;
	uint32_t len;
};
#define __ASHMEMIOC 0x77
#define ASHMEM_SET_NAME _IOW(__ASHMEMIOC, 1, char[ASHMEM_NAME_LEN])
#define ASHMEM_GET_NAME _IOR(__ASHMEMIOC, 2, char[ASHMEM_NAME_LEN])
#define ASHMEM_SET_SIZE _IOW(__ASHMEMIOC, 3, size_t)
#define ASHMEM_GET_SIZE _IO(__ASHMEMIOC, 4)
#define ASHMEM_SET_PROT_MASK _IOW(__ASHMEMIOC, 5, unsigned long)
#define ASHMEM_GET_PROT_MASK _IO(__ASHMEMIOC, 6)
#define ASHMEM_PIN _IOW(__ASHMEMIOC, 7, struct ashmem_pin)
#define ASHMEM_UNPIN _IOW(__ASHMEMIOC, 8, struct ashmem_pin)
#define ASHMEM_GET_PIN_STATUS _IO(__ASHMEMIOC, 9)
#define ASHMEM_PURGE_ALL_CACHES _IO(__ASHMEMIOC, 10)
#define ASHMEM_GET_FILE_ID _IOR(__ASHMEMIOC, 11, unsigned long)
#define ASHMEM_NOT_PURGED 0
#define ASHMEM_WAS_PURGED 1
#define ASHMEM_IS_UNPINNED 0
#define ASHMEM_IS_PINNED 1

static size_t pg;

static void setup(void)
{
	pg = (size_t)sysconf(_SC_PAGESIZE);
}

static int ash_open(int flags)
{
	int fd = open("/dev/ashmem", O_RDWR | flags);

	ck_assert_msg(fd >= 0, "open /dev/ashmem: %s (shim not preloaded?)", strerror(errno));
	return fd;
}

static int ash_new(size_t size)
{
	int fd = ash_open(0);

	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, size), 0);
	return fd;
}

static void *ash_map(int fd, size_t size, int prot)
{
	void *p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);

	ck_assert_msg(p != MAP_FAILED, "mmap: %s", strerror(errno));
	return p;
}

static int pin_op(int fd, unsigned long req, uint32_t off, uint32_t len)
{
	struct ashmem_pin pin = { off, len };

	return ioctl(fd, req, &pin);
}

/* ioctl fails with exactly this errno */
#define ck_fails(call, err)                                                    \
	do {                                                                   \
		errno = 0;                                                     \
		long r_ = (long)(call);                                        \
		ck_assert_msg(r_ == -1 && errno == (err),                      \
			      "%s: got %ld errno %d (%s), want errno %d (%s)", \
			      #call, r_, errno, strerror(errno), (err),        \
			      strerror(err));                                  \
	} while (0)

/* Does the library keep this area's volatile state for every process? */
static int state_is_shared(int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return getxattr(path, "user.vrange", NULL, 0) > 0;
}

/*
 * valgrind reports a system call given a bad buffer (which is the point of
 * the EFAULT cases that write to one): those cases are left to plain runs.
 */
static int under_valgrind(void)
{
	return getenv("VRANGE_UNDER_VALGRIND") != NULL;
}

static int has_cap_sys_admin(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	return (d[CAP_SYS_ADMIN / 32].effective >> (CAP_SYS_ADMIN % 32)) & 1;
}

/* ---- open, stat, the device it pretends to be ---- */

START_TEST(test_open_stat_chr)
{
	char boot_id[64] = "", path[128];
	struct stat fst, pst, lst, bst, ast;
	struct statx sx;
	FILE *f;
	int fd = ash_open(O_CLOEXEC);

	ck_assert_int_eq(fstat(fd, &fst), 0);
	ck_assert(S_ISCHR(fst.st_mode));
	ck_assert(fst.st_rdev != 0);
	ck_assert_int_eq(stat("/dev/ashmem", &pst), 0);
	ck_assert(S_ISCHR(pst.st_mode));
	ck_assert(pst.st_rdev == fst.st_rdev);
	ck_assert_int_eq(lstat("/dev/ashmem", &lst), 0);
	ck_assert(lst.st_rdev == fst.st_rdev);
	/* libcutils' path: /dev/ashmem + boot id */
	f = fopen("/proc/sys/kernel/random/boot_id", "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(boot_id, sizeof(boot_id), f));
	fclose(f);
	boot_id[strcspn(boot_id, "\n")] = '\0';
	snprintf(path, sizeof(path), "/dev/ashmem%s", boot_id);
	ck_assert_int_eq(stat(path, &bst), 0);
	ck_assert(S_ISCHR(bst.st_mode) && bst.st_rdev == fst.st_rdev);
	int fd2 = open(path, O_RDWR);
	ck_assert_int_ge(fd2, 0);
	ck_assert_int_eq(ioctl(fd2, ASHMEM_GET_SIZE, 0), 0);
	close(fd2);
	fd2 = openat(AT_FDCWD, "/dev/ashmem", O_RDWR);
	ck_assert_int_ge(fd2, 0);
	ck_assert_int_eq(fstatat(fd2, "", &ast, AT_EMPTY_PATH), 0);
	ck_assert(S_ISCHR(ast.st_mode) && ast.st_rdev == fst.st_rdev);
	close(fd2);
	ck_assert_int_eq(fstatat(AT_FDCWD, "/dev/ashmem", &ast, 0), 0);
	ck_assert(ast.st_rdev == fst.st_rdev);
	/* statx, by path and by fd */
	ck_assert_int_eq(statx(AT_FDCWD, "/dev/ashmem", 0, STATX_BASIC_STATS, &sx), 0);
	ck_assert(S_ISCHR(sx.stx_mode));
	ck_assert(makedev(sx.stx_rdev_major, sx.stx_rdev_minor) == fst.st_rdev);
	ck_assert_int_eq(statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx), 0);
	ck_assert(S_ISCHR(sx.stx_mode));
	ck_assert(makedev(sx.stx_rdev_major, sx.stx_rdev_minor) == fst.st_rdev);
	close(fd);
}
END_TEST

START_TEST(test_not_a_memfd)
{
	char path[64], target[256];
	int fd = ash_open(0);
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	ck_assert_int_gt(n, 0);
	target[n] = '\0';
	ck_assert_msg(strncmp(target, "/memfd:", 7) != 0, "link reads %s", target);
	close(fd);
}
END_TEST

START_TEST(test_cloexec)
{
	int a = ash_open(O_CLOEXEC), b = ash_open(0);

	ck_assert_int_eq(fcntl(a, F_GETFD), FD_CLOEXEC);
	ck_assert_int_eq(fcntl(b, F_GETFD), 0);
	/* FIOCLEX / FIONCLEX reach the fd as on any file */
	ck_assert_int_eq(ioctl(b, FIOCLEX), 0);
	ck_assert_int_eq(fcntl(b, F_GETFD), FD_CLOEXEC);
	ck_assert_int_eq(ioctl(a, FIONCLEX), 0);
	ck_assert_int_eq(fcntl(a, F_GETFD), 0);
	close(a);
	close(b);
}
END_TEST

/* ---- SET_NAME / GET_NAME ---- */

START_TEST(test_name)
{
	char name[ASHMEM_NAME_LEN], longname[300];
	int fd = ash_open(0);
	void *p;

	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_NAME, name), 0);
	ck_assert_str_eq(name, "dev/ashmem");
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_NAME, "my-area"), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_NAME, name), 0);
	ck_assert_str_eq(name, "my-area");
	/* longer than the buffer: truncated to 255 characters */
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_NAME, longname), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_NAME, name), 0);
	ck_assert_uint_eq(strlen(name), ASHMEM_NAME_LEN - 1);
	/* bad pointers */
	ck_fails(ioctl(fd, ASHMEM_SET_NAME, (void *)8), EFAULT);
	if (!under_valgrind()) {
		ck_fails(ioctl(fd, ASHMEM_GET_NAME, (void *)8), EFAULT);
		ck_fails(ioctl(fd, ASHMEM_GET_NAME, (void *)"read-only literal"), EFAULT);
	}
	/* after mmap the name is fixed */
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, pg), 0);
	p = ash_map(fd, pg, PROT_READ);
	ck_fails(ioctl(fd, ASHMEM_SET_NAME, "too-late"), EINVAL);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_NAME, name), 0);
	ck_assert_uint_eq(strlen(name), ASHMEM_NAME_LEN - 1);
	munmap(p, pg);
	close(fd);
}
END_TEST

/* ---- SET_SIZE / GET_SIZE and the mmap rules ---- */

START_TEST(test_size_and_mmap_rules)
{
	int fd = ash_open(0);
	size_t size = 3 * pg + 100; /* not page-aligned */
	void *p;

	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_SIZE, 0), 0);
	/* mmap before SET_SIZE */
	ck_assert(mmap(NULL, pg, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, size), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_SIZE, 0), (int)size);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, 2 * size), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, size), 0);
	/* larger than the page-aligned size */
	ck_assert(mmap(NULL, 5 * pg, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EINVAL);
	/* the page-aligned size itself is fine */
	p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE);
	memset(p, 1, 4 * pg);
	ck_fails(ioctl(fd, ASHMEM_SET_SIZE, pg), EINVAL);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_SIZE, 0), (int)size);
	/* an offset that runs past the area */
	ck_assert(mmap(NULL, 2 * pg, PROT_READ, MAP_SHARED, fd, 3 * pg) == MAP_FAILED);
	ck_assert_int_eq(errno, EINVAL);
	munmap(p, 4 * pg);
	/* a second mapping sees the same memory */
	p = ash_map(fd, 4 * pg, PROT_READ);
	ck_assert_int_eq(((char *)p)[4 * pg - 1], 1);
	munmap(p, 4 * pg);
	close(fd);
}
END_TEST

START_TEST(test_private_mapping_is_anonymous)
{
	int fd = ash_new(pg);
	char *s = ash_map(fd, pg, PROT_READ | PROT_WRITE);
	char *q;

	s[0] = 'S';
	q = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	ck_assert(q != MAP_FAILED);
	/* The driver (5.x) made private mappings anonymous: zeros. */
	ck_assert_int_eq(q[0], 0);
	q[0] = 'Q';
	ck_assert_int_eq(s[0], 'S');
	munmap(q, pg);
	munmap(s, pg);
	close(fd);
}
END_TEST

/* ---- SET_PROT_MASK / GET_PROT_MASK ---- */

START_TEST(test_prot_mask)
{
	int fd = ash_new(2 * pg);
	char *rw, *ro;

	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_PROT_MASK), PROT_READ | PROT_WRITE | PROT_EXEC);
	rw = ash_map(fd, pg, PROT_READ | PROT_WRITE);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_PROT_MASK, (unsigned long)(PROT_READ | PROT_WRITE)), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_PROT_MASK), PROT_READ | PROT_WRITE);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_PROT_MASK, (unsigned long)PROT_READ), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_PROT_MASK), PROT_READ);
	/* bits may only be removed */
	ck_fails(ioctl(fd, ASHMEM_SET_PROT_MASK, (unsigned long)(PROT_READ | PROT_WRITE)), EINVAL);
	ck_fails(ioctl(fd, ASHMEM_SET_PROT_MASK, 0x100ul), EINVAL);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_PROT_MASK), PROT_READ);
	/* mmap beyond the mask */
	ck_assert(mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EPERM);
	ck_assert(mmap(NULL, pg, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EPERM);
	ro = ash_map(fd, pg, PROT_READ);
	/* a mapping made under the reduced mask cannot gain write */
	ck_fails(mprotect(ro, pg, PROT_READ | PROT_WRITE), EACCES);
	ck_assert_int_eq(mprotect(ro, pg, PROT_NONE), 0);
	ck_assert_int_eq(mprotect(ro, pg, PROT_READ), 0);
	/* the earlier mapping keeps what it was given */
	ck_assert_int_eq(mprotect(rw, pg, PROT_READ), 0);
	ck_assert_int_eq(mprotect(rw, pg, PROT_READ | PROT_WRITE), 0);
	rw[0] = 7;
	ck_assert_int_eq(ro[0], 7);
	munmap(ro, pg);
	/* after munmap the address range is nobody's: a new anonymous
	 * mapping there may be made writable */
	ro = mmap(ro, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (ro != MAP_FAILED) {
		ck_assert_int_eq(mprotect(ro, pg, PROT_READ | PROT_WRITE), 0);
		munmap(ro, pg);
	}
	munmap(rw, pg);
	/* SET_PROT_MASK keeps working after mmap, but the mask is per area */
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_PROT_MASK, 0ul), 0);
	ck_assert(mmap(NULL, pg, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EPERM);
	close(fd);
}
END_TEST

/* ---- PIN / UNPIN / GET_PIN_STATUS ---- */

START_TEST(test_pin_before_mmap)
{
	int fd = ash_new(4 * pg);
	unsigned long id;

	ck_fails(pin_op(fd, ASHMEM_PIN, 0, 0), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_UNPIN, 0, 0), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), EINVAL);
	ck_fails(ioctl(fd, ASHMEM_GET_FILE_ID, &id), EINVAL);
	close(fd);
}
END_TEST

START_TEST(test_pin_range_rules)
{
	size_t size = 3 * pg + 1; /* page-aligned size: 4 pages */
	int fd = ash_new(size);
	void *p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE);

	ck_fails(pin_op(fd, ASHMEM_UNPIN, 1, (uint32_t)pg), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_UNPIN, 0, (uint32_t)pg + 1), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_PIN, (uint32_t)pg, 1), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 5 * (uint32_t)pg), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_UNPIN, 3 * (uint32_t)pg, 2 * (uint32_t)pg), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_UNPIN, 5 * (uint32_t)pg, 0), EINVAL);
	ck_fails(pin_op(fd, ASHMEM_UNPIN, UINT32_MAX - (uint32_t)pg + 1, (uint32_t)pg), EINVAL);
	ck_fails(ioctl(fd, ASHMEM_PIN, (void *)8), EFAULT);
	ck_fails(ioctl(fd, ASHMEM_UNPIN, NULL), EFAULT);
	ck_fails(ioctl(fd, ASHMEM_GET_PIN_STATUS, (void *)8), EFAULT);
	/* up to the page-aligned size is fine, len 0 is "to the end" */
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 3 * (uint32_t)pg, (uint32_t)pg), 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 3 * (uint32_t)pg, 0), ASHMEM_IS_UNPINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, (uint32_t)pg, 0), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), ASHMEM_IS_PINNED);
	/* offset at the end with len 0: an empty range */
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 4 * (uint32_t)pg, 0), ASHMEM_NOT_PURGED);
	munmap(p, 4 * pg);
	close(fd);
}
END_TEST

START_TEST(test_pin_unpin_status)
{
	int fd = ash_new(8 * pg);
	char *p = ash_map(fd, 8 * pg, PROT_READ | PROT_WRITE);

	memset(p, 'a', 8 * pg);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), ASHMEM_IS_PINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 2 * (uint32_t)pg, 2 * (uint32_t)pg), 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 2 * (uint32_t)pg), ASHMEM_IS_PINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 3 * (uint32_t)pg, (uint32_t)pg),
			 ASHMEM_IS_UNPINNED);
	/* any unpinned page in the range makes it unpinned */
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), ASHMEM_IS_UNPINNED);
	/* unpinning twice is fine */
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 2 * (uint32_t)pg, (uint32_t)pg), 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 3 * (uint32_t)pg, (uint32_t)pg), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 2 * (uint32_t)pg, (uint32_t)pg),
			 ASHMEM_IS_UNPINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), ASHMEM_IS_PINNED);
	for (size_t i = 0; i < 8 * pg; i++)
		ck_assert_int_eq(p[i], 'a');
	munmap(p, 8 * pg);
	close(fd);
}
END_TEST

/* ---- PURGE_ALL_CACHES and ASHMEM_WAS_PURGED ---- */

START_TEST(test_purge_and_was_purged)
{
	int fd, fd2;
	char *p, *q;

	if (!has_cap_sys_admin())
		TEST_SKIP("PURGE_ALL_CACHES needs CAP_SYS_ADMIN");
	fd = ash_new(8 * pg);
	fd2 = ash_new(2 * pg);
	p = ash_map(fd, 8 * pg, PROT_READ | PROT_WRITE);
	q = ash_map(fd2, 2 * pg, PROT_READ | PROT_WRITE);
	memset(p, 'p', 8 * pg);
	memset(q, 'q', 2 * pg);
	/* nothing unpinned: nothing to purge */
	ck_assert_int_eq(ioctl(fd, ASHMEM_PURGE_ALL_CACHES), 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 2 * (uint32_t)pg, 3 * (uint32_t)pg), 0);
	ck_assert_int_eq(pin_op(fd2, ASHMEM_UNPIN, 0, 0), 0);
	/* returns the unpinned pages it found, over every area */
	ck_assert_int_eq(ioctl(fd, ASHMEM_PURGE_ALL_CACHES), 5);
	ck_assert_int_eq(ioctl(fd, ASHMEM_PURGE_ALL_CACHES), 0);
	/* purged unpinned pages read as zeros, pinned ones kept their data */
	for (size_t i = 0; i < 8 * pg; i++)
		ck_assert_int_eq(p[i], i >= 2 * pg && i < 5 * pg ? 0 : 'p');
	ck_assert_int_eq(q[0], 0);
	/* still unpinned until pinned */
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 2 * (uint32_t)pg, (uint32_t)pg),
			 ASHMEM_IS_UNPINNED);
	/* pinning a range with a purged page says so, once */
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 3 * (uint32_t)pg), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 3 * (uint32_t)pg), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 3 * (uint32_t)pg, 0), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pin_op(fd2, ASHMEM_PIN, 0, 0), ASHMEM_WAS_PURGED);
	/* pinned again, the pages are usable memory */
	p[2 * pg] = 'n';
	ck_assert_int_eq(p[2 * pg], 'n');
	/* unpin + pin with no purge in between is NOT_PURGED */
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 0, 0), 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(p[2 * pg], 'n');
	munmap(p, 8 * pg);
	munmap(q, 2 * pg);
	close(fd);
	close(fd2);
}
END_TEST

/*
 * The library's monitor purges unpinned areas by itself, least recently
 * unpinned first.  A budget is the pressure that can be made exactly: the
 * environment is read at the library's first use, which in this forked
 * case is still to come.
 */
START_TEST(test_monitor_purges_oldest_unpinned)
{
	const size_t n = 16;
	char budget[32];
	int a, b, tries;
	char *pa, *pb;

	snprintf(budget, sizeof(budget), "%zu", (2 * n - n / 2) * pg);
	setenv("VRANGE_MONITOR", "1", 1);
	setenv("VRANGE_BUDGET", budget, 1);
	a = ash_new(n * pg);
	b = ash_new(n * pg);
	pa = ash_map(a, n * pg, PROT_READ | PROT_WRITE);
	pb = ash_map(b, n * pg, PROT_READ | PROT_WRITE);
	memset(pa, 'a', n * pg);
	memset(pb, 'b', n * pg);
	ck_assert_int_eq(pin_op(a, ASHMEM_UNPIN, 0, 0), 0);
	usleep(1000);
	ck_assert_int_eq(pin_op(b, ASHMEM_UNPIN, 0, 0), 0);
	/* over budget by n/2 pages: the monitor takes them from a, the older */
	for (tries = 0; tries < 100; tries++) {
		if (lseek(a, 0, SEEK_HOLE) < (off_t)(n * pg))
			break;
		usleep(50 * 1000);
	}
	ck_assert_msg(tries < 100, "the monitor purged nothing within 5 s");
	ck_assert_int_eq(lseek(b, 0, SEEK_HOLE), (off_t)(n * pg));
	ck_assert_int_eq(pin_op(b, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(pin_op(a, ASHMEM_PIN, 0, 0), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pb[n * pg - 1], 'b');
	munmap(pa, n * pg);
	munmap(pb, n * pg);
	close(a);
	close(b);
}
END_TEST

START_TEST(test_purge_needs_cap)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	int fd = ash_new(pg);

	/* This case runs in its own forked child: drop CAP_SYS_ADMIN. */
	memset(d, 0, sizeof(d));
	ck_assert_int_eq(syscall(SYS_capget, &h, d), 0);
	d[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
	ck_assert_int_eq(syscall(SYS_capset, &h, d), 0);
	ck_fails(ioctl(fd, ASHMEM_PURGE_ALL_CACHES), EPERM);
	close(fd);
}
END_TEST

/* ---- GET_FILE_ID ---- */

START_TEST(test_file_id)
{
	int a = ash_new(pg), b = ash_new(pg), d;
	unsigned long ia = 0, ib = 0, id = 0;
	void *pa = ash_map(a, pg, PROT_READ), *pb = ash_map(b, pg, PROT_READ);

	ck_assert_int_eq(ioctl(a, ASHMEM_GET_FILE_ID, &ia), 0);
	ck_assert_int_eq(ioctl(b, ASHMEM_GET_FILE_ID, &ib), 0);
	ck_assert(ia != 0 && ib != 0 && ia != ib);
	d = dup(a);
	ck_assert_int_eq(ioctl(d, ASHMEM_GET_FILE_ID, &id), 0);
	ck_assert(id == ia);
	if (!under_valgrind())
		ck_fails(ioctl(a, ASHMEM_GET_FILE_ID, (void *)8), EFAULT);
	munmap(pa, pg);
	munmap(pb, pg);
	close(a);
	close(b);
	close(d);
}
END_TEST

/* ---- unknown requests ---- */

START_TEST(test_enotty)
{
	int fd = ash_new(pg);
	int v;

	ck_fails(ioctl(fd, _IO(__ASHMEMIOC, 99)), ENOTTY);
	ck_fails(ioctl(fd, _IO(__ASHMEMIOC, 0)), ENOTTY);
	/* known numbers with the wrong size */
	ck_fails(ioctl(fd, _IOW(__ASHMEMIOC, 3, int), 4096), ENOTTY);
	ck_fails(ioctl(fd, _IOR(__ASHMEMIOC, 4, int), &v), ENOTTY);
	ck_fails(ioctl(fd, _IOW(__ASHMEMIOC, 7, uint32_t), &v), ENOTTY);
	ck_fails(ioctl(fd, _IOR(__ASHMEMIOC, 1, char[ASHMEM_NAME_LEN]), &v), ENOTTY);
	/* other drivers' requests */
	ck_fails(ioctl(fd, FIONREAD, &v), ENOTTY);
	ck_fails(ioctl(fd, _IO('T', 0x42)), ENOTTY);
	close(fd);
}
END_TEST

/* ---- fds: dup, close, fork, SCM_RIGHTS, exec ---- */

START_TEST(test_dup_family)
{
	int fd = ash_open(0), d1, d2, d3, d4, d5;
	char name[ASHMEM_NAME_LEN];
	struct stat st;

	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_NAME, "dups"), 0);
	d1 = dup(fd);
	d2 = fcntl(fd, F_DUPFD, 100);
	d3 = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	d4 = dup2(fd, 200);
	d5 = dup3(fd, 201, O_CLOEXEC);
	ck_assert(d1 >= 0 && d2 >= 100 && d3 >= 0 && d4 == 200 && d5 == 201);
	ck_assert_int_eq(fcntl(d3, F_GETFD), FD_CLOEXEC);
	ck_assert_int_eq(fcntl(d5, F_GETFD), FD_CLOEXEC);
	/* one state, whichever fd changes it */
	ck_assert_int_eq(ioctl(d2, ASHMEM_SET_SIZE, 2 * pg), 0);
	int all[] = { fd, d1, d2, d3, d4, d5 };
	for (unsigned int i = 0; i < 6; i++) {
		ck_assert_int_eq(ioctl(all[i], ASHMEM_GET_SIZE), (int)(2 * pg));
		ck_assert_int_eq(ioctl(all[i], ASHMEM_GET_NAME, name), 0);
		ck_assert_str_eq(name, "dups");
		ck_assert_int_eq(fstat(all[i], &st), 0);
		ck_assert(S_ISCHR(st.st_mode));
	}
	/* closing some keeps the state for the rest */
	close(fd);
	close(d1);
	close(d2);
	char *p = ash_map(d3, 2 * pg, PROT_READ | PROT_WRITE);
	p[0] = 'd';
	ck_assert_int_eq(pin_op(d4, ASHMEM_UNPIN, 0, (uint32_t)pg), 0);
	ck_assert_int_eq(pin_op(d5, ASHMEM_GET_PIN_STATUS, 0, (uint32_t)pg), ASHMEM_IS_UNPINNED);
	ck_fails(ioctl(d5, ASHMEM_SET_SIZE, pg), EINVAL);
	ck_assert_int_eq(pin_op(d3, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	/* dup2 onto an ashmem fd makes it the other file */
	int null = open("/dev/null", O_RDONLY);
	ck_assert_int_eq(dup2(null, d4), d4);
	ck_assert_int_eq(fstat(d4, &st), 0);
	ck_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
	ck_fails(ioctl(d4, ASHMEM_GET_SIZE), ENOTTY);
	close(null);
	close(d4);
	close(d5);
	/* the last fd gone, the mapping stays good */
	close(d3);
	ck_assert_int_eq(p[0], 'd');
	munmap(p, 2 * pg);
}
END_TEST

START_TEST(test_fork_shares_state)
{
	int fd = ash_open(0), status;
	char name[ASHMEM_NAME_LEN];
	pid_t pid;
	char *p;

	/* before mmap: the child sets name and size, the parent sees them */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok = ioctl(fd, ASHMEM_SET_NAME, "from-child") == 0 &&
			 ioctl(fd, ASHMEM_SET_SIZE, 4 * pg) == 0 &&
			 ioctl(fd, ASHMEM_SET_PROT_MASK, (unsigned long)(PROT_READ | PROT_WRITE)) == 0;
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_SIZE), (int)(4 * pg));
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_NAME, name), 0);
	ck_assert_str_eq(name, "from-child");
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_PROT_MASK), PROT_READ | PROT_WRITE);
	p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE);
	memset(p, 'f', 4 * pg);
	/* after mmap: the child sees the mapping, the data, and the size is fixed */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok = p[0] == 'f' && ioctl(fd, ASHMEM_SET_SIZE, pg) == -1 && errno == EINVAL &&
			 pin_op(fd, ASHMEM_UNPIN, 0, (uint32_t)pg) == 0;
		p[pg] = 'c';
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(p[pg], 'c');
	if (!state_is_shared(fd)) {
		munmap(p, 4 * pg);
		close(fd);
		TEST_SKIP("the library keeps this file's pin state per process");
	}
	/* the child's unpin is the file's */
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, (uint32_t)pg), ASHMEM_IS_UNPINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	munmap(p, 4 * pg);
	close(fd);
}
END_TEST

/* The SCM_RIGHTS cases run twice: sendmsg/recvmsg, then
 * sendmmsg/recvmmsg (the shim intercepts both pairs). */
static int via_mmsg;

static ssize_t send_one(int sock, struct msghdr *msg)
{
	struct mmsghdr v = { .msg_hdr = *msg };

	if (!via_mmsg)
		return sendmsg(sock, msg, 0);
	return sendmmsg(sock, &v, 1, 0) == 1 ? (ssize_t)v.msg_len : -1;
}

static ssize_t recv_one(int sock, struct msghdr *msg)
{
	struct mmsghdr v = { .msg_hdr = *msg };

	if (!via_mmsg)
		return recvmsg(sock, msg, MSG_CMSG_CLOEXEC);
	if (recvmmsg(sock, &v, 1, MSG_CMSG_CLOEXEC, NULL) != 1)
		return -1;
	*msg = v.msg_hdr;
	return (ssize_t)v.msg_len;
}

/* Do memfds take user extended attributes here (where the library keeps
 * an area's shared state)? */
static int memfd_xattrs(void)
{
	int fd = memfd_create("xattr-probe", MFD_CLOEXEC), ok;

	if (fd < 0)
		return 0;
	ok = fsetxattr(fd, "user.probe", "1", 1, 0) == 0;
	close(fd);
	return ok;
}

static int send_fd(int sock, int fd)
{
	char c = 'F';
	struct iovec iov = { &c, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c0;

	memset(u.buf, 0, sizeof(u.buf));
	c0 = CMSG_FIRSTHDR(&msg);
	c0->cmsg_level = SOL_SOCKET;
	c0->cmsg_type = SCM_RIGHTS;
	c0->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c0), &fd, sizeof(int));
	return send_one(sock, &msg) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char c;
	struct iovec iov = { &c, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c0;
	int fd;

	if (recv_one(sock, &msg) != 1)
		return -1;
	c0 = CMSG_FIRSTHDR(&msg);
	if (!c0 || c0->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(c0), sizeof(int));
	return fd;
}

START_TEST(test_scm_rights)
{
	char name[ASHMEM_NAME_LEN];
	int sv[2], fd, status, shared;
	struct stat st;
	pid_t pid;
	char *p;

	via_mmsg = _i;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The area is created here: the parent has never seen it. */
		int a = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
		char *m, ack;

		if (a < 0 || ioctl(a, ASHMEM_SET_NAME, "passed") < 0 ||
		    ioctl(a, ASHMEM_SET_SIZE, 3 * pg) < 0)
			_exit(2);
		m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
		if (m == MAP_FAILED)
			_exit(3);
		memset(m, 's', 3 * pg);
		if (pin_op(a, ASHMEM_UNPIN, (uint32_t)pg, (uint32_t)pg) != 0)
			_exit(4);
		if (send_fd(sv[1], a) < 0)
			_exit(5);
		/* stay alive (a holder of the area) until the parent is done */
		_exit(read(sv[1], &ack, 1) == 1 ? 0 : 6);
	}
	fd = recv_fd(sv[0]);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert(S_ISCHR(st.st_mode));
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_SIZE), (int)(3 * pg));
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_NAME, name), 0);
	ck_assert_str_eq(name, "passed");
	ck_fails(ioctl(fd, ASHMEM_SET_SIZE, pg), EINVAL);
	ck_assert(mmap(NULL, 4 * pg, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED);
	p = ash_map(fd, 3 * pg, PROT_READ | PROT_WRITE);
	ck_assert_int_eq(p[0], 's');
	ck_assert_int_eq(p[3 * pg - 1], 's');
	shared = state_is_shared(fd);
	/* Sent, the area's state must have left the sender's pool. */
	ck_assert_msg(shared || !memfd_xattrs(), "the state stayed private to the sender (%s)",
		      via_mmsg ? "sendmmsg" : "sendmsg");
	if (shared) {
		ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, (uint32_t)pg, (uint32_t)pg),
				 ASHMEM_IS_UNPINNED);
		ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, (uint32_t)pg),
				 ASHMEM_IS_PINNED);
	}
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	ck_assert_int_eq(write(sv[0], "k", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	munmap(p, 3 * pg);
	close(fd);
	close(sv[0]);
	close(sv[1]);
	if (!shared)
		TEST_SKIP("pin state across processes: the library keeps it per process");
}
END_TEST

/*
 * An area this process holds but never unpinned is still one of its areas:
 * pages another process (a forked child) unpinned count in this process's
 * PURGE_ALL_CACHES, which purges them, and a PIN here then says so.
 */
START_TEST(test_fork_child_unpins_parent_purges)
{
	int fd = ash_new(4 * pg), go[2], done[2], status;
	char *p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE), c;
	pid_t pid;

	if (!has_cap_sys_admin())
		TEST_SKIP("PURGE_ALL_CACHES needs CAP_SYS_ADMIN");
	if (!state_is_shared(fd))
		TEST_SKIP("the library keeps this file's pin state per process");
	memset(p, 'a', 4 * pg);
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok = pin_op(fd, ASHMEM_UNPIN, 0, (uint32_t)(3 * pg)) == 0;

		ok = ok && write(done[1], "u", 1) == 1;
		/* Alive (holding the area) until the parent has purged. */
		_exit(ok && read(go[0], &c, 1) == 1 ? 0 : 1);
	}
	ck_assert_int_eq(read(done[0], &c, 1), 1);
	ck_assert_int_eq(ioctl(fd, ASHMEM_PURGE_ALL_CACHES), 3);
	ck_assert_int_eq(p[0], 0);
	ck_assert_int_eq(p[3 * pg - 1], 0);
	ck_assert_int_eq(p[3 * pg], 'a');
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, (uint32_t)pg), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	munmap(p, 4 * pg);
	close(fd);
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
}
END_TEST

/*
 * The state lives as long as any fd holds the area.  A status query and a
 * pin in the parent must not drop the parent's hold on it: a child that
 * unpins, purges and exits leaves its purge and its unpinned page behind,
 * so the parent's PIN over the purged pages says WAS_PURGED (not
 * NOT_PURGED over zeros), and the page still unpinned is unpinned.
 */
START_TEST(test_state_outlives_child)
{
	int fd = ash_new(4 * pg), status;
	char *p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE);
	pid_t pid;

	if (!has_cap_sys_admin())
		TEST_SKIP("PURGE_ALL_CACHES needs CAP_SYS_ADMIN");
	if (!state_is_shared(fd))
		TEST_SKIP("the library keeps this file's pin state per process");
	memset(p, 'b', 4 * pg);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), ASHMEM_IS_PINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_NOT_PURGED);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok = pin_op(fd, ASHMEM_UNPIN, 0, (uint32_t)(2 * pg)) == 0 &&
			 ioctl(fd, ASHMEM_PURGE_ALL_CACHES) == 2 && p[0] == 0 &&
			 pin_op(fd, ASHMEM_UNPIN, (uint32_t)(3 * pg), (uint32_t)pg) == 0;

		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, (uint32_t)(3 * pg), (uint32_t)pg),
			 ASHMEM_IS_UNPINNED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, (uint32_t)(2 * pg), (uint32_t)pg),
			 ASHMEM_IS_PINNED);
	ck_assert_int_eq(p[0], 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, (uint32_t)(2 * pg)), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, (uint32_t)(3 * pg), (uint32_t)pg),
			 ASHMEM_NOT_PURGED);
	ck_assert_int_eq(p[3 * pg], 'b');
	munmap(p, 4 * pg);
	close(fd);
}
END_TEST

/*
 * The same for an area received over a socket and not used since: this
 * process holds it, so its PURGE_ALL_CACHES (on another ashmem fd) counts
 * and purges the pages the sender unpinned, and after the sender exits
 * the receiver's PIN says WAS_PURGED.
 */
START_TEST(test_scm_rights_unpinned_visible_to_purge)
{
	int sv[2], own, fd, status;
	pid_t pid;
	char c, *p;

	if (!has_cap_sys_admin())
		TEST_SKIP("PURGE_ALL_CACHES needs CAP_SYS_ADMIN");
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int a = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
		char *m;

		if (a < 0 || ioctl(a, ASHMEM_SET_SIZE, 3 * pg) < 0)
			_exit(2);
		m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
		if (m == MAP_FAILED)
			_exit(3);
		memset(m, 's', 3 * pg);
		if (send_fd(sv[1], a) < 0 || pin_op(a, ASHMEM_UNPIN, 0, 0) != 0)
			_exit(4);
		if (write(sv[1], "u", 1) != 1)
			_exit(5);
		_exit(read(sv[1], &c, 1) == 1 ? 0 : 6);
	}
	own = ash_new(pg);
	fd = recv_fd(sv[0]);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(read(sv[0], &c, 1), 1);
	if (!state_is_shared(fd)) {
		ck_assert_int_eq(write(sv[0], "k", 1), 1);
		waitpid(pid, &status, 0);
		TEST_SKIP("the library keeps this file's pin state per process");
	}
	ck_assert_int_eq(ioctl(own, ASHMEM_PURGE_ALL_CACHES), 3);
	ck_assert_int_eq(write(sv[0], "k", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, 0), ASHMEM_WAS_PURGED);
	p = ash_map(fd, 3 * pg, PROT_READ);
	ck_assert_int_eq(p[0], 0);
	ck_assert_int_eq(p[3 * pg - 1], 0);
	munmap(p, 3 * pg);
	close(fd);
	close(own);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/*
 * An area received over a socket is held from that moment, as with the
 * driver: the sender unpins, purges and exits before the receiver ever
 * uses the fd, and the receiver's PIN still says WAS_PURGED (the state
 * was not forgotten when its last user so far exited).
 */
START_TEST(test_scm_rights_state_outlives_sender)
{
	int sv[2], fd, status;
	pid_t pid;
	char *p;

	via_mmsg = _i;

	if (!has_cap_sys_admin())
		TEST_SKIP("PURGE_ALL_CACHES needs CAP_SYS_ADMIN");
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int a = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
		char *m, c;

		if (a < 0 || ioctl(a, ASHMEM_SET_SIZE, 2 * pg) < 0)
			_exit(2);
		m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
		if (m == MAP_FAILED)
			_exit(3);
		memset(m, 't', 2 * pg);
		if (pin_op(a, ASHMEM_UNPIN, 0, (uint32_t)pg) != 0 || send_fd(sv[1], a) < 0)
			_exit(4);
		/* The receiver has it; now purge and go. */
		if (read(sv[1], &c, 1) != 1 || ioctl(a, ASHMEM_PURGE_ALL_CACHES) != 1)
			_exit(5);
		_exit(0);
	}
	fd = recv_fd(sv[0]);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(sv[0], "r", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!state_is_shared(fd))
		TEST_SKIP("the library keeps this file's pin state per process");
	ck_assert_int_eq(pin_op(fd, ASHMEM_PIN, 0, (uint32_t)pg), ASHMEM_WAS_PURGED);
	ck_assert_int_eq(pin_op(fd, ASHMEM_GET_PIN_STATUS, 0, 0), ASHMEM_IS_PINNED);
	p = ash_map(fd, 2 * pg, PROT_READ);
	ck_assert_int_eq(p[0], 0);
	ck_assert_int_eq(p[pg], 't');
	munmap(p, 2 * pg);
	close(fd);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/*
 * The exec'd half of test_exec: this binary re-executed with the shim
 * preloaded, the ashmem fd inherited.  Runs before main() and exits.
 */
__attribute__((constructor)) static void exec_child(void)
{
	const char *spec = getenv("ASHMEM_TEST_EXEC_CHILD");
	char name[ASHMEM_NAME_LEN];
	unsigned long cino;
	int fd, shared;
	struct stat st;
	size_t page;
	char *p;

	if (!spec || sscanf(spec, "%d:%lu:%d", &fd, &cino, &shared) != 3)
		return;
	page = (size_t)sysconf(_SC_PAGESIZE);
#define CHILD_CHECK(c)                                                         \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "exec child: %s failed\n", #c);        \
			_exit(1);                                              \
		}                                                              \
	} while (0)
	/* The O_CLOEXEC area did not come along: no fd of its file is open. */
	for (int i = 0; i < 1024; i++) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
		CHILD_CHECK(stat(path, &st) < 0 || st.st_ino != cino);
	}
	CHILD_CHECK(fstat(fd, &st) == 0 && S_ISCHR(st.st_mode));
	CHILD_CHECK(ioctl(fd, ASHMEM_GET_SIZE) == (int)(2 * page));
	CHILD_CHECK(ioctl(fd, ASHMEM_GET_NAME, name) == 0 && strcmp(name, "exec") == 0);
	CHILD_CHECK(ioctl(fd, ASHMEM_SET_SIZE, page) == -1 && errno == EINVAL);
	p = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHILD_CHECK(p != MAP_FAILED && p[0] == 'E');
	if (shared)
		CHILD_CHECK(pin_op(fd, ASHMEM_GET_PIN_STATUS, (uint32_t)page, (uint32_t)page) ==
			    ASHMEM_IS_UNPINNED);
	CHILD_CHECK(pin_op(fd, ASHMEM_PIN, 0, 0) == ASHMEM_NOT_PURGED);
	p[1] = 'X';
	_exit(0);
}

START_TEST(test_exec)
{
	int fd = ash_open(0), cfd = ash_open(O_CLOEXEC), status;
	char spec[80], path[64], self[4096];
	struct stat cst;
	ssize_t n;
	pid_t pid;
	char *p;

	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_NAME, "exec"), 0);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, 2 * pg), 0);
	p = ash_map(fd, 2 * pg, PROT_READ | PROT_WRITE);
	memset(p, 'E', 2 * pg);
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, (uint32_t)pg, (uint32_t)pg), 0);
	/* the backing file of the O_CLOEXEC area, seen through /proc */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", cfd);
	ck_assert_int_eq(stat(path, &cst), 0);
	ck_assert(S_ISREG(cst.st_mode));
	snprintf(spec, sizeof(spec), "%d:%lu:%d", fd, (unsigned long)cst.st_ino,
		 state_is_shared(fd));
	/* the binary's path (valgrind's /proc/self/exe is valgrind's tool) */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setenv("ASHMEM_TEST_EXEC_CHILD", spec, 1);
		execl(self, self, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exec'd child failed (%d)",
		      status);
	ck_assert_int_eq(p[1], 'X');
	munmap(p, 2 * pg);
	close(fd);
	close(cfd);
}
END_TEST

static int count_fds(void)
{
	int n = 0;

	for (int i = 0; i < 4096; i++)
		n += fcntl(i, F_GETFD) >= 0;
	return n;
}

/* An area whose last fd and mapping are gone leaves nothing behind. */
START_TEST(test_no_leak_after_close)
{
	int before, after;

	/* the first area may start the library's long-lived parts */
	int fd = ash_new(pg);
	char *p = ash_map(fd, pg, PROT_READ | PROT_WRITE);
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 0, 0), 0);
	munmap(p, pg);
	close(fd);
	before = count_fds();
	for (int i = 0; i < 50; i++) {
		fd = ash_new(2 * pg);
		p = ash_map(fd, 2 * pg, PROT_READ | PROT_WRITE);
		p[0] = 1;
		ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, 0, 0), 0);
		/* closing before unmapping: the mapping keeps the area */
		close(fd);
		ck_assert_int_eq(p[0], 1);
		munmap(p, 2 * pg);
	}
	after = count_fds();
	ck_assert_int_eq(after, before);
}
END_TEST

/* ---- the fd as a file: read, lseek, write ---- */

START_TEST(test_read_lseek)
{
	int fd = ash_open(0);
	size_t size = 3 * pg + 100;
	char buf[64];
	char *p;

	/* size 0: read is EOF, lseek EINVAL */
	ck_assert_int_eq(read(fd, buf, sizeof(buf)), 0);
	ck_fails(lseek(fd, 0, SEEK_SET), EINVAL);
	ck_assert_int_eq(ioctl(fd, ASHMEM_SET_SIZE, size), 0);
	/* a size but no mapping yet: EBADF */
	ck_fails(read(fd, buf, sizeof(buf)), EBADF);
	ck_fails(lseek(fd, 0, SEEK_SET), EBADF);
	p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE);
	memcpy(p, "hello", 5);
	p[2 * pg] = 'x';
	ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);
	ck_assert_int_eq(read(fd, buf, 5), 5);
	ck_assert(memcmp(buf, "hello", 5) == 0);
	ck_assert_int_eq(pread(fd, buf, 1, (off_t)(2 * pg)), 1);
	ck_assert_int_eq(buf[0], 'x');
	/* SEEK_END is the area's size, and the area ends there */
	ck_assert_int_eq(lseek(fd, 0, SEEK_END), (off_t)size);
	ck_assert_int_eq(read(fd, buf, sizeof(buf)), 0);
	ck_assert_int_eq(lseek(fd, -10, SEEK_END), (off_t)size - 10);
	ck_assert_int_eq(read(fd, buf, sizeof(buf)), 10);
	ck_assert_int_eq(pread(fd, buf, sizeof(buf), (off_t)size), 0);
	ck_fails(lseek(fd, -(off_t)size - 1, SEEK_END), EINVAL);
	/* SEEK_DATA / SEEK_HOLE: pages 0 and 2 were touched */
	ck_assert_int_eq(lseek(fd, 0, SEEK_DATA), 0);
	ck_assert_int_eq(lseek(fd, 0, SEEK_HOLE), (off_t)pg);
	ck_assert_int_eq(lseek(fd, (off_t)pg, SEEK_DATA), (off_t)(2 * pg));
	ck_assert_int_eq(lseek(fd, (off_t)(2 * pg), SEEK_HOLE), (off_t)(3 * pg));
	ck_fails(lseek(fd, (off_t)(3 * pg), SEEK_DATA), ENXIO);
	ck_fails(lseek(fd, (off_t)size, SEEK_DATA), ENXIO);
	ck_fails(lseek(fd, (off_t)size, SEEK_HOLE), ENXIO);
	/* the hole at the end of the area is at its size, not past it */
	p[3 * pg] = 'e';
	ck_assert_int_eq(lseek(fd, (off_t)(3 * pg), SEEK_DATA), (off_t)(3 * pg));
	ck_assert_int_eq(lseek(fd, (off_t)(3 * pg), SEEK_HOLE), (off_t)size);
	/* the 64-bit names behave alike */
	ck_assert_int_eq(lseek64(fd, 0, SEEK_END), (off64_t)size);
	ck_assert_int_eq(pread64(fd, buf, 5, 0), 5);
	/* the driver's file had no write, and a device cannot be truncated */
	ck_fails(write(fd, "x", 1), EINVAL);
	ck_fails(pwrite(fd, "x", 1, 0), EINVAL);
	ck_fails(ftruncate(fd, 0), EINVAL);
	ck_assert_int_eq(ioctl(fd, ASHMEM_GET_SIZE), (int)size);
	munmap(p, 4 * pg);
	close(fd);
}
END_TEST

START_TEST(test_purged_pages_are_holes)
{
	int fd;
	char *p;

	if (!has_cap_sys_admin())
		TEST_SKIP("PURGE_ALL_CACHES needs CAP_SYS_ADMIN");
	fd = ash_new(4 * pg);
	p = ash_map(fd, 4 * pg, PROT_READ | PROT_WRITE);
	memset(p, 1, 4 * pg);
	ck_assert_int_eq(lseek(fd, 0, SEEK_HOLE), (off_t)(4 * pg));
	ck_assert_int_eq(pin_op(fd, ASHMEM_UNPIN, (uint32_t)pg, (uint32_t)pg), 0);
	ck_assert_int_ge(ioctl(fd, ASHMEM_PURGE_ALL_CACHES), 1);
	ck_assert_int_eq(lseek(fd, 0, SEEK_HOLE), (off_t)pg);
	ck_assert_int_eq(lseek(fd, (off_t)pg, SEEK_DATA), (off_t)(2 * pg));
	ck_assert_int_eq(pread(fd, p + 3 * pg, 1, (off_t)pg), 1);
	ck_assert_int_eq(p[3 * pg], 0);
	munmap(p, 4 * pg);
	close(fd);
}
END_TEST

/* ---- everything else passes through untouched ---- */

START_TEST(test_passthrough)
{
	int null = open("/dev/null", O_RDWR), v = 0, r1, e1, r2, e2;
	struct stat a, b;
	char tmpl[] = "/tmp/ashmem-passthrough-XXXXXX";
	int reg;

	ck_assert_int_ge(null, 0);
	/* ioctl on /dev/null: whatever the kernel says, unchanged */
	errno = 0;
	r1 = ioctl(null, FIONREAD, &v);
	e1 = errno;
	errno = 0;
	r2 = (int)syscall(SYS_ioctl, null, FIONREAD, &v);
	e2 = errno;
	ck_assert_int_eq(r1, r2);
	ck_assert_int_eq(e1, e2);
	/* even ashmem's numbers are not ours on another fd */
	errno = 0;
	r1 = ioctl(null, ASHMEM_GET_SIZE);
	e1 = errno;
	errno = 0;
	r2 = (int)syscall(SYS_ioctl, null, ASHMEM_GET_SIZE, 0);
	e2 = errno;
	ck_assert_int_eq(r1, r2);
	ck_assert_int_eq(e1, e2);
	ck_assert_int_eq(fstat(null, &a), 0);
	ck_assert(a.st_rdev == makedev(1, 3));
	/* a regular file's stat is the kernel's */
	reg = mkstemp(tmpl);
	ck_assert_int_ge(reg, 0);
	ck_assert_int_eq(write(reg, "12345", 5), 5);
	ck_assert_int_eq(stat(tmpl, &a), 0);
	ck_assert_int_eq((int)syscall(SYS_newfstatat, AT_FDCWD, tmpl, &b, 0), 0);
	ck_assert(a.st_ino == b.st_ino && a.st_mode == b.st_mode && a.st_size == 5 &&
		  a.st_dev == b.st_dev && a.st_nlink == b.st_nlink);
	ck_assert_int_eq(fstat(reg, &a), 0);
	ck_assert(a.st_ino == b.st_ino && S_ISREG(a.st_mode) && a.st_size == 5);
	ck_assert_int_eq(lseek(reg, 0, SEEK_END), 5);
	unlink(tmpl);
	/* an unlinked tmpfs file that is not ours stays a regular file */
	int tmp = open("/dev/shm", O_TMPFILE | O_RDWR, 0600);
	if (tmp >= 0) {
		ck_assert_int_eq(ftruncate(tmp, 4096), 0);
		ck_assert_int_eq(fstat(tmp, &a), 0);
		ck_assert(S_ISREG(a.st_mode) && a.st_size == 4096);
		ck_fails(ioctl(tmp, ASHMEM_GET_SIZE), ENOTTY);
		close(tmp);
	}
	/* names close to /dev/ashmem are not it */
	ck_fails(open("/dev/ashme", O_RDONLY), ENOENT);
	ck_fails(stat("/dev/ashme", &a), ENOENT);
	close(reg);
	close(null);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create(_FILE_OFFSET_BITS_NAME);
	TCase *tc = tcase_create("ashmem");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_open_stat_chr);
	tcase_add_test(tc, test_not_a_memfd);
	tcase_add_test(tc, test_cloexec);
	tcase_add_test(tc, test_name);
	tcase_add_test(tc, test_size_and_mmap_rules);
	tcase_add_test(tc, test_private_mapping_is_anonymous);
	tcase_add_test(tc, test_prot_mask);
	tcase_add_test(tc, test_pin_before_mmap);
	tcase_add_test(tc, test_pin_range_rules);
	tcase_add_test(tc, test_pin_unpin_status);
	tcase_add_test(tc, test_purge_and_was_purged);
	tcase_add_test(tc, test_monitor_purges_oldest_unpinned);
	tcase_add_test(tc, test_purge_needs_cap);
	tcase_add_test(tc, test_file_id);
	tcase_add_test(tc, test_enotty);
	tcase_add_test(tc, test_dup_family);
	tcase_add_test(tc, test_fork_shares_state);
	tcase_add_loop_test(tc, test_scm_rights, 0, 2);
	tcase_add_test(tc, test_fork_child_unpins_parent_purges);
	tcase_add_test(tc, test_state_outlives_child);
	tcase_add_test(tc, test_scm_rights_unpinned_visible_to_purge);
	tcase_add_loop_test(tc, test_scm_rights_state_outlives_sender, 0, 2);
	tcase_add_test(tc, test_exec);
	tcase_add_test(tc, test_no_leak_after_close);
	tcase_add_test(tc, test_read_lseek);
	tcase_add_test(tc, test_purged_pages_are_holes);
	tcase_add_test(tc, test_passthrough);
	suite_add_tcase(s, tc);
	return s;
}
