/* SPDX-License-Identifier: MIT */
/*
 * ashmem_libcutils_client - opens and uses ashmem exactly the way Android's
 * libcutils (ashmem-dev.cpp) does, to check that the shim satisfies a real
 * client and not only our own tests:
 *
 *  - the device is "/dev/ashmem" + the boot id from
 *    /proc/sys/kernel/random/boot_id, falling back to "/dev/ashmem";
 *  - the fd must be a character device, and its st_rdev, taken from fstat
 *    of the fd, must equal stat() of the device path (ashmem_valid());
 *  - an fd whose /proc/self/fd link starts with "/memfd:" is taken for a
 *    memfd, and then pin/unpin are skipped - which must not happen here;
 *  - size comes from ASHMEM_GET_SIZE, never st_size.
 *
 * The ioctl numbers are defined here, as libcutils gets them from its own
 * copy of the uapi header.  Exit 0 when every step behaved, 1 otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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
#define ASHMEM_NOT_PURGED 0
#define ASHMEM_IS_PINNED 1
#define ASHMEM_DEVICE "/dev/ashmem"

static dev_t ashmem_rdev;
static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			failures++;                                            \
		}                                                              \
	} while (0)

/* libcutils: get_ashmem_device_path() */
static void device_path(char *buf, size_t len)
{
	char boot_id[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f) {
		if (fgets(boot_id, sizeof(boot_id), f))
			boot_id[strcspn(boot_id, "\n")] = '\0';
		fclose(f);
	}
	snprintf(buf, len, "%s%s", ASHMEM_DEVICE, boot_id);
}

/* libcutils: __ashmem_open_locked() */
static int ashmem_open(void)
{
	char path[128];
	struct stat st;
	int fd;

	device_path(path, sizeof(path));
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fd = open(ASHMEM_DEVICE, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode) || !st.st_rdev) {
		close(fd);
		errno = ENOTTY;
		return -1;
	}
	ashmem_rdev = st.st_rdev;
	return fd;
}

/* libcutils: __ashmem_is_ashmem() */
static int ashmem_valid(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return 0;
	if (!ashmem_rdev) {
		struct stat dev;

		if (stat(ASHMEM_DEVICE, &dev) < 0 || !S_ISCHR(dev.st_mode))
			return 0;
		ashmem_rdev = dev.st_rdev;
	}
	return S_ISCHR(st.st_mode) && st.st_rdev && st.st_rdev == ashmem_rdev;
}

/* libcutils: fd_is_memfd() - the check that makes newer libcutils skip pin. */
static int fd_is_memfd(int fd)
{
	char path[64], target[256];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return 0;
	target[n] = '\0';
	return strncmp(target, "/memfd:", 7) == 0;
}

static int ashmem_create_region(const char *name, size_t size)
{
	char buf[ASHMEM_NAME_LEN] = { 0 };
	int fd = ashmem_open();

	if (fd < 0)
		return -1;
	if (name) {
		strncpy(buf, name, sizeof(buf) - 1);
		if (ioctl(fd, ASHMEM_SET_NAME, buf) < 0)
			goto error;
	}
	if (ioctl(fd, ASHMEM_SET_SIZE, size) < 0)
		goto error;
	return fd;
error:
	close(fd);
	return -1;
}

static int ashmem_get_size_region(int fd)
{
	if (!ashmem_valid(fd)) {
		errno = EBADF;
		return -1;
	}
	return ioctl(fd, ASHMEM_GET_SIZE, NULL);
}

static int ashmem_pin_region(int fd, size_t offset, size_t len)
{
	struct ashmem_pin pin = { (uint32_t)offset, (uint32_t)len };

	if (!ashmem_valid(fd)) {
		errno = EBADF;
		return -1;
	}
	if (fd_is_memfd(fd))
		return ASHMEM_NOT_PURGED; /* what libcutils does for memfds */
	return ioctl(fd, ASHMEM_PIN, &pin);
}

static int ashmem_unpin_region(int fd, size_t offset, size_t len)
{
	struct ashmem_pin pin = { (uint32_t)offset, (uint32_t)len };

	if (!ashmem_valid(fd)) {
		errno = EBADF;
		return -1;
	}
	if (fd_is_memfd(fd))
		return 0;
	return ioctl(fd, ASHMEM_UNPIN, &pin);
}

static int ashmem_set_prot_region(int fd, int prot)
{
	if (!ashmem_valid(fd)) {
		errno = EBADF;
		return -1;
	}
	return ioctl(fd, ASHMEM_SET_PROT_MASK, (unsigned long)prot);
}

int main(void)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t size = (size_t)page * 8;
	char name[ASHMEM_NAME_LEN];
	struct stat devst;
	char *p;
	int fd, dupfd;

	fd = ashmem_create_region("libcutils-client", size);
	if (fd < 0) {
		fprintf(stderr, "FAIL: ashmem_create_region: %s\n", strerror(errno));
		return 1;
	}
	CHECK(stat(ASHMEM_DEVICE, &devst) == 0 && S_ISCHR(devst.st_mode),
	      "stat(%s) is no character device", ASHMEM_DEVICE);
	CHECK(devst.st_rdev == ashmem_rdev, "st_rdev of the path and of the fd differ");
	CHECK(ashmem_valid(fd), "ashmem_valid() refuses the fd");
	CHECK(!fd_is_memfd(fd), "the fd reads as a memfd: libcutils would skip pin/unpin");
	CHECK(ashmem_get_size_region(fd) == (int)size, "ASHMEM_GET_SIZE != %zu", size);
	CHECK(ioctl(fd, ASHMEM_GET_NAME, name) == 0 && strcmp(name, "libcutils-client") == 0,
	      "ASHMEM_GET_NAME");
	CHECK(fcntl(fd, F_GETFD) == FD_CLOEXEC, "O_CLOEXEC not honoured");

	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	if (p == MAP_FAILED)
		return 1;
	memset(p, 0x5a, size);
	CHECK(ashmem_unpin_region(fd, 0, 0) == 0, "unpin");
	CHECK(ioctl(fd, _IO(__ASHMEMIOC, 9), &(struct ashmem_pin){ 0, 0 }) == 0,
	      "GET_PIN_STATUS after unpin is not ASHMEM_IS_UNPINNED");
	CHECK(ashmem_pin_region(fd, 0, 0) == ASHMEM_NOT_PURGED, "pin");
	CHECK(ioctl(fd, _IO(__ASHMEMIOC, 9), &(struct ashmem_pin){ 0, 0 }) == ASHMEM_IS_PINNED,
	      "GET_PIN_STATUS after pin is not ASHMEM_IS_PINNED");
	CHECK(p[0] == 0x5a && p[size - 1] == 0x5a, "contents changed while pinned");

	/* What Parcel/SharedMemory do: dup and check the dup the same way. */
	dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	CHECK(ashmem_valid(dupfd) && ashmem_get_size_region(dupfd) == (int)size, "dup");
	CHECK(ashmem_set_prot_region(dupfd, PROT_READ) == 0, "set prot mask");
	CHECK(ioctl(fd, ASHMEM_GET_PROT_MASK) == PROT_READ, "prot mask not shared by dups");
	CHECK(ashmem_set_prot_region(fd, PROT_READ | PROT_WRITE) < 0 && errno == EINVAL,
	      "prot mask gained bits");
	close(dupfd);
	munmap(p, size);
	close(fd);
	if (failures)
		return 1;
	printf("libcutils-style client: all checks passed\n");
	return 0;
}
