/* SPDX-License-Identifier: MIT */
/*
 * test_cache.c - the purgeable cache, contract section 7, one case per
 * sentence, and a concurrent stress test: threads put, get, release and
 * remove versioned, checksummed values while another thread purges at
 * random; any damaged hit fails it.
 *
 * Every case runs in its own forked process (Check's fork mode), so the
 * purge order holds only what the case made.  The monitor is off
 * (VRANGE_MONITOR=0) unless a case starts it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

static vrange_cache *mk(size_t max_bytes, int prio)
{
	struct vrange_cache_opts o = { sizeof(o), "test", max_bytes, prio, 0, 0 };
	vrange_cache *c = NULL;

	ck_assert_int_eq(vrange_cache_create(&o, &c), 0);
	ck_assert_ptr_nonnull(c);
	return c;
}

static struct vrange_cache_stats cstats(vrange_cache *c)
{
	struct vrange_cache_stats st = { .struct_size = sizeof(st) };

	ck_assert_int_eq(vrange_cache_get_stats(c, &st), 0);
	return st;
}

static struct vrange_stats lstats(void)
{
	struct vrange_stats st;

	ck_assert_int_eq(vrange_get_stats(&st), 0);
	return st;
}

static unsigned char *pattern(size_t n, unsigned seed)
{
	unsigned char *b = malloc(n);

	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 9));
	return b;
}

static void put_s(vrange_cache *c, const char *k, const void *v, size_t n)
{
	ck_assert_int_eq(vrange_cache_put(c, k, strlen(k), v, n), 0);
}

/* Get k and check it equals want[0..n). Returns the held pointer. */
static const void *get_eq(vrange_cache *c, const char *k, const void *want, size_t n)
{
	const void *v = NULL;
	size_t len = 0;

	ck_assert_int_eq(vrange_cache_get(c, k, strlen(k), &v, &len), 0);
	ck_assert_uint_eq(len, n);
	ck_assert(memcmp(v, want, n) == 0);
	return v;
}

static int get_rc(vrange_cache *c, const char *k)
{
	const void *v;
	size_t len;
	int r = vrange_cache_get(c, k, strlen(k), &v, &len);

	if (r == 0)
		ck_assert_int_eq(vrange_cache_release(c, v), 0);
	return r;
}

/* --- creation and destruction ------------------------------------------ */

START_TEST(create_defaults_and_opts)
{
	vrange_cache *c = NULL;

	ck_assert_int_eq(vrange_cache_create(NULL, &c), 0);
	ck_assert_ptr_nonnull(c);
	put_s(c, "k", "v", 1);
	ck_assert_int_eq(get_rc(c, "k"), 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
	c = mk(1 << 20, 3);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(create_bad_input)
{
	struct vrange_cache_opts o = { sizeof(o), NULL, 0, 0, 0, 0 };
	vrange_cache *c = (vrange_cache *)0x1234;

	ck_assert_int_eq(vrange_cache_create(NULL, NULL), -EINVAL);
	ck_assert_int_eq(vrange_cache_create(&o, NULL), -EINVAL);
	o.struct_size = offsetof(struct vrange_cache_opts, flags); /* short of the first layout */
	ck_assert_int_eq(vrange_cache_create(&o, &c), -EINVAL);
	o.struct_size = 0;
	ck_assert_int_eq(vrange_cache_create(&o, &c), -EINVAL);
	o.struct_size = sizeof(o);
	o.flags = 2;
	ck_assert_int_eq(vrange_cache_create(&o, &c), -EINVAL);
	ck_assert_ptr_eq(c, (vrange_cache *)0x1234);
	/* A later, longer layout is accepted. */
	struct { struct vrange_cache_opts o; uint64_t more; } big = { { sizeof(big), 0, 0, 0, 0, 0 }, 0 };
	ck_assert_int_eq(vrange_cache_create(&big.o, &c), 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(destroy_null_and_busy)
{
	vrange_cache *c = mk(0, 0);
	const void *v;

	ck_assert_int_eq(vrange_cache_destroy(NULL), 0);
	put_s(c, "a", "hello", 5);
	v = get_eq(c, "a", "hello", 5);
	ck_assert_int_eq(vrange_cache_destroy(c), -EBUSY);
	/* Still intact after the refusal. */
	ck_assert(memcmp(v, "hello", 5) == 0);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- values and keys ---------------------------------------------------- */

START_TEST(values_of_any_size_copied_in)
{
	vrange_cache *c = mk(0, 0);
	size_t sizes[] = { 1, 15, 16, 17, 100, 2047, 2048, 2049, ps - 1, ps,
			   ps + 1, 3 * ps + 5, 1 << 20, 9u << 20 };
	size_t n = sizeof(sizes) / sizeof(sizes[0]);
	char key[32];

	for (size_t i = 0; i < n; i++) {
		unsigned char *b = pattern(sizes[i], (unsigned)i);

		snprintf(key, sizeof(key), "size-%zu", sizes[i]);
		put_s(c, key, b, sizes[i]);
		/* Copied: the caller's buffer may change or go. */
		memset(b, 0xee, sizes[i]);
		free(b);
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char *b = pattern(sizes[i], (unsigned)i);

		snprintf(key, sizeof(key), "size-%zu", sizes[i]);
		ck_assert_int_eq(vrange_cache_release(c, get_eq(c, key, b, sizes[i])), 0);
		free(b);
	}
	ck_assert_uint_eq(cstats(c).entries, n);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(keys_are_bytes)
{
	vrange_cache *c = mk(0, 0);
	unsigned char k1[3] = { 'a', 0, 'b' }, k2[3] = { 'a', 0, 'c' };
	unsigned char *big = pattern(4096, 9);
	const void *v;
	size_t len;

	ck_assert_int_eq(vrange_cache_put(c, k1, 3, "one", 3), 0);
	ck_assert_int_eq(vrange_cache_put(c, k2, 3, "two", 3), 0);
	ck_assert_int_eq(vrange_cache_put(c, k1, 1, "pre", 3), 0);
	ck_assert_int_eq(vrange_cache_put(c, big, 4096, "max", 3), 0);
	ck_assert_int_eq(vrange_cache_get(c, k1, 3, &v, &len), 0);
	ck_assert(len == 3 && !memcmp(v, "one", 3));
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_get(c, k2, 3, &v, &len), 0);
	ck_assert(!memcmp(v, "two", 3));
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_get(c, k1, 1, &v, &len), 0);
	ck_assert(!memcmp(v, "pre", 3));
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_get(c, big, 4096, &v, &len), 0);
	ck_assert(!memcmp(v, "max", 3));
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_get(c, k1, 2, &v, &len), -ENOENT);
	ck_assert_int_eq(vrange_cache_put(c, big, 4097, "x", 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_get(c, big, 4097, &v, &len), -EINVAL);
	free(big);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(put_replaces)
{
	vrange_cache *c = mk(0, 0);

	put_s(c, "k", "first", 5);
	put_s(c, "k", "second!", 7);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", "second!", 7)), 0);
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_uint_eq(cstats(c).value_bytes, 7);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/*
 * A put over a released value of the same size class reuses its slot: the
 * value, its length and the counters must still be the new ones, for a
 * small and a large value, and a held copy is never written over.
 */
START_TEST(put_same_size_over_released)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *a = pattern(3 * ps, 21), *b = pattern(3 * ps, 22);
	const void *held;
	struct vrange_cache_stats st;

	put_s(c, "small", a, 100);
	put_s(c, "small", b, 90); /* same class, shorter */
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "small", b, 90)), 0);
	put_s(c, "large", a, 3 * ps);
	put_s(c, "large", b, 3 * ps - 5); /* same pages, shorter */
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "large", b, 3 * ps - 5)), 0);
	held = get_eq(c, "large", b, 3 * ps - 5);
	put_s(c, "large", a, 3 * ps);
	ck_assert(memcmp(held, b, 3 * ps - 5) == 0);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "large", a, 3 * ps)), 0);
	ck_assert_int_eq(vrange_cache_release(c, held), 0);
	st = cstats(c);
	ck_assert_uint_eq(st.entries, 2);
	ck_assert_uint_eq(st.value_bytes, 90 + 3 * ps);
	ck_assert_uint_eq(st.hits, 4);
	free(a);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* A put over a same-size value that was purged: the old one is found
 * purged (and counted so), the new one is whole. */
