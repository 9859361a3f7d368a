/* SPDX-License-Identifier: MIT */
/*
 * ashmem_client - the classic ashmem cycle an Android program runs:
 * create an area, map it, fill it, unpin it while it is not needed, pin it
 * again and ask whether the kernel took it in between.
 *
 * Written against the driver's ABI only (no libvrange header): run it
 * with LD_PRELOAD=libvrange-ashmem.so on a kernel without ashmem.
 * As root it also asks for the purge a memory-pressure event would cause
 * (ASHMEM_PURGE_ALL_CACHES), so the second pin reports the loss.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define ASHMEM_NAME_LEN 256
struct ashmem_pin {
	uint32_t offset;
	uint32_t len;
};
#define __ASHMEMIOC 0x77
#define ASHMEM_SET_NAME _IOW(__ASHMEMIOC, 1, char[ASHMEM_NAME_LEN])
#define ASHMEM_SET_SIZE _IOW(__ASHMEMIOC, 3, size_t)
#define ASHMEM_GET_SIZE _IO(__ASHMEMIOC, 4)
#define ASHMEM_PIN _IOW(__ASHMEMIOC, 7, struct ashmem_pin)
#define ASHMEM_UNPIN _IOW(__ASHMEMIOC, 8, struct ashmem_pin)
#define ASHMEM_PURGE_ALL_CACHES _IO(__ASHMEMIOC, 10)
#define ASHMEM_NOT_PURGED 0
#define ASHMEM_WAS_PURGED 1

#define AREA_SIZE (1u << 20)

static int fail(const char *what)
{
	fprintf(stderr, "ashmem_client: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(void)
{
	struct ashmem_pin whole = { 0, 0 }; /* len 0: to the end */
	unsigned char *p;
	int fd, r, purged;

	fd = open("/dev/ashmem", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail("open /dev/ashmem (is libvrange-ashmem.so preloaded?)");
	if (ioctl(fd, ASHMEM_SET_NAME, "example-cache") < 0 ||
	    ioctl(fd, ASHMEM_SET_SIZE, (size_t)AREA_SIZE) < 0)
		return fail("set name/size");
	printf("created area \"example-cache\", %d bytes\n", ioctl(fd, ASHMEM_GET_SIZE, 0));
	p = mmap(NULL, AREA_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return fail("mmap");
	memset(p, 0xab, AREA_SIZE);
	printf("filled it; first pass: unpin, then pin again at once\n");

	for (int pass = 1; pass <= 2; pass++) {
		if (ioctl(fd, ASHMEM_UNPIN, &whole) < 0)
			return fail("unpin");
		purged = 0;
		if (pass == 2) {
			/* What a memory-pressure event does to unpinned areas. */
			r = ioctl(fd, ASHMEM_PURGE_ALL_CACHES, 0);
			if (r >= 0) {
				printf("PURGE_ALL_CACHES: %d unpinned pages were reclaimable\n", r);
				purged = 1;
			} else {
				printf("PURGE_ALL_CACHES: %s (needs CAP_SYS_ADMIN)\n",
				       strerror(errno));
			}
		}
		r = ioctl(fd, ASHMEM_PIN, &whole);
		if (r < 0)
			return fail("pin");
		printf("pass %d: pin says %s; first byte now 0x%02x\n", pass,
		       r == ASHMEM_WAS_PURGED ? "ASHMEM_WAS_PURGED" : "ASHMEM_NOT_PURGED",
		       p[0]);
		if ((r == ASHMEM_WAS_PURGED) != (p[0] == 0) ||
		    (pass == 1 && r != ASHMEM_NOT_PURGED) || (purged && r != ASHMEM_WAS_PURGED)) {
			fprintf(stderr, "ashmem_client: unexpected result\n");
			return 1;
		}
		if (r == ASHMEM_WAS_PURGED) {
			printf("the contents were discarded: regenerate them\n");
			memset(p, 0xab, AREA_SIZE);
		}
	}
	munmap(p, AREA_SIZE);
	close(fd);
	return 0;
}
