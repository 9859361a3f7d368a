/* SPDX-License-Identifier: MIT */
/*
 * test_stats_abi.c - struct vrange_stats keeps its promise to binaries built
 * against an older header (docs/abi.md).
 *
 * A binary linked against LIBVRANGE_0.1 calls vrange_get_stats@LIBVRANGE_0.1
 * with the 0.1 layout: 128 bytes, up to access_fallback.  That call must
 * fill those 128 bytes and write nothing past them (the library of the last
 * round wrote 168, over whatever the caller kept there).  The sized call
 * writes exactly the size it is given, zeros what a newer header has and the
 * library does not know, and refuses a size smaller than the 0.1 layout.
 *
 * The library's entry points are taken by version with dlvsym(), as the
 * dynamic linker binds an old binary's references: run against the library
 * of the last round, the 0.1 call overwrites the canary and this fails.
 * A standalone program: exit 0 passed, 1 failed, 77 skipped.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vrange.h>

/* The layout LIBVRANGE_0.1 published, copied from the header of then. */
struct stats_0_1 {
	uint64_t regions;
	uint64_t files;
	uint64_t volatile_bytes;
	uint64_t purged_bytes;
	uint64_t purges;
	uint64_t purged_total;
	uint64_t pressure_events;
	uint64_t refills;
	char pressure_source[32];
	char access_fallback[32];
};

#define CANARY 0xa5
#define SLACK 256 /* bytes after the caller's struct that must stay */

/* The caller's struct followed by what it keeps next to it. */
static union {
	unsigned char bytes[sizeof(struct vrange_stats) + 64 + SLACK];
	uint64_t align;
} buf;

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		printf("FAIL: %s\n", what);
		failures++;
	}
}

/* Bytes [from, to) of buf still hold the canary. */
static int untouched(size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (buf.bytes[i] != CANARY) {
			printf("  byte %zu of the caller's memory overwritten (%#x)\n",
			       i, buf.bytes[i]);
			return 0;
		}
	return 1;
}

int main(void)
{
	typedef int (*get_0_1_fn)(void *);
	typedef int (*get_sized_fn)(void *, size_t);
	get_0_1_fn get_0_1;
	get_sized_fn get_sized;
	struct stats_0_1 *old = (struct stats_0_1 *)buf.bytes;
	struct vrange_stats *cur = (struct vrange_stats *)buf.bytes;
	struct vrange_stats via_inline;
	vrange_region *r = NULL;
	size_t big = sizeof(struct vrange_stats) + 64;
	int rc;

	/* A link reference, so the library is loaded without any dlopen. */
	printf("libvrange %s\n", vrange_version());
	get_0_1 = (get_0_1_fn)dlvsym(RTLD_DEFAULT, "vrange_get_stats",
				     "LIBVRANGE_0.1");
	get_sized = (get_sized_fn)dlvsym(RTLD_DEFAULT, "vrange_get_stats_sized",
					 "LIBVRANGE_0.2");
	check(get_0_1 != NULL, "vrange_get_stats@LIBVRANGE_0.1 is exported");
	if (!get_0_1)
		return 1;
	_Static_assert(sizeof(struct stats_0_1) == 128, "0.1 layout is 128 bytes");
	_Static_assert(offsetof(struct vrange_stats, access_fallback) ==
		       offsetof(struct stats_0_1, access_fallback),
		       "fields of 0.1 moved");

	rc = vrange_region_create("stats-abi", 4096, 0, &r);
	if (rc < 0) {
		printf("SKIP: vrange_region_create: %s\n", strerror(-rc));
		return 77;
	}

	/* 1. A binary of 0.1: its struct, then its own data. */
	memset(buf.bytes, CANARY, sizeof(buf.bytes));
	rc = get_0_1(old);
	check(rc == 0, "the 0.1 call returns 0");
	check(old->regions == 1, "the 0.1 call fills regions");
	check(memchr(old->pressure_source, 0, sizeof(old->pressure_source)) &&
	      old->pressure_source[0] != (char)CANARY,
	      "the 0.1 call fills pressure_source");
	check(memchr(old->access_fallback, 0, sizeof(old->access_fallback)) != NULL,
	      "the 0.1 call fills access_fallback");
	check(untouched(sizeof(*old), sizeof(buf.bytes)),
	      "the 0.1 call writes nothing past the 0.1 layout");

	check(get_sized != NULL, "vrange_get_stats_sized@LIBVRANGE_0.2 is exported");
	if (!get_sized)
		return 1;

	/* 2. The sized call with the 0.1 size: the same 128 bytes. */
	memset(buf.bytes, CANARY, sizeof(buf.bytes));
	check(get_sized(buf.bytes, sizeof(*old)) == 0, "sized(128) returns 0");
	check(old->regions == 1, "sized(128) fills regions");
	check(untouched(sizeof(*old), sizeof(buf.bytes)),
	      "sized(128) writes nothing past 128 bytes");

	/* 3. Too small, zero, NULL: -EINVAL, nothing written. */
	memset(buf.bytes, CANARY, sizeof(buf.bytes));
	check(get_sized(buf.bytes, sizeof(*old) - 1) == -EINVAL,
	      "a size short of the 0.1 layout is -EINVAL");
	check(get_sized(buf.bytes, 0) == -EINVAL, "size 0 is -EINVAL");
	check(untouched(0, sizeof(buf.bytes)),
	      "a refused call writes nothing");
	check(get_sized(NULL, sizeof(struct vrange_stats)) == -EINVAL,
	      "NULL is -EINVAL");

	/* 4. This header's size: every field, nothing past the struct. */
	memset(buf.bytes, CANARY, sizeof(buf.bytes));
	check(get_sized(cur, sizeof(*cur)) == 0, "sized(sizeof) returns 0");
	check(cur->regions == 1 && cur->sigbus_fallbacks != 0xa5a5a5a5a5a5a5a5u,
	      "sized(sizeof) fills the fields");
	check(memchr(cur->sigbus_fallback, 0, sizeof(cur->sigbus_fallback)) != NULL,
	      "sized(sizeof) fills the last field");
	check(untouched(sizeof(*cur), sizeof(buf.bytes)),
	      "sized(sizeof) writes nothing past the struct");

	/* 5. A newer header's bigger struct: what this library does not know
	 * reads 0, and nothing past the size given is written. */
	memset(buf.bytes, CANARY, sizeof(buf.bytes));
	check(get_sized(cur, big) == 0, "a bigger size returns 0");
	for (size_t i = sizeof(*cur); i < big; i++)
		if (buf.bytes[i] != 0) {
			check(0, "fields unknown to the library read 0");
			break;
		}
	check(untouched(big, sizeof(buf.bytes)),
	      "a bigger size writes nothing past it");

	/* 6. The header's inline is the sized call with its own size. */
	memset(&via_inline, CANARY, sizeof(via_inline));
	check(vrange_get_stats(&via_inline) == 0 && via_inline.regions == 1 &&
	      !strcmp(via_inline.pressure_source, cur->pressure_source),
	      "vrange_get_stats() of the header fills the struct");

	vrange_region_destroy(r);
	if (failures)
		return 1;
	printf("0.1 caller: 128 bytes written, %d canary bytes intact; "
	       "short sizes refused\n", (int)(sizeof(buf.bytes) - 128));
	return 0;
}