START_TEST(put_same_size_over_purged)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *a = pattern(2 * ps, 23), *b = pattern(2 * ps, 24);
	struct vrange_cache_stats st;

	put_s(c, "k", a, 2 * ps);
	put_s(c, "s", a, 40);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	put_s(c, "k", b, 2 * ps);
	put_s(c, "s", b, 40);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", b, 2 * ps)), 0);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "s", b, 40)), 0);
	st = cstats(c);
	ck_assert_uint_eq(st.entries, 2);
	ck_assert_uint_eq(st.value_bytes, 2 * ps + 40);
	ck_assert_uint_eq(st.purged_entries, 2);
	free(a);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/*
 * Removes racing with puts and commits of one key: whichever of remove
 * and the put's own hold ends last frees the value (a leak shows under
 * LeakSanitizer), and the counters end at zero.
 */
struct race { vrange_cache *c; _Atomic bool stop; };

static void *remover(void *arg)
{
	struct race *r = arg;

	while (!atomic_load(&r->stop))
		(void)vrange_cache_remove(r->c, "k", 1);
	return NULL;
}

START_TEST(remove_races_put)
{
	struct race r = { mk(0, 0), false };
	unsigned char *b = pattern(2 * ps, 25);
	pthread_t t;
	void *buf;

	ck_assert_int_eq(pthread_create(&t, NULL, remover, &r), 0);
	for (int i = 0; i < (test_quick() ? 2000 : 20000); i++) {
		size_t n = i % 2 ? 2 * ps : 100;

		if (i % 3) {
			put_s(r.c, "k", b, n);
		} else {
			ck_assert_int_eq(vrange_cache_reserve(r.c, "k", 1, n, &buf), 0);
			memcpy(buf, b, n);
			ck_assert_int_eq(vrange_cache_commit(r.c, buf), 0);
		}
	}
	atomic_store(&r.stop, true);
	pthread_join(t, NULL);
	(void)vrange_cache_remove(r.c, "k", 1);
	ck_assert_uint_eq(cstats(r.c).entries, 0);
	ck_assert_uint_eq(cstats(r.c).value_bytes, 0);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(r.c), 0);
}
END_TEST

/* "starts released": a fresh value is volatile and goes in a purge. */
START_TEST(put_starts_released)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(64 * ps, 1);
	struct vrange_stats before = lstats(), after;

	put_s(c, "big", b, 64 * ps);
	after = lstats();
	ck_assert_uint_ge(after.volatile_bytes - before.volatile_bytes, 64 * ps);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(64 * ps));
	ck_assert_int_eq(get_rc(c, "big"), -ENOENT);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- holding ------------------------------------------------------------ */

START_TEST(held_value_survives_purge_and_stays_put)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(40 * ps + 3, 2), *s = pattern(100, 3);
	const void *v, *w, *v2;
	char key[32];

	put_s(c, "big", b, 40 * ps + 3);
	put_s(c, "small", s, 100);
	v = get_eq(c, "big", b, 40 * ps + 3);
	w = get_eq(c, "small", s, 100);
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "o%d", i);
		put_s(c, key, b, (size_t)(i % 7 + 1) * 300);
		if (i % 3 == 0)
			ck_assert_int_eq(vrange_cache_remove(c, key, strlen(key)), 0);
	}
	vrange_purge(SIZE_MAX);
	ck_assert(memcmp(v, b, 40 * ps + 3) == 0);
	ck_assert(memcmp(w, s, 100) == 0);
	/* Never moves: a second hold sees the same address. */
	v2 = get_eq(c, "big", b, 40 * ps + 3);
	ck_assert_ptr_eq(v, v2);
	ck_assert_int_eq(vrange_cache_release(c, v2), 0);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_release(c, w), 0);
	free(b);
	free(s);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(several_holders)
{
	vrange_cache *c = mk(0, 0);
	const void *a, *b;

	put_s(c, "k", "value", 5);
	a = get_eq(c, "k", "value", 5);
	b = get_eq(c, "k", "value", 5);
	ck_assert_ptr_eq(a, b);
	vrange_purge(SIZE_MAX);
	ck_assert_int_eq(vrange_cache_release(c, a), 0);
	/* One holder left: still non-volatile, still intact. */
	vrange_purge(SIZE_MAX);
	ck_assert(memcmp(b, "value", 5) == 0);
	ck_assert_int_eq(vrange_cache_release(c, b), 0);
	ck_assert_int_eq(vrange_cache_release(c, b), -EINVAL);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* Released after a get: volatile again, whatever the deferral (every
 * purge first makes deferred values volatile). */
START_TEST(released_value_goes_in_purge)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(4 * ps, 18);

	put_s(c, "k", b, 4 * ps);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", b, 4 * ps)), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* get of a purged value drops the entry and misses, counted. */
START_TEST(purged_value_misses)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(8 * ps, 4);
	struct vrange_cache_stats st;

	put_s(c, "k", b, 8 * ps);
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(8 * ps));
	/* Not yet found: still counted. */
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	st = cstats(c);
	ck_assert_uint_eq(st.entries, 0);
	ck_assert_uint_eq(st.value_bytes, 0);
	ck_assert_uint_eq(st.purged_entries, 1);
	ck_assert_uint_eq(st.misses, 1);
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	st = cstats(c);
	ck_assert_uint_eq(st.purged_entries, 1);
	ck_assert_uint_eq(st.misses, 2);
	ck_assert_int_eq(vrange_cache_remove(c, "k", 1), -ENOENT);
	/* The key can be stored again. */
	put_s(c, "k", b, 8 * ps);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", b, 8 * ps)), 0);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* Any byte lost is enough: one purged page of a multi-page value. */
