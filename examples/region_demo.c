/* SPDX-License-Identifier: MIT */
/*
 * region_demo - the library in one screen: a cache in a region is marked
 * volatile, memory pressure (here: an explicit purge) takes it, and marking
 * it non-volatile again says VRANGE_PURGED so the program rebuilds it.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <vrange.h>

#define CACHE_SIZE (8u << 20)

static long long resident_kib(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (long long)st.st_blocks / 2 : -1;
}

int main(void)
{
	vrange_region *r;
	int ret = vrange_region_create("demo-cache", CACHE_SIZE, VRANGE_ACCESS_ZERO, &r);

	if (ret < 0) {
		fprintf(stderr, "vrange_region_create: %s\n", strerror(-ret));
		return 1;
	}
	char *cache = vrange_region_base(r);
	memset(cache, 'x', CACHE_SIZE);
	printf("cache filled:            %lld KiB resident\n", resident_kib(vrange_region_fd(r)));

	/* Not needed for a while: let the system have it if it must. */
	vrange_mark_volatile(r, 0, CACHE_SIZE);
	printf("marked volatile:         is_volatile = %d\n", vrange_is_volatile(r, 0, CACHE_SIZE));

	ssize_t freed = vrange_purge(SIZE_MAX);
	printf("purged:                  %zd KiB freed, %lld KiB resident\n",
	       freed / 1024, resident_kib(vrange_region_fd(r)));

	ret = vrange_mark_nonvolatile(r, 0, CACHE_SIZE);
	printf("marked non-volatile:     %s\n",
	       ret == VRANGE_PURGED ? "VRANGE_PURGED - rebuild the cache" :
	       ret == VRANGE_INTACT ? "VRANGE_INTACT - cache still valid" : strerror(-ret));
	if (ret == VRANGE_PURGED)
		memset(cache, 'x', CACHE_SIZE);

	vrange_region_destroy(r);
	return ret == VRANGE_PURGED ? 0 : 1;
}
