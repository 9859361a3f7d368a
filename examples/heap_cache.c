/* SPDX-License-Identifier: MIT */
/*
 * heap_cache.c - a cache of computed pages that lives on the ordinary heap
 * and lets the library discard it under memory pressure, with nothing
 * moved into library regions: vrange() on malloc'd memory (contract
 * section 5), the way the original vrange() syscall was used.
 *
 * Each cache entry is a page-aligned heap buffer.  An entry not in use is
 * volatile; taking it marks it non-volatile, and VRANGE_PURGED says its
 * contents are gone and must be recomputed.  In SIGBUS mode a purged entry
 * must not be read before it is taken (it would raise SIGBUS) - taking it
 * first is the rule anyway.
 *
 *   ./heap_cache            fill, release, force a purge, take back
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vrange.h>

#define ENTRIES 64
#define ENTRY_PAGES 4

struct entry {
	unsigned char *data; /* page-aligned, ENTRY_PAGES pages */
	int key;
};

static size_t entry_bytes;

/* The expensive computation the cache saves. */
static void compute(struct entry *e)
{
	for (size_t i = 0; i < entry_bytes; i++)
		e->data[i] = (unsigned char)(e->key * 31 + i % 251);
}

static int check(const struct entry *e)
{
	for (size_t i = 0; i < entry_bytes; i++)
		if (e->data[i] != (unsigned char)(e->key * 31 + i % 251))
			return -1;
	return 0;
}

/* Done with an entry: the library may drop it from now on. */
static int release(struct entry *e)
{
	return vrange(e->data, entry_bytes, VRANGE_VOLATILE, NULL);
}

/* Need an entry again: 1 if it had to be recomputed, 0 if kept, -errno. */
static int take(struct entry *e)
{
	int purged = 0, r = vrange(e->data, entry_bytes, VRANGE_NONVOLATILE, &purged);

	if (r < 0)
		return r;
	if (purged)
		compute(e);
	return purged;
}

int main(void)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	struct entry cache[ENTRIES];
	struct vrange_stats st;
	int recomputed = 0, kept = 0, r;
	ssize_t freed;

	entry_bytes = ENTRY_PAGES * ps;
	for (int i = 0; i < ENTRIES; i++) {
		/* Page-aligned: marking volatile rounds inward, so an unaligned
		 * buffer would keep its partial first and last pages. */
		if (posix_memalign((void **)&cache[i].data, ps, entry_bytes) != 0) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		cache[i].key = i;
		compute(&cache[i]);
		r = release(&cache[i]);
		if (r < 0) {
			fprintf(stderr, "vrange: %s\n", strerror(-r));
			return 1;
		}
	}
	vrange_get_stats(&st);
	printf("%d entries released: %llu KiB volatile (access mode: %s)\n", ENTRIES,
	       (unsigned long long)st.volatile_bytes / 1024,
	       st.access_fallback[0] ? "zeros" : "SIGBUS");

	/* Stand-in for memory pressure: drop the oldest half. */
	freed = vrange_purge((size_t)ENTRIES / 2 * entry_bytes);
	printf("pressure: %zd KiB discarded\n", freed / 1024);

	for (int i = 0; i < ENTRIES; i++) {
		r = take(&cache[i]);
		if (r < 0 || check(&cache[i]) != 0) {
			fprintf(stderr, "entry %d: %s\n", i, r < 0 ? strerror(-r) : "bad data");
			return 1;
		}
		r ? recomputed++ : kept++;
	}
	printf("taken back: %d kept, %d recomputed, all correct\n", kept, recomputed);
	for (int i = 0; i < ENTRIES; i++)
		free(cache[i].data);
	return 0;
}