START_TEST(partly_purged_value_misses)
{
	struct vrange_cache_opts o = { sizeof(o), "eager", 0, 0, VRANGE_CACHE_EAGER, 0 };
	vrange_cache *c = NULL;
	unsigned char *b = pattern(16 * ps, 5);
	vrange_region *r;

	/* Eager: volatile at the put, so older than the region's page. */
	ck_assert_int_eq(vrange_cache_create(&o, &c), 0);
	put_s(c, "k", b, 16 * ps);
	/* Something newer, and one page of the value: only the oldest pages
	 * of the value go when a single page is asked for. */
	ck_assert_int_eq(vrange_region_create("other", ps, VRANGE_ACCESS_ZERO, &r), 0);
	memset(vrange_region_base(r), 1, ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, ps), 0);
	ck_assert_int_ge(vrange_purge(1), 1);
	ck_assert_int_eq(vrange_is_volatile(r, 0, ps), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, ps), VRANGE_INTACT);
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	ck_assert_uint_eq(cstats(c).purged_entries, 1);
	vrange_region_destroy(r);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* Small values share a page: purging it drops every entry on it. */
START_TEST(small_values_share_pages)
{
	vrange_cache *c = mk(0, 0);
	size_t n = ps / 64;
	struct vrange_cache_stats st;
	char key[64] = "";

	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "s%zu", i);
		put_s(c, key, key, sizeof(key));
	}
	st = cstats(c);
	/* Packed: one page of values, not n pages. */
	ck_assert_uint_lt(st.resident_bytes, (n / 2) * ps + 64 * 1024);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(get_rc(c, "s0"), -ENOENT);
	st = cstats(c);
	ck_assert_uint_eq(st.purged_entries, n);
	ck_assert_uint_eq(st.entries, 0);
	for (size_t i = 1; i < n; i++) {
		snprintf(key, sizeof(key), "s%zu", i);
		ck_assert_int_eq(get_rc(c, key), -ENOENT);
	}
	ck_assert_uint_eq(cstats(c).purged_entries, n);
	ck_assert_uint_eq(cstats(c).misses, n);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* One held value keeps its page, and so its neighbours, non-volatile. */
START_TEST(held_small_value_protects_its_page)
{
	vrange_cache *c = mk(0, 0);
	const void *v;

	put_s(c, "a", "aaaaaaaaaaaaaaaa", 16);
	put_s(c, "b", "bbbbbbbbbbbbbbbb", 16);
	v = get_eq(c, "a", "aaaaaaaaaaaaaaaa", 16);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), 0);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "b", "bbbbbbbbbbbbbbbb", 16)), 0);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(get_rc(c, "b"), -ENOENT);
	ck_assert_int_eq(get_rc(c, "a"), -ENOENT);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(put_of_held_key)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *old = pattern(3 * ps, 6), *nw = pattern(2 * ps, 7);
	const void *v;

	put_s(c, "k", old, 3 * ps);
	v = get_eq(c, "k", old, 3 * ps);
	put_s(c, "k", nw, 2 * ps);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", nw, 2 * ps)), 0);
	vrange_purge(SIZE_MAX);
	ck_assert(memcmp(v, old, 3 * ps) == 0);
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_uint_eq(cstats(c).value_bytes, 0 + 2 * ps);
	ck_assert_int_eq(vrange_cache_destroy(c), -EBUSY);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_release(c, v), -EINVAL);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
	free(old);
	free(nw);
}
END_TEST

START_TEST(release_bad_pointers)
{
	vrange_cache *c = mk(0, 0), *c2 = mk(0, 0);
	const void *v, *w;
	int local;

	put_s(c, "big", "x", 1);
	put_s(c, "small", "0123456789abcdef0123", 20);
	put_s(c2, "k", "y", 1);
	v = get_eq(c, "small", "0123456789abcdef0123", 20);
	w = get_eq(c2, "k", "y", 1);
	ck_assert_int_eq(vrange_cache_release(c, &local), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, NULL), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(NULL, v), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, (const char *)v + 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, (const char *)v + 16), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, w), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c2, v), -EINVAL);
	/* A value that exists but is not held. */
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "big", "x", 1)), 0);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_release(c, v), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c2, w), 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
	ck_assert_int_eq(vrange_cache_destroy(c2), 0);
}
END_TEST

START_TEST(large_value_interior_pointer)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(5 * ps, 8);
	const char *v;

	put_s(c, "k", b, 5 * ps);
	v = get_eq(c, "k", b, 5 * ps);
	ck_assert_int_eq(vrange_cache_release(c, v + 8), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, v + ps), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, v + 5 * ps), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(bad_input)
{
	vrange_cache *c = mk(0, 0);
	struct vrange_cache_stats st = { .struct_size = sizeof(st) };
	const void *v = (void *)0x77;
	size_t len = 77;
	void *buf = (void *)0x66;

	ck_assert_int_eq(vrange_cache_put(NULL, "k", 1, "v", 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_put(c, NULL, 1, "v", 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_put(c, "k", 0, "v", 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_put(c, "k", 1, NULL, 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_put(c, "k", 1, "v", 0), -EINVAL);
	ck_assert_int_eq(vrange_cache_get(NULL, "k", 1, &v, &len), -EINVAL);
	ck_assert_int_eq(vrange_cache_get(c, NULL, 1, &v, &len), -EINVAL);
	ck_assert_int_eq(vrange_cache_get(c, "k", 0, &v, &len), -EINVAL);
	ck_assert_int_eq(vrange_cache_get(c, "k", 4097, &v, &len), -EINVAL);
	put_s(c, "k", "v", 1);
	ck_assert_int_eq(vrange_cache_get(c, "k", 1, NULL, &len), -EINVAL);
	ck_assert_int_eq(vrange_cache_get(c, "k", 1, &v, NULL), -EINVAL);
	ck_assert_ptr_eq(v, (void *)0x77);
	ck_assert_uint_eq(len, 77);
	ck_assert_int_eq(vrange_cache_remove(NULL, "k", 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_remove(c, NULL, 1), -EINVAL);
	ck_assert_int_eq(vrange_cache_remove(c, "k", 0), -EINVAL);
	ck_assert_int_eq(vrange_cache_remove(c, "k", 4097), -EINVAL);
	ck_assert_int_eq(vrange_cache_reserve(NULL, "k", 1, 1, &buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_reserve(c, NULL, 1, 1, &buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_reserve(c, "k", 0, 1, &buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_reserve(c, "k", 1, 0, &buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_reserve(c, "k", 1, 1, NULL), -EINVAL);
	ck_assert_ptr_eq(buf, (void *)0x66);
	ck_assert_int_eq(vrange_cache_commit(NULL, buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_commit(c, NULL), -EINVAL);
	ck_assert_int_eq(vrange_cache_abort(NULL, buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_abort(c, NULL), -EINVAL);
	ck_assert_int_eq(vrange_cache_get_stats(NULL, &st), -EINVAL);
	ck_assert_int_eq(vrange_cache_get_stats(c, NULL), -EINVAL);
	/* Shorter than the first layout (which ends with evictions). */
	st.struct_size = offsetof(struct vrange_cache_stats, evictions);
	st.entries = 12345;
	ck_assert_int_eq(vrange_cache_get_stats(c, &st), -EINVAL);
	ck_assert_uint_eq(st.entries, 12345);
	/* Nothing above changed the cache. */
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_uint_eq(cstats(c).misses, 0);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(miss_leaves_out_params)
{
	vrange_cache *c = mk(0, 0);
	const void *v = (void *)0x77;
	size_t len = 77;

	ck_assert_int_eq(vrange_cache_get(c, "none", 4, &v, &len), -ENOENT);
	ck_assert_ptr_eq(v, (void *)0x77);
	ck_assert_uint_eq(len, 77);
	put_s(c, "gone", "x", 1);
	vrange_purge(SIZE_MAX);
	ck_assert_int_eq(vrange_cache_get(c, "gone", 4, &v, &len), -ENOENT);
	ck_assert_ptr_eq(v, (void *)0x77);
	ck_assert_uint_eq(len, 77);
	ck_assert_uint_eq(cstats(c).misses, 2);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(remove_rules)
{
	vrange_cache *c = mk(0, 0);
	const void *v;

	ck_assert_int_eq(vrange_cache_remove(c, "k", 1), -ENOENT);
	put_s(c, "k", "held", 4);
	put_s(c, "j", "free", 4);
	ck_assert_int_eq(vrange_cache_remove(c, "j", 1), 0);
	ck_assert_int_eq(get_rc(c, "j"), -ENOENT);
	v = get_eq(c, "k", "held", 4);
	ck_assert_int_eq(vrange_cache_remove(c, "k", 1), 0);
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	ck_assert_int_eq(vrange_cache_remove(c, "k", 1), -ENOENT);
	ck_assert_uint_eq(cstats(c).entries, 0);
	ck_assert_uint_eq(cstats(c).value_bytes, 0);
	vrange_purge(SIZE_MAX);
	ck_assert(memcmp(v, "held", 4) == 0);
	ck_assert_int_eq(vrange_cache_destroy(c), -EBUSY);
	ck_assert_int_eq(vrange_cache_release(c, v), 0);
	ck_assert_int_eq(vrange_cache_release(c, v), -EINVAL);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- max_bytes ------------------------------------------------------------ */

START_TEST(cap_evicts_lru_released)
{
	vrange_cache *c = mk(3000, 0);
	unsigned char *b = pattern(1000, 10);
	struct vrange_cache_stats st;

	put_s(c, "A", b, 1000);
	put_s(c, "B", b, 1000);
	put_s(c, "C", b, 1000);
	ck_assert_int_eq(get_rc(c, "A"), 0); /* A now more recent than B */
	put_s(c, "D", b, 1000);
	ck_assert_int_eq(get_rc(c, "B"), -ENOENT);
	ck_assert_int_eq(get_rc(c, "A"), 0);
	ck_assert_int_eq(get_rc(c, "C"), 0);
	ck_assert_int_eq(get_rc(c, "D"), 0);
	st = cstats(c);
	ck_assert_uint_eq(st.evictions, 1);
	ck_assert_uint_eq(st.entries, 3);
	ck_assert_uint_eq(st.value_bytes, 3000);
	ck_assert_uint_eq(st.purged_entries, 0);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(cap_held_never_evicted)
{
	vrange_cache *c = mk(2000, 0);
	unsigned char *b = pattern(1500, 11);
	const void *a, *bb;

	put_s(c, "A", b, 1500);
	a = get_eq(c, "A", b, 1500);
	put_s(c, "B", b, 1500);          /* A held: nothing to evict */
	bb = get_eq(c, "B", b, 1500);
	/* Held values alone over the cap until released. */
	ck_assert_uint_eq(cstats(c).value_bytes, 3000);
	ck_assert_uint_eq(cstats(c).evictions, 0);
	ck_assert_int_eq(vrange_cache_release(c, a), 0); /* enforced here */
	ck_assert_uint_eq(cstats(c).evictions, 1);
	ck_assert_uint_eq(cstats(c).value_bytes, 1500);
	ck_assert_int_eq(get_rc(c, "A"), -ENOENT);
	ck_assert(memcmp(bb, b, 1500) == 0);
	ck_assert_int_eq(vrange_cache_release(c, bb), 0);
	ck_assert_int_eq(get_rc(c, "B"), 0);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(cap_too_big)
{
	vrange_cache *c = mk(1000, 0);
	void *buf = (void *)0x55;
	unsigned char *b = pattern(1001, 12);

	ck_assert_int_eq(vrange_cache_put(c, "k", 1, b, 1001), -E2BIG);
	ck_assert_int_eq(vrange_cache_reserve(c, "k", 1, 1001, &buf), -E2BIG);
	ck_assert_ptr_eq(buf, (void *)0x55);
	ck_assert_int_eq(vrange_cache_put(c, "k", 1, b, 1000), 0);
	ck_assert_uint_eq(cstats(c).entries, 1);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- statistics ----------------------------------------------------------- */

START_TEST(stats_exact)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(3 * ps, 13);
	struct vrange_cache_stats st;
	uint64_t res0 = cstats(c).resident_bytes;

	put_s(c, "a", b, 10);
	put_s(c, "b", b, 3 * ps);
	put_s(c, "c", b, 200);
	put_s(c, "c", b, 300);
	ck_assert_int_eq(get_rc(c, "a"), 0);
	ck_assert_int_eq(get_rc(c, "b"), 0);
	ck_assert_int_eq(get_rc(c, "zz"), -ENOENT);
	ck_assert_int_eq(vrange_cache_remove(c, "a", 1), 0);
	st = cstats(c);
	ck_assert_uint_eq(st.struct_size, sizeof(st));
	ck_assert_uint_eq(st.entries, 2);
	ck_assert_uint_eq(st.value_bytes, 3 * ps + 300);
	ck_assert_uint_eq(st.hits, 2);
	ck_assert_uint_eq(st.misses, 1);
	ck_assert_uint_eq(st.purged_entries, 0);
	ck_assert_uint_eq(st.evictions, 0);
	ck_assert_uint_ge(st.resident_bytes, res0 + 4 * ps);
	ck_assert_uint_ge(st.allocated_bytes, res0 + 4 * ps);
	res0 = st.allocated_bytes;
	ck_assert_int_eq(vrange_cache_remove(c, "b", 1), 0);
	ck_assert_int_eq(vrange_cache_remove(c, "c", 1), 0);
	st = cstats(c);
	ck_assert_uint_eq(st.entries, 0);
	ck_assert_uint_eq(st.value_bytes, 0);
	/* Pages handed back (3 of b, the slab pages of a and c): no longer
	 * allocated; in memory until purged, kept for the next values. */
	ck_assert_uint_le(st.allocated_bytes, res0 - 4 * ps);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(stats_longer_layout)
{
	vrange_cache *c = mk(0, 0);
	struct { struct vrange_cache_stats s; uint64_t more; } big;

	memset(&big, 0xab, sizeof(big));
	big.s.struct_size = sizeof(big);
	ck_assert_int_eq(vrange_cache_get_stats(c, &big.s), 0);
	ck_assert_uint_eq(big.s.struct_size, sizeof(big));
	ck_assert_uint_eq(big.s.entries, 0);
	ck_assert_uint_eq(big.more, 0xababababababababull);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* An earlier layout (0.1, up to evictions) gets no more than it has. */
START_TEST(stats_first_layout)
{
	vrange_cache *c = mk(0, 0);
	struct vrange_cache_stats st;

	put_s(c, "k", "v", 1);
	memset(&st, 0xab, sizeof(st));
	st.struct_size = offsetof(struct vrange_cache_stats, evictions) + sizeof(uint64_t);
	ck_assert_int_eq(vrange_cache_get_stats(c, &st), 0);
	ck_assert_uint_eq(st.entries, 1);
	ck_assert_uint_eq(st.allocated_bytes, 0xababababababababull);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/*
 * resident_bytes is what the cache holds in memory now: a purge of a
 * cache whose values are all released takes it down to bookkeeping,
 * while allocated_bytes still counts the pages given to the entries
 * (issue 25, item 5).  Lazy and eager alike.
 */
static void resident_case(unsigned flags)
{
	struct vrange_cache_opts o = { sizeof(o), "resident", 0, 0, flags, 0 };
	size_t vlen = 64 << 10, all = 64 * vlen;
	unsigned char *b = pattern(vlen, 18);
	struct vrange_cache_stats s0, s1, s2, s3;
	vrange_cache *c = NULL;
	char key[16];

	ck_assert_int_eq(vrange_cache_create(&o, &c), 0);
	s0 = cstats(c);
	ck_assert_uint_ge(s0.allocated_bytes, sizeof(void *));
	ck_assert_uint_le(s0.resident_bytes, 1 << 20); /* bookkeeping only */
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		put_s(c, key, b, vlen);
	}
	s1 = cstats(c);
	ck_assert_uint_ge(s1.resident_bytes, all);
	ck_assert_uint_ge(s1.allocated_bytes, all);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)all);
	s2 = cstats(c);
	ck_assert_msg(s2.resident_bytes + all <= s1.resident_bytes,
		      "resident_bytes %llu after the purge, %llu before",
		      (unsigned long long)s2.resident_bytes,
		      (unsigned long long)s1.resident_bytes);
	/* Bookkeeping: what it was without values, and the entries' own. */
	ck_assert_uint_le(s2.resident_bytes, s0.resident_bytes + (256u << 10));
	/* Not found purged yet: still given to the entries. */
	ck_assert_uint_ge(s2.allocated_bytes, all);
	ck_assert_uint_eq(s2.entries, 64);
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		ck_assert_int_eq(get_rc(c, key), -ENOENT);
	}
	s3 = cstats(c);
	ck_assert_uint_lt(s3.allocated_bytes + all, s2.allocated_bytes + 1);
	ck_assert_uint_le(s3.resident_bytes, s2.resident_bytes);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}

START_TEST(resident_falls_with_purge)
{
	resident_case(0);
	resident_case(VRANGE_CACHE_EAGER);
}
END_TEST

/* Region memory: library stats (not `regions`), purge order, budget. */
START_TEST(memory_is_region_memory)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(32 * ps, 14);
	struct vrange_stats s0 = lstats(), s1, s2;

	put_s(c, "k", b, 32 * ps);
	s1 = lstats();
	ck_assert_uint_eq(s1.regions, s0.regions);
	ck_assert_uint_ge(s1.volatile_bytes, s0.volatile_bytes + 32 * ps);
	vrange_purge(SIZE_MAX);
	s2 = lstats();
	ck_assert_uint_ge(s2.purged_bytes, 32 * ps);
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	/* Found purged: its pages are no longer volatile or purged. */
	ck_assert_uint_lt(lstats().purged_bytes, s2.purged_bytes);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
	ck_assert_uint_eq(lstats().regions, s0.regions);
}
END_TEST

static void order_case(int cache_prio, int region_prio, bool cache_first)
{
	vrange_cache *c = mk(0, cache_prio);
	unsigned char *b = pattern(4 * ps, 15);
	vrange_region *r;

	ck_assert_int_eq(vrange_region_create("peer", 4 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	ck_assert_int_eq(vrange_region_set_priority(r, region_prio), 0);
	memset(vrange_region_base(r), 3, 4 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	put_s(c, "k", b, 4 * ps); /* marked after the region: newer */
	ck_assert_int_ge(vrange_purge(4 * ps), (ssize_t)(4 * ps));
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps),
			 cache_first ? VRANGE_INTACT : VRANGE_PURGED);
	ck_assert_int_eq(get_rc(c, "k"), cache_first ? -ENOENT : 0);
	vrange_region_destroy(r);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}

START_TEST(one_purge_order)
{
	order_case(0, 0, false);   /* same priority: oldest first */
	order_case(-5, 0, true);   /* lower priority first, though newer */
	order_case(5, 0, false);
}
END_TEST

/*
 * Released values join the purge order when they are released, whatever
 * the cache defers (contract section 7): 64 values of 64 KiB, the 8
 * oldest got and released again, a purge of 1 MiB takes the oldest
 * released - keys 8 on - never the ones just released (issue 25, 4).
 */
static void release_order_case(unsigned flags)
{
	struct vrange_cache_opts o = { sizeof(o), "order", 0, 0, flags, 0 };
	size_t vlen = 64 << 10;
	unsigned char *b = pattern(vlen, 17);
	vrange_cache *c = NULL;
	char key[16];
	int gone[64], first_kept = -1;

	ck_assert_int_eq(vrange_cache_create(&o, &c), 0);
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		put_s(c, key, b, vlen);
	}
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		ck_assert_int_eq(get_rc(c, key), 0);
	}
	ck_assert_int_ge(vrange_purge(1 << 20), 1 << 20);
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		gone[i] = get_rc(c, key) == -ENOENT;
	}
	for (int i = 0; i < 8; i++)
		ck_assert_msg(!gone[i], "%s: k%d, released last, was purged",
			      flags ? "eager" : "lazy", i);
	ck_assert_msg(gone[8], "%s: k8, the oldest released, survived",
		      flags ? "eager" : "lazy");
	/* Oldest first: what went is a run from k8, then nothing. */
	for (int i = 8; i < 64; i++) {
		if (!gone[i] && first_kept < 0)
			first_kept = i;
		ck_assert_msg(!gone[i] || first_kept < 0,
			      "%s: k%d purged, but older k%d kept",
			      flags ? "eager" : "lazy", i, first_kept);
	}
	ck_assert_int_ge(first_kept, 8 + 16);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}

START_TEST(release_order_lazy)
{
	release_order_case(0);
}
END_TEST

START_TEST(release_order_eager)
{
	release_order_case(VRANGE_CACHE_EAGER);
}
END_TEST

/* Small values share a page: the page goes where its last release puts
 * it, deferred or not. */
START_TEST(release_order_small_values)
{
	vrange_cache *c = mk(0, 0);
	char key[16], val[64];
	int gone[96];

	memset(val, 5, sizeof(val));
	/* 64-byte values: a page holds ps / 64 of them. */
	for (int i = 0; i < 96; i++) {
		snprintf(key, sizeof(key), "s%d", i);
		for (size_t n = 0; n < ps / 64; n++) {
			char k2[48];

			snprintf(k2, sizeof(k2), "%s.%zu", key, n);
			put_s(c, k2, val, sizeof(val));
		}
	}
	/* The first page's values used again: its page is the newest. */
	for (size_t n = 0; n < ps / 64; n++) {
		char k2[48];

		snprintf(k2, sizeof(k2), "s0.%zu", n);
		ck_assert_int_eq(get_rc(c, k2), 0);
	}
	ck_assert_int_ge(vrange_purge(8 * ps), (ssize_t)(8 * ps));
	for (int i = 0; i < 96; i++) {
		char k2[48];

		snprintf(k2, sizeof(k2), "s%d.0", i);
		gone[i] = get_rc(c, k2) == -ENOENT;
	}
	ck_assert_msg(!gone[0], "the page used last was purged first");
	ck_assert(gone[1]);
	ck_assert(!gone[95]);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(budget_counts_cache)
{
	vrange_cache *c = mk(0, 0);
	unsigned char *b = pattern(1 << 20, 16);
	struct vrange_monitor_opts mo = { .struct_size = sizeof(mo),
		.flags = VRANGE_MONITOR_NO_PSI | VRANGE_MONITOR_NO_CGROUP };
	char key[32];
	int misses = 0;

	for (int i = 0; i < 32; i++) {
		snprintf(key, sizeof(key), "m%d", i);
		put_s(c, key, b, 1 << 20);
	}
	ck_assert_int_eq(vrange_set_budget(8u << 20), 0);
	ck_assert_int_eq(vrange_monitor_start(&mo), 0);
	for (int t = 0; t < 50 && lstats().purged_bytes < (20u << 20); t++)
		usleep(100 * 1000);
	vrange_monitor_stop();
	for (int i = 0; i < 32; i++) {
		snprintf(key, sizeof(key), "m%d", i);
		misses += get_rc(c, key) == -ENOENT;
	}
	ck_assert_int_ge(misses, 20);
	ck_assert_uint_ge(cstats(c).purged_entries, 20);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(name_in_proc)
{
	vrange_cache *c = mk(0, 0);
	char line[512];
	FILE *f;
	int found = 0;

	put_s(c, "k", "v", 1);
	f = fopen("/proc/self/maps", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		found += strstr(line, "vrange-cache:test") != NULL;
	fclose(f);
	ck_assert_int_ge(found, 1);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- filling in place ------------------------------------------------------- */

START_TEST(reserve_commit)
{
	vrange_cache *c = mk(0, 0);
	void *buf = NULL;
	unsigned char *b = pattern(6 * ps, 17);

	put_s(c, "k", "old", 3);
	ck_assert_int_eq(vrange_cache_reserve(c, "k", 1, 6 * ps, &buf), 0);
	ck_assert_ptr_nonnull(buf);
	/* Invisible until committed; the old value still answers. */
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", "old", 3)), 0);
	memcpy(buf, b, 6 * ps);
	/* Held while reserved: survives a purge. */
	vrange_purge(SIZE_MAX);
	ck_assert(memcmp(buf, b, 6 * ps) == 0);
	ck_assert_int_eq(vrange_cache_release(c, buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_destroy(c), -EBUSY);
	ck_assert_int_eq(vrange_cache_commit(c, buf), 0);
	ck_assert_int_eq(vrange_cache_commit(c, buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_abort(c, buf), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", b, 6 * ps)), 0);
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_uint_eq(cstats(c).value_bytes, 6 * ps);
	/* Committed values start released, like put. */
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(6 * ps));
	ck_assert_int_eq(get_rc(c, "k"), -ENOENT);
	free(b);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

START_TEST(reserve_abort)
{
	vrange_cache *c = mk(0, 0);
	void *b1 = NULL, *b2 = NULL;

	put_s(c, "k", "old", 3);
	ck_assert_int_eq(vrange_cache_reserve(c, "k", 1, 40, &b1), 0);
	ck_assert_int_eq(vrange_cache_reserve(c, "n", 1, 3 * ps, &b2), 0);
	memset(b1, 'x', 40);
	ck_assert_int_eq(vrange_cache_abort(c, b1), 0);
	ck_assert_int_eq(vrange_cache_abort(c, b2), 0);
	ck_assert_int_eq(vrange_cache_abort(c, b2), -EINVAL);
	ck_assert_int_eq(vrange_cache_commit(c, b1), -EINVAL);
	ck_assert_int_eq(vrange_cache_release(c, get_eq(c, "k", "old", 3)), 0);
	ck_assert_int_eq(get_rc(c, "n"), -ENOENT);
	ck_assert_uint_eq(cstats(c).entries, 1);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- fork ---------------------------------------------------------------- */

static void *purge_loop(void *p)
{
	_Atomic bool *stop = p;

	while (!atomic_load(stop))
		vrange_purge(SIZE_MAX);
	return NULL;
}

/* A fork while another thread flushes caches: the child's purges, stats
 * and caches of its own work (it forgets the parent's caches). */
START_TEST(fork_while_purging)
{
	vrange_cache *c;
	static _Atomic bool stop;
	pthread_t t;

	/* Valgrind runs the threads one at a time, and checks the child's
	 * leaks (the parent's cache, which the child must not touch). */
	if (getenv("VRANGE_UNDER_VALGRIND"))
		TEST_SKIP("a forked child under valgrind reports the parent's cache as leaked");
	c = mk(0, 0);
	put_s(c, "k", "parent", 6);
	ck_assert_int_eq(pthread_create(&t, NULL, purge_loop, &stop), 0);
	for (int i = 0; i < (test_quick() ? 5 : 40); i++) {
		int status;
		pid_t pid = fork();

		if (pid == 0) {
			vrange_cache *cc = NULL;
			struct vrange_stats st;
			const void *v;
			size_t len;

			alarm(20);
			vrange_purge(SIZE_MAX);
			vrange_get_stats(&st);
			if (vrange_cache_create(NULL, &cc) || vrange_cache_put(cc, "a", 1, "b", 1) ||
			    vrange_cache_get(cc, "a", 1, &v, &len) || vrange_cache_release(cc, v) ||
			    vrange_purge(SIZE_MAX) < 0 || vrange_cache_destroy(cc))
				_exit(1);
			_exit(0);
		}
		ck_assert_int_gt(pid, 0);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

/* --- many threads -------------------------------------------------------- */

struct tcase_arg {
	vrange_cache *c;
	int id;
	int bad;
};

/* Each thread its own keys, plus one key every thread shares. */
static void *own_keys(void *p)
{
	struct tcase_arg *a = p;
	char key[32], want[64];

	for (int i = 0; i < 3000; i++) {
		const void *v;
		size_t len;

		snprintf(key, sizeof(key), "t%d-%d", a->id, i % 50);
		memset(want, 0, sizeof(want));
		snprintf(want, sizeof(want), "value of %s", key);
		if (vrange_cache_put(a->c, key, strlen(key), want, sizeof(want)))
			a->bad++;
		if (vrange_cache_get(a->c, key, strlen(key), &v, &len) ||
		    len != sizeof(want) || memcmp(v, want, len) ||
		    vrange_cache_release(a->c, v))
			a->bad++;
		if (vrange_cache_get(a->c, "shared", 6, &v, &len) ||
		    memcmp(v, "the shared value", 16) ||
		    vrange_cache_release(a->c, v))
			a->bad++;
	}
	return NULL;
}

START_TEST(threads_share_a_cache)
{
	vrange_cache *c = mk(0, 0);
	struct tcase_arg a[4];
	pthread_t t[4];

	put_s(c, "shared", "the shared value", 16);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct tcase_arg){ c, i, 0 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, own_keys, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(a[i].bad, 0);
	}
	ck_assert_uint_eq(cstats(c).entries, 4 * 50 + 1);
	ck_assert_uint_eq(cstats(c).hits, 4 * 3000 * 2);
	ck_assert_int_eq(vrange_cache_destroy(c), 0);
}
END_TEST

#define NKEYS 4096
#define MAGIC 0x5643414348ull

struct vhdr {
	uint64_t magic, key, version, len, sum;
};

struct stress {
	vrange_cache *c;
	_Atomic bool stop;
	_Atomic uint64_t version[NKEYS];
	_Atomic uint64_t puts, hits, misses, removes, purges, damaged, fills;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	/* xorshift64*: the raw state's low bits follow each other too closely
	 * for two draws in a row (key, operation) to be independent. */
	return (*s * 0x2545f4914f6cdd1dull) >> 11;
}

static uint64_t body_sum(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* A value for (key, version): a header, then bytes from a seeded stream. */
static size_t make_value(unsigned char *buf, uint64_t key, uint64_t ver)
{
	uint64_t s = key * 0x9e3779b97f4a7c15ull + ver + 1, n;
	struct vhdr h;

	n = sizeof(h) + (rnd(&s) % 4 == 0 ? rnd(&s) % (24 * 1024) : rnd(&s) % 600);
	for (size_t i = sizeof(h); i < n; i++)
		buf[i] = (unsigned char)rnd(&s);
	h = (struct vhdr){ MAGIC, key, ver, n, body_sum(buf + sizeof(h), n - sizeof(h)) };
	memcpy(buf, &h, sizeof(h));
	return n;
}

static bool value_ok(const unsigned char *v, size_t n, uint64_t key)
{
	struct vhdr h;

	if (n < sizeof(h))
		return false;
	memcpy(&h, v, sizeof(h));
	return h.magic == MAGIC && h.key == key && h.len == n &&
	       h.sum == body_sum(v + sizeof(h), n - sizeof(h));
}

static void *stress_worker(void *arg)
{
	struct stress *st = arg;
	unsigned char *buf = malloc(sizeof(struct vhdr) + 24 * 1024);
	uint64_t s = (uint64_t)(uintptr_t)&s | 1;

	while (!atomic_load(&st->stop)) {
		uint64_t k = rnd(&s) % NKEYS, op = rnd(&s) % 16;
		const void *v;
		size_t n;

		if (op < 4) {
			uint64_t ver = atomic_fetch_add(&st->version[k], 1) + 1;

			n = make_value(buf, k, ver);
			if (op == 0) { /* fill in place */
				void *b;

				if (vrange_cache_reserve(st->c, &k, sizeof(k), n, &b) == 0) {
					memcpy(b, buf, n);
					if (vrange_cache_commit(st->c, b) != 0)
						atomic_fetch_add(&st->damaged, 1);
					atomic_fetch_add(&st->fills, 1);
				}
			} else if (vrange_cache_put(st->c, &k, sizeof(k), buf, n) == 0) {
				atomic_fetch_add(&st->puts, 1);
			}
		} else if (op < 5) {
			if (vrange_cache_remove(st->c, &k, sizeof(k)) == 0)
				atomic_fetch_add(&st->removes, 1);
		} else if (vrange_cache_get(st->c, &k, sizeof(k), &v, &n) == 0) {
			atomic_fetch_add(&st->hits, 1);
			if (!value_ok(v, n, k))
				atomic_fetch_add(&st->damaged, 1);
			if (rnd(&s) % 8 == 0) {
				usleep(50); /* hold across purges */
				if (!value_ok(v, n, k))
					atomic_fetch_add(&st->damaged, 1);
			}
			if (vrange_cache_release(st->c, v) != 0)
				atomic_fetch_add(&st->damaged, 1);
		} else {
			atomic_fetch_add(&st->misses, 1);
		}
	}
	free(buf);
	return NULL;
}

static void *stress_purger(void *arg)
{
	struct stress *st = arg;
	uint64_t s = 88172645463325252ull;

	while (!atomic_load(&st->stop)) {
		vrange_purge(rnd(&s) % 8 == 0 ? SIZE_MAX : (rnd(&s) % 512) * 1024);
		atomic_fetch_add(&st->purges, 1);
		usleep((useconds_t)(rnd(&s) % 2000));
	}
	return NULL;
}

/* One run: 4 workers and a purger on a cache made with flags for secs. */
static void stress_run(unsigned flags, double secs)
{
	static struct stress st;
	struct vrange_cache_opts o = { sizeof(o), "stress", 3u << 20, 0, flags, 0 };
	struct vrange_cache_stats cs;
	pthread_t w[4], p;

	memset(&st, 0, sizeof(st));
	/* A cap the working set exceeds: evictions too. */
	ck_assert_int_eq(vrange_cache_create(&o, &st.c), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&w[i], NULL, stress_worker, &st), 0);
	ck_assert_int_eq(pthread_create(&p, NULL, stress_purger, &st), 0);
	usleep((useconds_t)(secs * 1e6));
	atomic_store(&st.stop, true);
	for (int i = 0; i < 4; i++)
		pthread_join(w[i], NULL);
	pthread_join(p, NULL);
	cs = cstats(st.c);
	fprintf(stderr, "cache stress%s %.0f s: puts %lu fills %lu removes %lu hits %lu "
		"misses %lu purges %lu purged_entries %lu evictions %lu damaged %lu\n",
		flags ? " (eager)" : "", secs, (unsigned long)st.puts,
		(unsigned long)st.fills, (unsigned long)st.removes,
		(unsigned long)st.hits, (unsigned long)st.misses,
		(unsigned long)st.purges, (unsigned long)cs.purged_entries,
		(unsigned long)cs.evictions, (unsigned long)st.damaged);
	ck_assert_uint_eq(st.damaged, 0);
	ck_assert_uint_gt(st.hits, 0);
	ck_assert_uint_gt(cs.purged_entries, 0);
	if (!flags) /* the short eager run may not fill the cap */
		ck_assert_uint_gt(cs.evictions, 0);
	ck_assert_uint_eq(cs.hits, st.hits);
	ck_assert_int_eq(vrange_cache_destroy(st.c), 0);
}

START_TEST(stress_no_damaged_hit)
{
	double secs = getenv("VRANGE_SOAK") ? 120.0 : test_quick() ? 3.0 : 12.0;

	/* Deferred volatility (the default), then marks at every release. */
	stress_run(0, secs * 2 / 3);
	stress_run(VRANGE_CACHE_EAGER, secs / 3);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("basics");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, create_defaults_and_opts);
	tcase_add_test(tc, create_bad_input);
	tcase_add_test(tc, destroy_null_and_busy);
	tcase_add_test(tc, values_of_any_size_copied_in);
	tcase_add_test(tc, keys_are_bytes);
	tcase_add_test(tc, put_replaces);
	tcase_add_test(tc, put_starts_released);
	tcase_add_test(tc, put_same_size_over_released);
	tcase_add_test(tc, put_same_size_over_purged);
	tcase_add_test(tc, remove_races_put);
	tcase_add_test(tc, bad_input);
	tcase_add_test(tc, miss_leaves_out_params);
	tcase_add_test(tc, name_in_proc);
	suite_add_tcase(s, tc);

	tc = tcase_create("holding");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, held_value_survives_purge_and_stays_put);
	tcase_add_test(tc, several_holders);
	tcase_add_test(tc, released_value_goes_in_purge);
	tcase_add_test(tc, purged_value_misses);
	tcase_add_test(tc, partly_purged_value_misses);
	tcase_add_test(tc, small_values_share_pages);
	tcase_add_test(tc, held_small_value_protects_its_page);
	tcase_add_test(tc, put_of_held_key);
	tcase_add_test(tc, release_bad_pointers);
	tcase_add_test(tc, large_value_interior_pointer);
	tcase_add_test(tc, remove_rules);
	suite_add_tcase(s, tc);

	tc = tcase_create("cap-and-stats");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, cap_evicts_lru_released);
	tcase_add_test(tc, cap_held_never_evicted);
	tcase_add_test(tc, cap_too_big);
	tcase_add_test(tc, stats_exact);
	tcase_add_test(tc, stats_longer_layout);
	tcase_add_test(tc, stats_first_layout);
	tcase_add_test(tc, resident_falls_with_purge);
	suite_add_tcase(s, tc);

	tc = tcase_create("region-memory");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, memory_is_region_memory);
	tcase_add_test(tc, one_purge_order);
	tcase_add_test(tc, release_order_lazy);
	tcase_add_test(tc, release_order_eager);
	tcase_add_test(tc, release_order_small_values);
	tcase_add_test(tc, budget_counts_cache);
	suite_add_tcase(s, tc);

	tc = tcase_create("fill-in-place");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, reserve_commit);
	tcase_add_test(tc, reserve_abort);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, threads_share_a_cache);
	tcase_add_test(tc, fork_while_purging);
	suite_add_tcase(s, tc);

	tc = tcase_create("stress");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, stress_no_damaged_hit);
	suite_add_tcase(s, tc);
	return s;
}
