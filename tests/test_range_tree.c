/* SPDX-License-Identifier: MIT */
/*
 * Tests of the interval tree (src/core/range_tree.c): every boundary shape of
 * every operation against a string model, -ENOMEM atomicity, purge order,
 * visiting, a long differential run against a per-page model, and hostile
 * arena content.
 *
 * Hot loops use REQUIRE rather than ck_assert: in fork mode every passing
 * ck_assert records its location through a pipe, far too slow for millions.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "range_tree.h"
#include "test_main.h"

#define REQUIRE(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond))                                                   \
			ck_abort_msg(__VA_ARGS__);                             \
	} while (0)

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* ------------------------------------------------------------------------ */
/* Arenas                                                                    */

/* Bytes per node slot, as rt_arena_bytes() reveals it. */
static size_t slot_bytes(void)
{
	return rt_arena_bytes(1) - rt_arena_bytes(0);
}

/* Arena bytes for exactly cap usable nodes (slot 0 is the header). */
static size_t bytes_for_cap(uint32_t cap)
{
	return ((size_t)cap + 1) * slot_bytes();
}

static void *arena_new(size_t bytes)
{
	void *p = calloc(1, bytes);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void fresh_tree(struct rt_tree *t, void *arena, size_t bytes)
{
	memset(arena, 0, bytes);
	REQUIRE(rt_format(t, arena, bytes) == 0, "rt_format failed");
}

/* ------------------------------------------------------------------------ */
/* String model: one char per page                                          */
/* '.' no range, 'P' purged, 'a'..'z' volatile with that letter's age.       */

#define P_PRIO 99  /* age used while building purged runs */
#define P_SEQ 999

static int32_t letter_prio(char c)
{
	return (c - 'a') % 3 - 1;
}

static uint64_t letter_seq(char c)
{
	return (uint64_t)(c - 'a') + 1;
}

enum kind { K_VOL, K_CLEAR, K_PURGE, K_UNPURGE, K_NKINDS };

struct sop {
	enum kind kind;
	uint64_t s, e;
	char age; /* K_VOL, K_UNPURGE */
};

static void build(struct rt_tree *t, const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && s[j] == s[i];)
			j++;
		if (s[i] == 'P') {
			REQUIRE(rt_mark_volatile(t, i, j, P_PRIO, P_SEQ,
						 NULL) == 0 &&
					rt_mark_purged(t, i, j, NULL) == 0,
				"build %s failed at %zu", s, i);
		} else if (s[i] != '.') {
			REQUIRE(rt_mark_volatile(t, i, j, letter_prio(s[i]),
						 letter_seq(s[i]), NULL) == 0,
				"build %s failed at %zu", s, i);
		}
	}
}

struct render {
	char *buf;
	uint64_t len;
};

static int render_cb(const struct rt_range *r, void *arg)
{
	struct render *rd = arg;
	char c = '?';

	if (r->state == RT_PURGED) {
		c = 'P';
	} else if (r->state == RT_VOLATILE && r->seq >= 1 && r->seq <= 26) {
		char l = (char)('a' + r->seq - 1);

		if (letter_prio(l) == r->prio)
			c = l;
	}
	for (uint64_t p = r->start; p < r->end && p < rd->len; p++)
		rd->buf[p] = c;
	return 0;
}

static void render(const struct rt_tree *t, char *buf, size_t len)
{
	struct render rd = { buf, len };

	memset(buf, '.', len);
	buf[len] = 0;
	REQUIRE(rt_visit(t, 0, len, render_cb, &rd) == 0, "rt_visit failed");
}

/* Apply op to the string; res gets what the API call should report. */
static void model_str(char *m, const struct sop *op, uint64_t res[2])
{
	res[0] = res[1] = 0;
	for (uint64_t i = op->s; i < op->e; i++) {
		char c = m[i];

		switch (op->kind) {
		case K_VOL:
			if (c == '.')
				res[0]++;
			if (c != 'P')
				m[i] = op->age;
			break;
		case K_CLEAR:
			if (c == 'P')
				res[1]++;
			else if (c != '.')
				res[0]++;
			m[i] = '.';
			break;
		case K_PURGE:
			if (c != 'P' && c != '.') {
				res[0]++;
				m[i] = 'P';
			}
			break;
		case K_UNPURGE:
			if (c == 'P') {
				res[0]++;
				m[i] = op->age;
			}
			break;
		default:
			break;
		}
	}
}

static int do_op(struct rt_tree *t, const struct sop *op, uint64_t res[2])
{
	res[0] = res[1] = 77; /* must be overwritten */
	switch (op->kind) {
	case K_VOL:
		res[1] = 0;
		return rt_mark_volatile(t, op->s, op->e, letter_prio(op->age),
					letter_seq(op->age), &res[0]);
	case K_CLEAR:
		return rt_clear(t, op->s, op->e, &res[0], &res[1]);
	case K_PURGE:
		res[1] = 0;
		return rt_mark_purged(t, op->s, op->e, &res[0]);
	case K_UNPURGE:
		res[1] = 0;
		return rt_unpurge(t, op->s, op->e, letter_prio(op->age),
				  letter_seq(op->age), &res[0]);
	default:
		return -EINVAL;
	}
}

static bool is_letter(char c)
{
	return c >= 'a' && c <= 'z';
}

static uint32_t str_runs(const char *m)
{
	uint32_t runs = 0;

	for (size_t i = 0; m[i]; i++)
		if (m[i] != '.' && (i == 0 || m[i - 1] != m[i]))
			runs++;
	return runs;
}

/* Everything observable about t must match the string m. */
static void expect_tree(struct rt_tree *t, const char *m,
			const char *what)
{
	size_t len = strlen(m);
	char buf[64];
	uint64_t vol = 0, pur = 0, cv, cp;
	struct rt_range r;
	char best = 0;
	size_t bi = 0;

	REQUIRE(len < sizeof(buf), "layout too long");
	render(t, buf, len);
	REQUIRE(!strcmp(buf, m), "%s: tree %s, model %s", what, buf, m);
	for (size_t i = 0; i < len; i++) {
		if (m[i] == 'P') {
			pur++;
		} else if (is_letter(m[i])) {
			vol++;
			if (!best || letter_prio(m[i]) < letter_prio(best) ||
			    (letter_prio(m[i]) == letter_prio(best) &&
			     letter_seq(m[i]) < letter_seq(best))) {
				best = m[i];
				bi = i;
			}
		}
	}
	REQUIRE(rt_volatile_pages(t) == vol && rt_purged_pages(t) == pur,
		"%s: counters %" PRIu64 "/%" PRIu64 ", model %" PRIu64
		"/%" PRIu64, what, rt_volatile_pages(t), rt_purged_pages(t),
		vol, pur);
	REQUIRE(rt_count(t, 0, len + 100, &cv, &cp) == 0 && cv == vol &&
			cp == pur,
		"%s: rt_count disagrees", what);
	REQUIRE(rt_nranges(t) == str_runs(m), "%s: %u ranges, model %u", what,
		rt_nranges(t), str_runs(m));
	REQUIRE(rt_check(t) == 0, "%s: rt_check failed", what);
	if (!best) {
		REQUIRE(rt_oldest(t, &r) == 0, "%s: oldest in empty", what);
		return;
	}
	REQUIRE(rt_oldest(t, &r) == 1, "%s: no oldest", what);
	size_t be = bi;
	while (m[be] == best)
		be++;
	REQUIRE(r.state == RT_VOLATILE && r.start == bi && r.end == be &&
			r.prio == letter_prio(best) &&
			r.seq == letter_seq(best),
		"%s: oldest [%" PRIu64 ",%" PRIu64 ") want [%zu,%zu)", what,
		r.start, r.end, bi, be);
}

static const char *const kind_name[] = { "vol", "clear", "purge", "unpurge" };

/* Run op on layout, in a roomy arena and in arenas with 0..3 spare nodes. */
static void check_case(const char *layout, const struct sop *op,
		       const char *want)
{
	size_t roomy = rt_arena_bytes(64);
	uint32_t runs = str_runs(layout);
	char model[64], what[160];
	uint64_t mres[2], res[2];
	struct rt_tree t;
	void *arena = arena_new(roomy);
	int rc;

	snprintf(model, sizeof(model), "%s", layout);
	model_str(model, op, mres);
	if (want)
		REQUIRE(!strcmp(model, want), "model of %s %s [%" PRIu64
			",%" PRIu64 ") on %s gives %s, expected %s",
			kind_name[op->kind], layout, op->s, op->e, layout,
			model, want);
	snprintf(what, sizeof(what), "%s %c [%" PRIu64 ",%" PRIu64 ") on %s",
		 kind_name[op->kind], op->age ? op->age : '-', op->s, op->e,
		 layout);

	fresh_tree(&t, arena, roomy);
	build(&t, layout);
	expect_tree(&t, layout, what);
	rc = do_op(&t, op, res);
	REQUIRE(rc == 0, "%s: rc %d", what, rc);
	REQUIRE(res[0] == mres[0] && res[1] == mres[1],
		"%s: reported %" PRIu64 "/%" PRIu64 ", model %" PRIu64
		"/%" PRIu64, what, res[0], res[1], mres[0], mres[1]);
	expect_tree(&t, model, what);

	for (uint32_t spare = runs ? 0 : 1; spare <= 3; spare++) {
		size_t bytes = bytes_for_cap(runs + spare);

		fresh_tree(&t, arena, bytes);
		build(&t, layout);
		REQUIRE(rt_free_nodes(&t) == spare, "%s: %u free, want %u",
			what, rt_free_nodes(&t), spare);
		rc = do_op(&t, op, res);
		if (rc == -ENOMEM) {
			/* Only gap filling may need more than two nodes. */
			REQUIRE(op->kind == K_VOL || spare < 2,
				"%s: -ENOMEM with %u spare", what, spare);
			REQUIRE(op->kind != K_CLEAR || spare < 1,
				"%s: clear -ENOMEM with %u spare", what, spare);
			expect_tree(&t, layout, what); /* unchanged */
		} else {
			REQUIRE(rc == 0, "%s: rc %d (spare %u)", what, rc,
				spare);
			expect_tree(&t, model, what);
		}
	}
	free(arena);
}

/* ------------------------------------------------------------------------ */
/* Boundary shapes                                                           */

struct shape {
	const char *layout;
	struct sop op;
	const char *want;
};

/* One existing range [4,8) and a new one at each place relative to it. */
static const struct shape shapes[] = {
	/* mark volatile, different age */
	{ "....aaaa....", { K_VOL, 0, 2, 'b' }, "bb..aaaa...." },  /* before */
	{ "....aaaa....", { K_VOL, 10, 12, 'b' }, "....aaaa..bb" }, /* after */
	{ "....aaaa....", { K_VOL, 5, 7, 'b' }, "....abba...." },  /* inside */
	{ "....aaaa....", { K_VOL, 2, 10, 'b' }, "..bbbbbbbb.." }, /* covers */
	{ "....aaaa....", { K_VOL, 2, 4, 'b' }, "..bbaaaa...." },  /* touch L */
	{ "....aaaa....", { K_VOL, 8, 10, 'b' }, "....aaaabb.." }, /* touch R */
	{ "....aaaa....", { K_VOL, 4, 8, 'b' }, "....bbbb...." },  /* equal */
	{ "....aaaa....", { K_VOL, 2, 6, 'b' }, "..bbbbaa...." },  /* overlap L */
	{ "....aaaa....", { K_VOL, 6, 10, 'b' }, "....aabbbb.." }, /* overlap R */
	/* mark volatile, same age: merges */
	{ "....aaaa....", { K_VOL, 2, 4, 'a' }, "..aaaaaa...." },
	{ "....aaaa....", { K_VOL, 8, 10, 'a' }, "....aaaaaa.." },
	{ "....aaaa....", { K_VOL, 5, 7, 'a' }, "....aaaa...." },
	{ "....aaaa....", { K_VOL, 0, 12, 'a' }, "aaaaaaaaaaaa" },
	{ "..aa..aa....", { K_VOL, 4, 6, 'a' }, "..aaaaaa...." },
	/* purged pages stay purged */
	{ "....PPPP....", { K_VOL, 2, 10, 'b' }, "..bbPPPPbb.." },
	{ "....PPPP....", { K_VOL, 5, 7, 'b' }, "....PPPP...." },
	/* clear */
	{ "....aaaa....", { K_CLEAR, 0, 2, 0 }, "....aaaa...." },
	{ "....aaaa....", { K_CLEAR, 5, 7, 0 }, "....a..a...." },
	{ "....aaaa....", { K_CLEAR, 2, 10, 0 }, "............" },
	{ "....aaaa....", { K_CLEAR, 2, 5, 0 }, ".....aaa...." },
	{ "....aaaa....", { K_CLEAR, 7, 10, 0 }, "....aaa....." },
	{ "....aaaa....", { K_CLEAR, 4, 8, 0 }, "............" },
	{ "..aaPPbb....", { K_CLEAR, 3, 7, 0 }, "..a....b...." },
	/* mark purged: purged neighbours always merge */
	{ "....aaaa....", { K_PURGE, 5, 7, 0 }, "....aPPa...." },
	{ "....aaaa....", { K_PURGE, 2, 10, 0 }, "....PPPP...." },
	{ "....aaaa....", { K_PURGE, 4, 6, 0 }, "....PPaa...." },
	{ "..PPaabb....", { K_PURGE, 4, 7, 0 }, "..PPPPPb...." },
	{ "..aabbcc....", { K_PURGE, 2, 8, 0 }, "..PPPPPP...." },
	/* unpurge */
	{ "....PPPP....", { K_UNPURGE, 5, 7, 'b' }, "....PbbP...." },
	{ "....PPPP....", { K_UNPURGE, 0, 12, 'b' }, "....bbbb...." },
	{ "..aaPPPP....", { K_UNPURGE, 4, 6, 'a' }, "..aaaaPP...." },
	{ "..aaPPaa....", { K_UNPURGE, 4, 6, 'a' }, "..aaaaaa...." },
	{ "..aaPPaa....", { K_UNPURGE, 4, 6, 'b' }, "..aabbaa...." },
};

START_TEST(test_shapes)
{
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		check_case(shapes[i].layout, &shapes[i].op, shapes[i].want);
}
END_TEST

/* Every op at every [s, e) over a set of layouts. */
static const char *const layouts[] = {
	"............", "....aaaa....", "....PPPP....", "..aaaabbbb..",
	"..aaaaPPPP..", "..PPPPaaaa..", "aaa.bbb.PPP.", "..aaaa.aaaa.",
	"..PP..PP..PP", "abababababab", ".aP.Pa.bPb..", "aaaaaaaaaaaa",
	"PPPPPPPPPPPP", "acPcaPbPa.ca",
};

START_TEST(test_shapes_exhaustive)
{
	static const struct sop variants[] = {
		{ K_VOL, 0, 0, 'a' },	  { K_VOL, 0, 0, 'b' },
		{ K_VOL, 0, 0, 'c' },	  { K_CLEAR, 0, 0, 0 },
		{ K_PURGE, 0, 0, 0 },	  { K_UNPURGE, 0, 0, 'a' },
		{ K_UNPURGE, 0, 0, 'c' },
	};
	const size_t nvariants = sizeof(variants) / sizeof(variants[0]);
	const char *layout = layouts[_i];
	char padded[32];

	/* Pad so that ops may reach past the layout. */
	snprintf(padded, sizeof(padded), "%s...", layout);
	for (uint64_t s = 0; s <= strlen(padded); s++)
		for (uint64_t e = s; e <= strlen(padded); e++)
			for (size_t v = 0; v < nvariants; v++) {
				struct sop op = variants[v];

				op.s = s;
				op.e = e;
				check_case(padded, &op, NULL);
			}
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Format, attach, grow                                                      */

START_TEST(test_format_attach)
{
	size_t bytes = rt_arena_bytes(10);
	char *arena = arena_new(bytes + 64);
	struct rt_tree t, u;

	ck_assert_uint_ge(bytes, 10 * slot_bytes());
	ck_assert_uint_le(slot_bytes(), 64);
	ck_assert_int_eq(rt_format(&t, arena, 1), -EINVAL);
	ck_assert_int_eq(rt_format(&t, arena + 1, bytes), -EINVAL);
	ck_assert_int_eq(rt_format(&t, arena, bytes), 0);
	ck_assert_uint_ge(rt_free_nodes(&t), 10);
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_int_eq(rt_mark_volatile(&t, 5, 9, 0, 1, NULL), 0);

	ck_assert_int_eq(rt_attach(&u, arena, bytes), 0);
	ck_assert_uint_eq(rt_volatile_pages(&u), 4);
	ck_assert_int_eq(rt_check(&u), 0);
	/* Size that disagrees with the header. */
	ck_assert_int_eq(rt_attach(&u, arena, bytes + slot_bytes()), -EIO);
	ck_assert_int_eq(rt_attach(&u, arena, bytes - slot_bytes()), -EIO);
	ck_assert_int_eq(rt_attach(&u, arena, 3), -EIO);
	/* Not formatted. */
	arena[0] ^= 1;
	ck_assert_int_eq(rt_attach(&u, arena, bytes), -EIO);
	ck_assert_int_eq(rt_mark_volatile(&t, 1, 2, 0, 1, NULL), -EIO);
	ck_assert_int_eq(rt_check(&t), -EIO);
	arena[0] ^= 1;
	ck_assert_int_eq(rt_attach(&u, arena, bytes), 0);
	free(arena);
}
END_TEST

START_TEST(test_grow)
{
	size_t small = bytes_for_cap(4), big = rt_arena_bytes(100);
	char *a = arena_new(small), *b = arena_new(big);
	struct rt_tree t, u;
	uint64_t p;
	int rc = 0;

	fresh_tree(&t, a, small);
	/* Separate ranges until full. */
	for (p = 0; p < 100 && !rc; p++)
		rc = rt_mark_volatile(&t, 2 * p, 2 * p + 1, 0, p, NULL);
	ck_assert_int_eq(rc, -ENOMEM);
	ck_assert_uint_eq(rt_nranges(&t), 4);
	ck_assert_uint_eq(rt_free_nodes(&t), 0);

	ck_assert_int_eq(rt_grow(&t, a, small - slot_bytes()), -EINVAL);
	memcpy(b, a, small);
	ck_assert_int_eq(rt_grow(&t, b, big), 0);
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_uint_ge(rt_free_nodes(&t), 100 - 4);
	for (p = 4; p < 100; p++)
		ck_assert_int_eq(rt_mark_volatile(&t, 2 * p, 2 * p + 1, 0, p,
						  NULL), 0);
	ck_assert_uint_eq(rt_nranges(&t), 100);
	ck_assert_int_eq(rt_check(&t), 0);
	/* Another process attaching with the new size sees it all. */
	ck_assert_int_eq(rt_attach(&u, b, big), 0);
	ck_assert_int_eq(rt_check(&u), 0);
	ck_assert_uint_eq(rt_volatile_pages(&u), 100);
	ck_assert_int_eq(rt_attach(&u, b, small), -EIO);
	free(a);
	free(b);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Purge order, visiting, counting                                           */

START_TEST(test_oldest_order)
{
	size_t bytes = rt_arena_bytes(64);
	void *arena = arena_new(bytes);
	struct rt_tree t;
	struct rt_range r;
	static const struct {
		uint64_t s, e, seq;
		int32_t prio;
	} marks[] = {
		{ 10, 20, 1, 1 }, { 30, 40, 5, 0 },   { 50, 60, 2, 0 },
		{ 70, 80, 2, 0 }, { 90, 95, 9, -3 },  { 100, 110, 3, 0 },
		{ 0, 5, 2, 0 },	  { 120, 130, 0, 1 },
	};
	/* prio, then seq, then start */
	static const uint64_t want[] = { 90, 0, 50, 70, 100, 30, 120, 10 };

	fresh_tree(&t, arena, bytes);
	ck_assert_int_eq(rt_oldest(&t, &r), 0);
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		ck_assert_int_eq(rt_mark_volatile(&t, marks[i].s, marks[i].e,
						  marks[i].prio, marks[i].seq,
						  NULL), 0);
	/* Purging part of the oldest leaves its remainder oldest. */
	ck_assert_int_eq(rt_mark_purged(&t, 90, 92, NULL), 0);
	ck_assert_int_eq(rt_oldest(&t, &r), 1);
	ck_assert_uint_eq(r.start, 92);
	ck_assert_uint_eq(r.end, 95);
	ck_assert_int_eq(rt_unpurge(&t, 90, 92, -3, 9, NULL), 0);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		ck_assert_int_eq(rt_oldest(&t, &r), 1);
		ck_assert_uint_eq(r.start, want[i]);
		ck_assert_int_eq(r.state, RT_VOLATILE);
		ck_assert_int_eq(rt_mark_purged(&t, r.start, r.end, NULL), 0);
		ck_assert_int_eq(rt_check(&t), 0);
	}
	ck_assert_int_eq(rt_oldest(&t, &r), 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), 0);
	ck_assert_uint_eq(rt_purged_pages(&t), 70);
	free(arena);
}
END_TEST

/* A purge pass passes over ranges marked after it began, priority by
 * priority, to the older ranges of higher priorities behind them. */
START_TEST(test_oldest_before)
{
	size_t bytes = rt_arena_bytes(64);
	void *arena = arena_new(bytes);
	struct rt_tree t;
	struct rt_range r;

	fresh_tree(&t, arena, bytes);
	ck_assert_int_eq(rt_oldest_before(&t, UINT64_MAX, &r), 0);
	ck_assert_int_eq(rt_mark_volatile(&t, 0, 4, -5, 90, NULL), 0);  /* later */
	ck_assert_int_eq(rt_mark_volatile(&t, 10, 14, -5, 95, NULL), 0); /* later */
	ck_assert_int_eq(rt_mark_volatile(&t, 20, 24, 0, 91, NULL), 0);  /* later */
	ck_assert_int_eq(rt_mark_volatile(&t, 30, 34, 0, 99, NULL), 0);  /* later */
	ck_assert_int_eq(rt_mark_volatile(&t, 40, 44, 3, 60, NULL), 0);
	ck_assert_int_eq(rt_mark_volatile(&t, 50, 54, 3, 10, NULL), 0);
	ck_assert_int_eq(rt_mark_volatile(&t, 60, 64, INT32_MAX, 1, NULL), 0);
	ck_assert_int_eq(rt_oldest_before(&t, UINT64_MAX, &r), 1);
	ck_assert_uint_eq(r.start, 0);
	ck_assert_int_eq(rt_oldest_before(&t, 90, &r), 1);
	ck_assert_uint_eq(r.start, 0);
	ck_assert_int_eq(rt_oldest_before(&t, 89, &r), 1);
	ck_assert_uint_eq(r.start, 50);
	ck_assert_int_eq(r.prio, 3);
	ck_assert_int_eq(rt_oldest_before(&t, 9, &r), 1);
	ck_assert_uint_eq(r.start, 60);
	ck_assert_int_eq(rt_oldest_before(&t, 0, &r), 0);
	/* Refreshed (marked again) after the pass began: passed over. */
	ck_assert_int_eq(rt_mark_volatile(&t, 50, 54, 3, 100, NULL), 0);
	ck_assert_int_eq(rt_oldest_before(&t, 89, &r), 1);
	ck_assert_uint_eq(r.start, 40);
	ck_assert_int_eq(rt_mark_purged(&t, 40, 44, NULL), 0);
	ck_assert_int_eq(rt_oldest_before(&t, 89, &r), 1);
	ck_assert_uint_eq(r.start, 60);
	free(arena);
}
END_TEST

struct visit_log {
	struct rt_range r[8];
	int n, stop_at;
};

static int log_cb(const struct rt_range *r, void *arg)
{
	struct visit_log *l = arg;

	if (l->n < 8)
		l->r[l->n] = *r;
	l->n++;
	return l->n == l->stop_at ? 42 : 0;
}

START_TEST(test_visit)
{
	size_t bytes = rt_arena_bytes(64);
	void *arena = arena_new(bytes);
	struct visit_log l = { .stop_at = -1 };
	struct rt_tree t;

	fresh_tree(&t, arena, bytes);
	build(&t, "..aaPPbb..");
	ck_assert_int_eq(rt_visit(&t, 3, 7, log_cb, &l), 0);
	ck_assert_int_eq(l.n, 3);
	ck_assert_uint_eq(l.r[0].start, 3);
	ck_assert_uint_eq(l.r[0].end, 4);
	ck_assert_int_eq(l.r[0].state, RT_VOLATILE);
	ck_assert_uint_eq(l.r[0].seq, letter_seq('a'));
	ck_assert_uint_eq(l.r[1].start, 4);
	ck_assert_uint_eq(l.r[1].end, 6);
	ck_assert_int_eq(l.r[1].state, RT_PURGED);
	ck_assert_uint_eq(l.r[2].start, 6);
	ck_assert_uint_eq(l.r[2].end, 7);
	ck_assert_int_eq(l.r[2].prio, letter_prio('b'));

	/* Ranges that only touch the window are not visited. */
	l.n = 0;
	ck_assert_int_eq(rt_visit(&t, 8, 20, log_cb, &l), 0);
	ck_assert_int_eq(rt_visit(&t, 0, 2, log_cb, &l), 0);
	ck_assert_int_eq(rt_visit(&t, 5, 5, log_cb, &l), 0);
	ck_assert_int_eq(l.n, 0);

	/* fn's nonzero value stops the walk and comes back. */
	l.stop_at = 2;
	ck_assert_int_eq(rt_visit(&t, 0, 100, log_cb, &l), 42);
	ck_assert_int_eq(l.n, 2);
	free(arena);
}
END_TEST

START_TEST(test_count)
{
	size_t bytes = rt_arena_bytes(64);
	void *arena = arena_new(bytes);
	struct rt_tree t;
	uint64_t v, p;

	fresh_tree(&t, arena, bytes);
	build(&t, "..aaPPbb..PPPc");
	ck_assert_int_eq(rt_count(&t, 0, 100, &v, &p), 0);
	ck_assert_uint_eq(v, 5);
	ck_assert_uint_eq(p, 5);
	ck_assert_int_eq(rt_count(&t, 3, 11, &v, &p), 0);
	ck_assert_uint_eq(v, 3);
	ck_assert_uint_eq(p, 3);
	ck_assert_int_eq(rt_count(&t, 8, 10, &v, &p), 0);
	ck_assert_uint_eq(v + p, 0);
	ck_assert_int_eq(rt_count(&t, 9, 3, &v, &p), 0);
	ck_assert_uint_eq(v + p, 0);
	ck_assert_int_eq(rt_count(&t, 0, 100, NULL, NULL), 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), 5);
	ck_assert_uint_eq(rt_purged_pages(&t), 5);
	ck_assert_uint_eq(rt_nranges(&t), 5);
	free(arena);
}
END_TEST

START_TEST(test_extreme_addresses)
{
	size_t bytes = rt_arena_bytes(16);
	void *arena = arena_new(bytes);
	const uint64_t top = UINT64_MAX;
	struct rt_tree t;
	struct rt_range r;
	uint64_t n, v, p;

	fresh_tree(&t, arena, bytes);
	ck_assert_int_eq(rt_mark_volatile(&t, 0, top, 0, 1, &n), 0);
	ck_assert_uint_eq(n, top);
	ck_assert_uint_eq(rt_volatile_pages(&t), top);
	ck_assert_int_eq(rt_mark_purged(&t, top - 10, top, &n), 0);
	ck_assert_uint_eq(n, 10);
	ck_assert_int_eq(rt_clear(&t, 1, top - 1, &v, &p), 0);
	ck_assert_uint_eq(v, top - 11);
	ck_assert_uint_eq(p, 9);
	ck_assert_int_eq(rt_count(&t, 0, top, &v, &p), 0);
	ck_assert_uint_eq(v, 1);
	ck_assert_uint_eq(p, 1);
	ck_assert_int_eq(rt_unpurge(&t, top - 1, top, 5, 7, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(rt_oldest(&t, &r), 1);
	ck_assert_uint_eq(r.start, 0);
	ck_assert_int_eq(rt_clear(&t, 0, 1, NULL, NULL), 0);
	ck_assert_int_eq(rt_oldest(&t, &r), 1);
	ck_assert_uint_eq(r.start, top - 1);
	ck_assert_uint_eq(r.end, top);
	ck_assert_int_eq(rt_check(&t), 0);
	free(arena);
}
END_TEST

/* -ENOMEM in a tiny arena, op after op: the tree never changes on failure. */
START_TEST(test_enomem_tiny)
{
	size_t bytes = bytes_for_cap(3);
	void *arena = arena_new(bytes);
	struct rt_tree t;
	char before[16], after[16];
	uint64_t res[2];
	int nomem = 0;

	fresh_tree(&t, arena, bytes);
	build(&t, "aa.bb.cc..");
	ck_assert_uint_eq(rt_free_nodes(&t), 0);
	for (uint64_t s = 0; s < 11; s++) {
		for (uint64_t e = s; e < 11; e++) {
			for (int k = 0; k < K_NKINDS; k++) {
				struct sop op = { (enum kind)k, s, e, 'd' };
				char model[16];
				uint64_t mres[2];
				uint32_t nr = rt_nranges(&t);
				uint64_t vp = rt_volatile_pages(&t);
				uint64_t pp = rt_purged_pages(&t);
				int rc;

				render(&t, before, 10);
				strcpy(model, before);
				model_str(model, &op, mres);
				rc = do_op(&t, &op, res);
				render(&t, after, 10);
				if (rc == -ENOMEM) {
					nomem++;
					ck_assert_str_eq(before, after);
					ck_assert_uint_eq(rt_nranges(&t), nr);
					ck_assert_uint_eq(rt_volatile_pages(&t), vp);
					ck_assert_uint_eq(rt_purged_pages(&t), pp);
				} else {
					ck_assert_int_eq(rc, 0);
					ck_assert_str_eq(after, model);
				}
				ck_assert_int_eq(rt_check(&t), 0);
				/* Put the layout back for the next op. */
				fresh_tree(&t, arena, bytes);
				build(&t, "aa.bb.cc..");
			}
		}
	}
	ck_assert_int_gt(nomem, 0);
	free(arena);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Differential test against a per-page model                                */

#define DPAGES 4096u
#define NPRIO 4
static const int32_t prios[NPRIO] = { -2, 0, 1, 5 }; /* ascending */

static uint64_t rng_next(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
	return rng_next(s) % n;
}

static uint64_t seed_from_env(uint64_t dflt)
{
	const char *s = getenv("RT_SEED");

	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* Every seq is used by one op with one prio, so seq identifies the age. */
struct dmodel {
	uint8_t st[DPAGES];
	uint8_t pi[DPAGES];   /* index into prios */
	uint32_t seq[DPAGES];
	uint64_t vol, purged;
	uint32_t runs;
	uint32_t *cnt;	   /* volatile pages per seq */
	uint32_t *minpage; /* no page below has this seq (lazy) */
	uint32_t *q[NPRIO]; /* seqs of each prio, ascending */
	uint32_t qh[NPRIO], qt[NPRIO];
};

static bool dsame(const struct dmodel *m, uint32_t a, uint32_t b)
{
	if (m->st[a] != m->st[b])
		return false;
	return m->st[a] != RT_VOLATILE || m->seq[a] == m->seq[b];
}

static uint32_t drun_starts(const struct dmodel *m, uint32_t lo, uint32_t hi)
{
	uint32_t n = 0;

	for (uint32_t p = lo; p < hi; p++)
		if (m->st[p] && (p == 0 || !dsame(m, p - 1, p)))
			n++;
	return n;
}

static void dset(struct dmodel *m, uint32_t p, uint8_t st, uint8_t pi,
		 uint32_t seq)
{
	if (m->st[p] == RT_VOLATILE) {
		m->cnt[m->seq[p]]--;
		m->vol--;
	} else if (m->st[p] == RT_PURGED) {
		m->purged--;
	}
	m->st[p] = st;
	m->pi[p] = st == RT_VOLATILE ? pi : 0;
	m->seq[p] = st == RT_VOLATILE ? seq : 0;
	if (st == RT_VOLATILE) {
		m->cnt[seq]++;
		m->vol++;
	} else if (st == RT_PURGED) {
		m->purged++;
	}
}

/* The model side of one op; res as the API reports it. */
static void dapply(struct dmodel *m, int kind, uint32_t lo, uint32_t hi,
		   uint8_t pi, uint32_t seq, uint64_t res[2])
{
	uint32_t rhi = hi < DPAGES ? hi + 1 : DPAGES;
	uint32_t before = drun_starts(m, lo, rhi);
	bool new_age = false;

	res[0] = res[1] = 0;
	for (uint32_t p = lo; p < hi; p++) {
		uint8_t st = m->st[p];

		switch (kind) {
		case K_VOL:
			res[0] += st == 0;
			if (st != RT_PURGED) {
				dset(m, p, RT_VOLATILE, pi, seq);
				new_age = true;
			}
			break;
		case K_CLEAR:
			res[0] += st == RT_VOLATILE;
			res[1] += st == RT_PURGED;
			dset(m, p, 0, 0, 0);
			break;
		case K_PURGE:
			if (st == RT_VOLATILE) {
				res[0]++;
				dset(m, p, RT_PURGED, 0, 0);
			}
			break;
		case K_UNPURGE:
			if (st == RT_PURGED) {
				res[0]++;
				dset(m, p, RT_VOLATILE, pi, seq);
				new_age = true;
			}
			break;
		default:
			break;
		}
	}
	if (new_age) {
		m->q[pi][m->qt[pi]++] = seq;
		m->minpage[seq] = lo;
	}
	m->runs += drun_starts(m, lo, rhi) - before;
}

/* Lowest (prio, seq, page) among volatile pages; false if none. */
/* The model's first range in purge order marked no later than max_seq:
 * a priority's queue head is its least recently marked range. */
static bool doldest_before(struct dmodel *m, uint64_t max_seq, struct rt_range *r)
{
	for (int i = 0; i < NPRIO; i++) {
		uint32_t s, p;

		while (m->qh[i] < m->qt[i] && !m->cnt[m->q[i][m->qh[i]]])
			m->qh[i]++;
		if (m->qh[i] == m->qt[i] || m->q[i][m->qh[i]] > max_seq)
			continue;
		s = m->q[i][m->qh[i]];
		p = m->minpage[s];
		while (m->st[p] != RT_VOLATILE || m->seq[p] != s)
			p++;
		m->minpage[s] = p;
		/* Equal ages coalesce, so the range starting at p is whole. */
		r->start = p;
		while (p < DPAGES && m->st[p] == RT_VOLATILE && m->seq[p] == s)
			p++;
		r->end = p;
		r->prio = prios[i];
		r->seq = s;
		return true;
	}
	return false;
}

static bool doldest(struct dmodel *m, struct rt_range *r)
{
	return doldest_before(m, UINT64_MAX, r);
}

struct dcmp {
	const struct dmodel *m;
	uint64_t pos;
	bool bad;
};

static int dcmp_cb(const struct rt_range *r, void *arg)
{
	struct dcmp *c = arg;
	const struct dmodel *m = c->m;

	if (r->start < c->pos || r->end > DPAGES || r->start >= r->end) {
		c->bad = true;
		return 1;
	}
	for (uint64_t p = c->pos; p < r->start; p++)
		if (m->st[p])
			goto bad;
	for (uint64_t p = r->start; p < r->end; p++) {
		if (m->st[p] != r->state)
			goto bad;
		if (r->state == RT_VOLATILE &&
		    (m->seq[p] != r->seq || prios[m->pi[p]] != r->prio))
			goto bad;
	}
	c->pos = r->end;
	return 0;
bad:
	c->bad = true;
	return 1;
}

/* Pages [lo, hi) of the tree equal the model's. */
static bool dcompare(const struct rt_tree *t, const struct dmodel *m,
		     uint64_t lo, uint64_t hi)
{
	struct dcmp c = { m, lo, false };

	if (rt_visit(t, lo, hi, dcmp_cb, &c) != 0 || c.bad)
		return false;
	for (uint64_t p = c.pos; p < hi; p++)
		if (m->st[p])
			return false;
	return true;
}

/* paged: the tree of a library file, small marks in page words; ranges
 * are then not coalesced across the two, so only pages are compared. */
/* words: a page cache's load on a paged tree - marks of up to 16 pages,
 * a rare sweep into the tree, everything cleared every 500 steps - so the
 * tree is mostly empty and single pages go lock-free. */
static void differential(uint64_t seed, uint64_t steps, bool paged, bool words)
{
	size_t bytes = paged ? rt_arena_bytes_paged(2 * DPAGES, DPAGES)
			     : rt_arena_bytes(2 * DPAGES);
	void *arena = arena_new(bytes);
	struct dmodel *m = calloc(1, sizeof(*m));
	struct rt_tree t;
	uint64_t rng = seed;
	struct timespec t0, t1;
	uint64_t sum_ranges = 0, nfast = 0;
	uint32_t max_ranges = 0;

	ck_assert_ptr_nonnull(m);
	m->cnt = calloc(steps + 2, sizeof(uint32_t));
	m->minpage = calloc(steps + 2, sizeof(uint32_t));
	for (int i = 0; i < NPRIO; i++)
		m->q[i] = calloc(steps + 2, sizeof(uint32_t));
	ck_assert(m->cnt && m->minpage && m->q[0] && m->q[1] && m->q[2] &&
		  m->q[3]);
	if (paged)
		ck_assert_int_eq(rt_format_paged(&t, arena, bytes, DPAGES), 0);
	else
		fresh_tree(&t, arena, bytes);
	clock_gettime(CLOCK_MONOTONIC, &t0);

	for (uint64_t step = 0; step < steps; step++) {
		int kind = (int)rng_below(&rng, 100);
		uint32_t lo = (uint32_t)rng_below(&rng, DPAGES), len, hi;
		uint32_t sel = (uint32_t)rng_below(&rng, 1000);
		uint8_t pi = (uint8_t)rng_below(&rng, NPRIO);
		uint32_t seq = (uint32_t)step + 1, cut;
		uint64_t res[2], mres[2], v, p, mv, mp;
		struct rt_range r, mr;
		bool full = step < 10000 || step % 1000 == 0 || step + 1 == steps;
		bool fast;
		int rc, ro;

		/* Mostly short ops so that many ranges build up; now and
		 * then a long one sweeps across many. */
		kind = kind < 40 ? K_VOL : kind < 60 ? K_CLEAR
			: kind < 80 ? K_PURGE : K_UNPURGE;
		len = sel < 20	  ? 0
		      : sel < 850 ? 1 + (uint32_t)rng_below(&rng, 8)
		      : sel < 997 ? 1 + (uint32_t)rng_below(&rng, 128)
				  : 1 + (uint32_t)rng_below(&rng, DPAGES);
		if (words) {
			len = sel < 20 ? 0 : sel < 500 ? 1
				: sel < 999 ? 1 + (uint32_t)rng_below(&rng, 16)
				: 17 + (uint32_t)rng_below(&rng, 64);
			if (step % 500 == 499) {
				kind = K_CLEAR;
				lo = 0;
				len = DPAGES;
			}
		}
		hi = lo + len > DPAGES ? DPAGES : lo + len;

		/* Half the single-page marks and unmarks of the paged tree
		 * go the lock-free way first (page_words.h), as a region's
		 * do: 0 there means "do it under the lock". */
		fast = paged && hi - lo == 1 && (sel & 1);
		switch (kind) {
		case K_VOL:
			if (fast && pw_fast_mark(t.pw.h, t.pw.n, lo, prios[pi], seq) == 1) {
				rc = 0;
				nfast++;
				res[0] = m->st[lo] == 0; /* newly: the states are checked below */
			} else {
				rc = rt_mark_volatile(&t, lo, hi, prios[pi], seq, &res[0]);
			}
			res[1] = 0;
			break;
		case K_CLEAR:
			if (fast && pw_fast_clear(t.pw.h, t.pw.n, lo) == 1) {
				rc = 0;
				nfast++;
				res[0] = 1; /* it was volatile: the model must agree */
				res[1] = 0;
			} else {
				rc = rt_clear(&t, lo, hi, &res[0], &res[1]);
			}
			break;
		case K_PURGE:
			rc = rt_mark_purged(&t, lo, hi, &res[0]);
			res[1] = 0;
			break;
		default:
			rc = rt_unpurge(&t, lo, hi, prios[pi], seq, &res[0]);
			res[1] = 0;
			break;
		}
		dapply(m, kind, lo, hi, pi, seq, mres);

#define DREQ(cond, fmt, ...)                                                   \
	REQUIRE(cond, "seed=%" PRIu64 " step=%" PRIu64 " %s [%u,%u): " fmt,    \
		seed, step, kind_name[kind], lo, hi, ##__VA_ARGS__)

		DREQ(rc == 0, "rc %d", rc);
		DREQ(res[0] == mres[0] && res[1] == mres[1],
		     "reported %" PRIu64 "/%" PRIu64 " model %" PRIu64
		     "/%" PRIu64, res[0], res[1], mres[0], mres[1]);
		DREQ(dcompare(&t, m, lo ? lo - 1 : 0,
			      hi < DPAGES ? hi + 1 : DPAGES),
		     "pages differ near the op");
		DREQ(rt_volatile_pages(&t) == m->vol &&
			     rt_purged_pages(&t) == m->purged,
		     "counters %" PRIu64 "/%" PRIu64 " model %" PRIu64
		     "/%" PRIu64, rt_volatile_pages(&t), rt_purged_pages(&t),
		     m->vol, m->purged);
		DREQ(paged || rt_nranges(&t) == m->runs, "%u ranges, model %u",
		     rt_nranges(&t), m->runs);
		mv = mp = 0;
		for (uint32_t q = lo; q < hi; q++) {
			mv += m->st[q] == RT_VOLATILE;
			mp += m->st[q] == RT_PURGED;
		}
		DREQ(rt_count(&t, lo, hi, &v, &p) == 0 && v == mv && p == mp,
		     "rt_count %" PRIu64 "/%" PRIu64 " model %" PRIu64
		     "/%" PRIu64, v, p, mv, mp);
		ro = rt_oldest(&t, &r);
		if (doldest(m, &mr)) {
			DREQ(ro == 1 && r.state == RT_VOLATILE &&
				     r.start == mr.start &&
				     (paged ? r.end > r.start && r.end <= mr.end
					    : r.end == mr.end) &&
				     r.prio == mr.prio && r.seq == mr.seq,
			     "oldest %d [%" PRIu64 ",%" PRIu64 ") %d/%" PRIu64
			     ", model [%" PRIu64 ",%" PRIu64 ") %d/%" PRIu64,
			     ro, r.start, r.end, r.prio, r.seq, mr.start,
			     mr.end, mr.prio, mr.seq);
		} else {
			DREQ(ro == 0, "oldest %d, model has none", ro);
		}
		/* A purge pass that began at some earlier step. */
		cut = (uint32_t)((step * 2654435761u) % (seq + 1u));
		ro = rt_oldest_before(&t, cut, &r);
		if (doldest_before(m, cut, &mr))
			DREQ(ro == 1 && r.start == mr.start && r.end == mr.end &&
				     r.prio == mr.prio && r.seq == mr.seq,
			     "oldest before %u: %d [%" PRIu64 ",%" PRIu64
			     "), model [%" PRIu64 ",%" PRIu64 ")", cut, ro,
			     r.start, r.end, mr.start, mr.end);
		else
			DREQ(ro == 0, "oldest before %u: %d, model has none",
			     cut, ro);
		if (full) {
			DREQ(rt_check(&t) == 0, "rt_check");
			DREQ(dcompare(&t, m, 0, DPAGES), "pages differ");
		}
#undef DREQ
		sum_ranges += rt_nranges(&t);
		if (rt_nranges(&t) > max_ranges)
			max_ranges = rt_nranges(&t);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(stderr, "range_tree differential%s: seed %" PRIu64 ", %" PRIu64
		" steps, %.2f s, ranges: %" PRIu64 " on average, %u at most, "
		"%" PRIu64 " lock-free\n",
		words ? " (page words, mostly)" : paged ? " (page words)" : "", seed, steps,
		(double)(t1.tv_sec - t0.tv_sec) +
			(double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
		sum_ranges / steps, max_ranges, nfast);
	for (int i = 0; i < NPRIO; i++)
		free(m->q[i]);
	free(m->minpage);
	free(m->cnt);
	free(m);
	free(arena);
}

START_TEST(test_differential)
{
	differential(seed_from_env(20240601), test_quick() ? 150000 : 1000000,
		     false, false);
}
END_TEST

START_TEST(test_differential_paged)
{
	differential(seed_from_env(20240602), test_quick() ? 100000 : 400000,
		     true, false);
	differential(seed_from_env(20240603), test_quick() ? 20000 : 60000,
		     true, true);
}
END_TEST

/*
 * The lock-free single-page operations (page_words.h): they change a word
 * and count it where the word is all there is, say "take the lock" where
 * a range exists anywhere in the file (until the tree is empty again), on
 * a purged page and for an unmark of a page not volatile; and a purge of
 * a run the order gave records only as far as each word is still volatile
 * (a lock-free unmark that came first keeps its page).
 */
START_TEST(test_paged_lock_free)
{
	enum { NP = 64 };
	size_t bytes = rt_arena_bytes_paged(NP + 16, NP);
	void *arena = arena_new(bytes);
	struct rt_tree t;
	struct rt_range r;
	uint64_t v, p, stop;

	ck_assert_int_eq(rt_format_paged(&t, arena, bytes, NP), 0);
	if (pw_fast_mark(t.pw.h, t.pw.n, 5, 0, 10) == 0) {
		fprintf(stderr, "SKIP: no 16-byte compare-and-swap here\n");
		free(arena);
		return;
	}
	ck_assert_uint_eq(rt_volatile_pages(&t), 1);
	ck_assert_int_eq(rt_count(&t, 5, 6, &v, &p), 0);
	ck_assert_uint_eq(v, 1);
	ck_assert_int_eq(pw_fast_mark(t.pw.h, t.pw.n, NP, 0, 11), 0); /* outside */
	ck_assert_int_eq(pw_fast_clear(t.pw.h, t.pw.n, 6), 0); /* not volatile */
	ck_assert_int_eq(pw_fast_clear(t.pw.h, t.pw.n, 5), 1);
	ck_assert_uint_eq(rt_volatile_pages(&t), 0);
	ck_assert_int_eq(rt_check(&t), 0);

	/* A purged page stays for the lock: mark keeps it, unmark reports. */
	ck_assert_int_eq(pw_fast_mark(t.pw.h, t.pw.n, 7, 0, 12), 1);
	ck_assert_int_eq(rt_mark_purged(&t, 7, 8, NULL), 0);
	ck_assert_int_eq(pw_fast_mark(t.pw.h, t.pw.n, 7, 0, 13), 0);
	ck_assert_int_eq(pw_fast_clear(t.pw.h, t.pw.n, 7), 0);
	ck_assert_int_eq(rt_clear(&t, 7, 8, &v, &p), 0);
	ck_assert_uint_eq(p, 1);

	/* A range anywhere: every lock-free call declines, changing nothing. */
	ck_assert_int_eq(rt_mark_volatile(&t, 40, 60, 0, 20, NULL), 0);
	ck_assert_int_eq(pw_fast_mark(t.pw.h, t.pw.n, 2, 0, 21), 0);
	ck_assert_int_eq(rt_count(&t, 2, 3, &v, &p), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(rt_clear(&t, 40, 60, NULL, NULL), 0);
	ck_assert_int_eq(pw_fast_mark(t.pw.h, t.pw.n, 2, 0, 22), 1);

	/* Three neighbours of one age: one run.  The middle one is unmarked
	 * lock-free after the order named the run: the purge stops there. */
	ck_assert_int_eq(rt_clear(&t, 0, NP, NULL, NULL), 0);
	ck_assert_int_eq(rt_mark_volatile(&t, 3, 6, 0, 30, NULL), 0);
	ck_assert_int_eq(rt_oldest(&t, &r), 1);
	ck_assert(r.words && r.start == 3 && r.end == 6);
	ck_assert_int_eq(pw_fast_clear(t.pw.h, t.pw.n, 4), 1);
	ck_assert_int_eq(rt_purge_exact(&t, &r, &stop), 0);
	ck_assert_uint_eq(stop, 4);
	ck_assert_int_eq(rt_count(&t, 3, 6, &v, &p), 0);
	ck_assert_uint_eq(v, 1); /* page 5 */
	ck_assert_uint_eq(p, 1); /* page 3 */
	/* A lock-free mark joins the purge order (the order was built). */
	ck_assert_int_eq(pw_fast_mark(t.pw.h, t.pw.n, 9, -1, 31), 1);
	ck_assert_int_eq(rt_oldest(&t, &r), 1);
	ck_assert_uint_eq(r.start, 9);
	ck_assert_int_eq(rt_check(&t), 0);

	/* A thread killed between its count and its swap (or two marks of
	 * one page at once, one plain) leaves a stripe a page high: the
	 * check lets that pass (a scan for nothing), a recount (after a
	 * takeover) repairs the counts and the totals without touching a
	 * word.  A page low - which would hide it from purges - fails. */
	v = rt_volatile_pages(&t);
	((struct pw_stripe *)(void *)((char *)t.pw.h + PW_STRIPES_AT))[2].vol += 1;
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), v + 1);
	rt_recount_words(&t);
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), v);
	((struct pw_stripe *)(void *)((char *)t.pw.h + PW_STRIPES_AT))[2].vol -= 1;
	ck_assert_int_eq(rt_check(&t), -EIO);
	rt_recount_words(&t);
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), v);
	ck_assert_int_eq(rt_count(&t, 0, NP, &v, &p), 0);
	ck_assert_uint_eq(v, 2); /* pages 5 and 9 */
	ck_assert_uint_eq(p, 1);
	free(arena);
}
END_TEST

/*
 * The purge order by cost (page_words.h, pw_key): marks of random costs,
 * priorities and lengths (single pages in the words, ranges in the tree,
 * costs past a word's 16 bits in the tree too), clears and purges; after
 * each step rt_oldest gives the least (prio, key) of every volatile page,
 * found by a walk of everything, and rt_oldest_before the least among
 * those marked by a cut; the tree stays valid.  Then draining in order
 * takes every page, by non-decreasing (prio, key).
 */
struct least {
	uint64_t max_seq;
	bool any;
	int32_t prio;
	uint64_t key;
};

static int least_one(const struct rt_range *r, void *arg)
{
	struct least *l = arg;
	uint64_t k;

	if (r->state != RT_VOLATILE || r->seq > l->max_seq)
		return 0;
	k = pw_key(r->seq, r->cost, pw_cost_unit());
	if (!l->any || r->prio < l->prio || (r->prio == l->prio && k < l->key)) {
		l->any = true;
		l->prio = r->prio;
		l->key = k;
	}
	return 0;
}

START_TEST(test_cost_order)
{
	enum { NP = 400 };
	static const uint32_t costs[] = { 1, 1, 1, 2, 3, 5, 7, 100, 1000, 70000, 4000000000u };
	size_t bytes = rt_arena_bytes_paged(4 * NP, NP);
	void *arena = arena_new(bytes);
	struct rt_tree t;
	struct rt_range r;
	uint64_t rng = 777, seq = 1, n;
	int32_t last_prio = INT32_MIN;
	uint64_t last_key = 0;

	pw_set_cost_unit(50);
	ck_assert_int_eq(rt_format_paged(&t, arena, bytes, NP), 0);
	for (int step = 0; step < 3000; step++) {
		uint64_t lo = rng_below(&rng, NP), len = rng_below(&rng, 10) < 7 ? 1 :
			1 + rng_below(&rng, 40), hi = lo + len > NP ? NP : lo + len;
		uint32_t kind = (uint32_t)rng_below(&rng, 10);
		uint32_t cost = costs[rng_below(&rng, sizeof(costs) / sizeof(costs[0]))];
		struct least l = { .max_seq = UINT64_MAX }, lb;
		uint64_t cut = rng_below(&rng, seq + 1);

		if (kind < 6)
			ck_assert_int_eq(rt_mark_volatile_cost(&t, lo, hi,
				(int32_t)rng_below(&rng, 2), seq++, cost, NULL), 0);
		else if (kind < 8)
			ck_assert_int_eq(rt_clear(&t, lo, hi, NULL, NULL), 0);
		else
			ck_assert_int_eq(rt_mark_purged(&t, lo, hi, NULL), 0);
		ck_assert_int_eq(rt_check(&t), 0);
		ck_assert_int_eq(rt_visit(&t, 0, NP, least_one, &l), 0);
		ck_assert_int_eq(rt_oldest(&t, &r), l.any);
		if (l.any) {
			ck_assert_int_eq(r.prio, l.prio);
			ck_assert_uint_eq(pw_key(r.seq, r.cost, pw_cost_unit()), l.key);
			ck_assert_uint_eq(r.key, l.key);
		}
		lb = (struct least){ .max_seq = cut };
		ck_assert_int_eq(rt_visit(&t, 0, NP, least_one, &lb), 0);
		ck_assert_int_eq(rt_oldest_before(&t, cut, &r), lb.any);
		if (lb.any) {
			ck_assert_uint_le(r.seq, cut);
			ck_assert_int_eq(r.prio, lb.prio);
			ck_assert_uint_eq(r.key, lb.key);
		}
	}
	/* Drain: (prio, key) never goes down. */
	while (rt_oldest(&t, &r) == 1) {
		ck_assert(r.prio > last_prio || (r.prio == last_prio && r.key >= last_key));
		last_prio = r.prio;
		last_key = r.key;
		ck_assert_int_eq(rt_mark_purged(&t, r.start, r.end, &n), 0);
		ck_assert_uint_ge(n, 1);
	}
	ck_assert_uint_eq(rt_volatile_pages(&t), 0);
	pw_set_cost_unit(1000000);
	free(arena);
}
END_TEST

/*
 * Page words and ranges side by side: a small mark lands in words, a large
 * one over them moves them into the tree (with their own ages, purged ones
 * staying purged), and a purge that drains the file takes every page in
 * purge order whichever of the two holds it.
 */
START_TEST(test_paged_drain)
{
	enum { NP = 600 };
	size_t bytes = rt_arena_bytes_paged(NP + 16, NP);
	void *arena = arena_new(bytes);
	struct rt_tree t, u;
	struct rt_range r;
	uint64_t n, v, p, taken = 0, rng = 12345;
	int32_t last_prio = INT32_MIN;
	uint64_t last_seq = 0;

	ck_assert_int_eq(rt_format_paged(&t, arena, bytes, NP), 0);
	ck_assert_uint_eq(rt_pages(&t), NP);
	ck_assert_int_eq(rt_grow(&t, arena, bytes), -EINVAL);
	/* Single pages, every other one, each of its own age: no range. */
	for (uint64_t i = 0; i < NP; i += 2) {
		ck_assert_int_eq(rt_mark_volatile(&t, i, i + 1,
						  (int32_t)rng_below(&rng, 3),
						  1000 - i, &n), 0);
		ck_assert_uint_eq(n, 1);
	}
	ck_assert_uint_eq(rt_nranges(&t), 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), NP / 2);
	/* Purge a few, then a large mark over them: moved into the tree. */
	ck_assert_int_eq(rt_mark_purged(&t, 10, 13, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(rt_mark_volatile(&t, 0, 100, 7, 5000, &n), 0);
	ck_assert_uint_eq(n, 50);
	ck_assert_int_eq(rt_count(&t, 0, 100, &v, &p), 0);
	ck_assert_uint_eq(v, 98);
	ck_assert_uint_eq(p, 2);
	ck_assert_uint_gt(rt_nranges(&t), 0);
	ck_assert_int_eq(rt_check(&t), 0);
	/* A small mark inside a range goes to the tree, not to words. */
	ck_assert_int_eq(rt_mark_volatile(&t, 50, 51, 0, 6000, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(rt_check(&t), 0);
	/* Another handle on the same arena (another process) sees it all. */
	ck_assert_int_eq(rt_attach(&u, arena, bytes), 0);
	ck_assert_uint_eq(rt_pages(&u), NP);
	ck_assert_int_eq(rt_check(&u), 0);
	ck_assert_int_eq(rt_attach(&u, arena, bytes - 64), -EIO);
	/* Drain: keys never go down, every volatile page is taken once. */
	v = rt_volatile_pages(&t);
	while (rt_oldest(&t, &r) == 1) {
		ck_assert(r.prio > last_prio ||
			  (r.prio == last_prio && r.seq >= last_seq));
		last_prio = r.prio;
		last_seq = r.seq;
		ck_assert_int_eq(rt_mark_purged(&t, r.start, r.end, &n), 0);
		ck_assert_uint_eq(n, r.end - r.start);
		taken += n;
		/* A mark meanwhile (of the lowest priority) comes next. */
		if (taken == 40) {
			ck_assert_int_eq(rt_mark_volatile(&t, 201, 202, -5, 1, &n), 0);
			ck_assert_int_eq(rt_oldest(&t, &r), 1);
			ck_assert_uint_eq(r.start, 201);
			ck_assert_int_eq(r.prio, -5);
			v++;
			last_prio = INT32_MIN;
		}
	}
	ck_assert_uint_eq(taken, v);
	ck_assert_uint_eq(rt_volatile_pages(&t), 0);
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_int_eq(rt_clear(&t, 0, UINT64_MAX >> 1, &v, &p), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_uint_eq(p, NP / 2 + 1 + 50);
	ck_assert_uint_eq(rt_purged_pages(&t), 0);
	ck_assert_int_eq(rt_check(&t), 0);
	free(arena);
}
END_TEST

/*
 * More volatile words than one sort keeps (PW_ORDER_MAX): a drain takes
 * them in exact purge order across rescans, while pages are unmarked and
 * marked again meanwhile with ages older and younger than the rest.
 */
START_TEST(test_paged_drain_large)
{
	enum { NP = 12000 };
	size_t bytes = rt_arena_bytes_paged(NP + 16, NP);
	void *arena = arena_new(bytes);
	int32_t *mp = calloc(NP, sizeof(*mp));
	uint64_t *ms = calloc(NP, sizeof(*ms));
	uint8_t *st = calloc(NP, 1);
	uint64_t rng = 99, nvol = 0, steps = 0, n;
	struct rt_tree t;
	struct rt_range r;

	ck_assert(mp && ms && st);
	ck_assert_int_eq(rt_format_paged(&t, arena, bytes, NP), 0);
	for (uint32_t i = 0; i < NP; i++) {
		mp[i] = (int32_t)rng_below(&rng, 3);
		ms[i] = 1000 + rng_below(&rng, 1000000);
		st[i] = RT_VOLATILE;
		ck_assert_int_eq(rt_mark_volatile(&t, i, i + 1, mp[i], ms[i], NULL), 0);
		nvol++;
	}
	while (rt_oldest(&t, &r) == 1) {
		uint32_t best = NP;

		REQUIRE(steps < 10 * NP, "the drain does not end");
		for (uint64_t q = r.start; q < r.end; q++)
			REQUIRE(q < NP && st[q] == RT_VOLATILE && mp[q] == r.prio &&
					ms[q] == r.seq,
				"step %" PRIu64 ": page %" PRIu64 " is not that", steps, q);
		if (steps % 53 == 0) { /* the model's oldest, by a scan */
			for (uint32_t q = 0; q < NP; q++)
				if (st[q] == RT_VOLATILE &&
				    (best == NP || mp[q] < mp[best] ||
				     (mp[q] == mp[best] && (ms[q] < ms[best] ||
							    (ms[q] == ms[best] && q < best)))))
					best = q;
			REQUIRE(best == r.start, "step %" PRIu64 ": oldest %" PRIu64
				", model %u", steps, r.start, best);
		}
		ck_assert_int_eq(rt_mark_purged(&t, r.start, r.end, &n), 0);
		for (uint64_t q = r.start; q < r.end; q++)
			st[q] = RT_PURGED;
		nvol -= n;
		if (steps % 7 == 0) { /* unmark and mark anew, any age */
			uint32_t q = (uint32_t)rng_below(&rng, NP);

			ck_assert_int_eq(rt_clear(&t, q, q + 1, NULL, NULL), 0);
			nvol -= st[q] == RT_VOLATILE;
			mp[q] = (int32_t)rng_below(&rng, 3);
			ms[q] = steps % 14 ? 2000000 + steps : rng_below(&rng, 2000);
			st[q] = RT_VOLATILE;
			nvol++;
			ck_assert_int_eq(rt_mark_volatile(&t, q, q + 1, mp[q], ms[q], NULL), 0);
		}
		steps++;
	}
	ck_assert_uint_eq(nvol, 0);
	ck_assert_uint_eq(rt_volatile_pages(&t), 0);
	ck_assert_int_eq(rt_check(&t), 0);
	free(st);
	free(ms);
	free(mp);
	free(arena);
}
END_TEST

/*
 * The oldest word marked no later than a pass's start (pw_oldest_before),
 * against a scan, with more words than one sort keeps and with few.
 */
START_TEST(test_paged_oldest_before)
{
	enum { NP = 9000 };
	size_t bytes = rt_arena_bytes_paged(NP + 16, NP);
	void *arena = arena_new(bytes);
	uint64_t rng = 4242;
	struct rt_tree t;

	ck_assert_int_eq(rt_format_paged(&t, arena, bytes, NP), 0);
	for (int round = 0; round < 3; round++) {
		uint32_t nmark = round == 0 ? 300 : NP;

		ck_assert_int_eq(rt_clear(&t, 0, NP, NULL, NULL), 0);
		for (uint32_t k = 0; k < nmark; k++) {
			uint32_t q = (uint32_t)rng_below(&rng, NP);

			ck_assert_int_eq(rt_mark_volatile(&t, q, q + 1,
					 (int32_t)rng_below(&rng, 4),
					 1 + rng_below(&rng, 100000), NULL), 0);
		}
		for (int probe = 0; probe < 200; probe++) {
			uint64_t max_seq = rng_below(&rng, 110000);
			struct pw_run run;
			const struct pw_word *b = NULL;
			uint32_t bi = 0;
			int r;

			for (uint32_t q = 0; q < NP; q++) {
				const struct pw_word *w = pw_at(&t.pw, q);

				if (w->state == RT_VOLATILE && w->seq <= max_seq &&
				    (!b || w->prio < b->prio ||
				     (w->prio == b->prio && w->seq < b->seq))) {
					b = w;
					bi = q;
				}
			}
			r = pw_oldest_before(&t.pw, max_seq, &run);
			if (!b) {
				REQUIRE(r == 0, "round %d: found one before %" PRIu64,
					round, max_seq);
				continue;
			}
			REQUIRE(r == 1 && run.start == bi && run.prio == b->prio &&
					run.seq == b->seq,
				"round %d before %" PRIu64 ": %d page %" PRIu64
				", scan page %u", round, max_seq, r, run.start, bi);
			/* Purge it now and then: the order moves on. */
			if (probe % 3 == 0)
				ck_assert_int_eq(rt_mark_purged(&t, run.start, run.end, NULL), 0);
		}
	}
	ck_assert_int_eq(rt_check(&t), 0);
	free(arena);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Hostile arena content                                                     */

#define GUARD 256
#define CAP 160

/* -EAGAIN: a purge that found a plain mark under way in a scribbled
 * stripe (an owner and a busy count) and gave up after its wait. */
static int rc_ok(int rc)
{
	return rc == 0 || rc == -EIO || rc == -ENOMEM || rc == -EAGAIN;
}

/* A burst of every kind of call; all must return sane codes. */
static void hammer(struct rt_tree *t, uint64_t *rng, bool must_stay_valid,
		   uint64_t trial)
{
	for (int i = 0; i < 24; i++) {
		uint64_t lo = rng_below(rng, 300), hi = lo + rng_below(rng, 60);
		uint64_t a, b;
		struct rt_range r;
		int rc;

		switch (rng_below(rng, 7)) {
		case 0:
			rc = rt_mark_volatile(t, lo, hi, (int32_t)rng_below(rng, 3),
					      rng_below(rng, 5), &a);
			break;
		case 1:
			rc = rt_clear(t, lo, hi, &a, &b);
			break;
		case 2:
			rc = rt_mark_purged(t, lo, hi, &a);
			break;
		case 3:
			rc = rt_unpurge(t, lo, hi, 1, rng_below(rng, 5), &a);
			break;
		case 4:
			rc = rt_count(t, lo, hi, &a, &b);
			break;
		case 5:
			rc = rt_oldest(t, &r);
			rc = rc == 1 ? 0 : rc;
			break;
		default:
			rc = rt_check(t);
			break;
		}
		REQUIRE(rc_ok(rc), "trial %" PRIu64 ": rc %d", trial, rc);
		(void)rt_free_nodes(t);
		(void)rt_nranges(t);
		if (must_stay_valid)
			REQUIRE(rc != -EIO && rt_check(t) == 0,
				"trial %" PRIu64 ": a tree that passed rt_check"
				" broke (rc %d)", trial, rc);
	}
}

static void scribble(char *arena, size_t bytes, uint64_t *rng)
{
	size_t slot = slot_bytes();
	uint32_t *w32 = (uint32_t *)(void *)arena;
	size_t nw = bytes / 4;

	switch (rng_below(rng, 6)) {
	case 0: /* random bytes anywhere */
		for (int n = 1 + (int)rng_below(rng, 8); n; n--)
			arena[rng_below(rng, bytes)] = (char)rng_next(rng);
		break;
	case 1: /* a word anywhere becomes an index, maybe out of range */
		w32[rng_below(rng, nw)] = (uint32_t)rng_below(rng, CAP + 8);
		break;
	case 2: /* a word becomes a huge index */
		w32[rng_below(rng, nw)] = (uint32_t)rng_next(rng) | 0x80000000u;
		break;
	case 3: /* a link word inside a node points back to a small index:
		 * likely a cycle */
		w32[(slot * (1 + rng_below(rng, 40))) / 4 + 7 +
		    rng_below(rng, 7)] = (uint32_t)rng_below(rng, 40);
		break;
	case 4: /* header fields */
		w32[rng_below(rng, slot / 4)] = (uint32_t)rng_below(rng, CAP + 4);
		break;
	default: /* a whole node of noise */
		for (size_t i = 0, o = slot * (1 + rng_below(rng, CAP)); i < slot;
		     i++)
			arena[o + i] = (char)rng_next(rng);
		break;
	}
}

/* Words for pages below PAGED_N (hammer's ranges reach past them: the
 * tree holds those). */
#define PAGED_N 256u

static void corruption(bool paged)
{
	size_t bytes = paged ? rt_arena_bytes_paged(CAP, PAGED_N)
			     : bytes_for_cap(CAP);
	char *buf = malloc(bytes + 2 * GUARD), *arena = buf + GUARD;
	char *pristine = malloc(bytes);
	uint64_t seed = seed_from_env(77), rng = seed;
	uint64_t trials = test_quick() ? 3000 : 20000;
	uint64_t caught = 0, valid = 0;
	struct rt_tree t;

	ck_assert(buf && pristine);
	memset(buf, 0xa5, bytes + 2 * GUARD);
	if (paged) {
		memset(arena, 0, bytes);
		ck_assert_int_eq(rt_format_paged(&t, arena, bytes, PAGED_N), 0);
	} else {
		fresh_tree(&t, arena, bytes);
	}
	for (int i = 0; i < 400; i++) {
		uint64_t lo = rng_below(&rng, 300), hi = lo + 1 + rng_below(&rng, 20);

		switch (rng_below(&rng, 4)) {
		case 0:
		case 1:
			(void)rt_mark_volatile(&t, lo, hi, (int32_t)rng_below(&rng, 3),
					       (uint64_t)i, NULL);
			break;
		case 2:
			(void)rt_mark_purged(&t, lo, hi, NULL);
			break;
		default:
			(void)rt_clear(&t, lo, lo + 1 + rng_below(&rng, 3), NULL, NULL);
			break;
		}
	}
	ck_assert_int_eq(rt_check(&t), 0);
	ck_assert_uint_gt(rt_nranges(&t), paged ? 10 : 30);
	if (paged) /* the purge order is built too */
		ck_assert_int_eq(rt_oldest(&t, &(struct rt_range){ 0 }), 1);
	memcpy(pristine, arena, bytes);

	for (uint64_t trial = 0; trial < trials; trial++) {
		struct rt_tree h;
		bool ok;

		memcpy(arena, pristine, bytes);
		for (int n = 1 + (int)rng_below(&rng, 3); n; n--)
			scribble(arena, bytes, &rng);
#ifdef TEST_ASAN
		ASAN_POISON_MEMORY_REGION(buf, GUARD);
		ASAN_POISON_MEMORY_REGION(arena + bytes, GUARD);
#endif
		/* Attach may refuse the header; then use the old handle,
		 * as a process that attached earlier would. */
		if (rt_attach(&h, arena, bytes) != 0)
			h = t;
		ok = rt_check(&h) == 0;
		valid += ok;
		caught += !ok;
		hammer(&h, &rng, ok, trial);
#ifdef TEST_ASAN
		ASAN_UNPOISON_MEMORY_REGION(buf, GUARD);
		ASAN_UNPOISON_MEMORY_REGION(arena + bytes, GUARD);
#endif
		for (size_t i = 0; i < GUARD; i++)
			REQUIRE((unsigned char)buf[i] == 0xa5 &&
					(unsigned char)arena[bytes + i] == 0xa5,
				"seed %" PRIu64 " trial %" PRIu64
				": write outside the arena", seed, trial);
	}
	fprintf(stderr, "range_tree corruption%s: seed %" PRIu64 ", %" PRIu64
		" trials, %" PRIu64 " caught by rt_check, %" PRIu64
		" harmless\n", paged ? " (page words)" : "", seed, trials,
		caught, valid);
	/* With words, a good part of the arena is the purge order: scratch
	 * that rt_check cannot judge (and a purge only trusts as far as
	 * the words confirm it). */
	ck_assert_uint_gt(caught, trials / (paged ? 8 : 4));
	free(pristine);
	free(buf);
}

START_TEST(test_corruption)
{
	corruption(false);
}
END_TEST

START_TEST(test_corruption_paged)
{
	corruption(true);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("range_tree");
	TCase *tc = tcase_create("unit");

	tcase_add_test(tc, test_format_attach);
	tcase_add_test(tc, test_grow);
	tcase_add_test(tc, test_shapes);
	tcase_add_loop_test(tc, test_shapes_exhaustive, 0,
			    (int)(sizeof(layouts) / sizeof(layouts[0])));
	tcase_add_test(tc, test_oldest_order);
	tcase_add_test(tc, test_oldest_before);
	tcase_add_test(tc, test_visit);
	tcase_add_test(tc, test_count);
	tcase_add_test(tc, test_extreme_addresses);
	tcase_add_test(tc, test_enomem_tiny);
	suite_add_tcase(s, tc);

	tc = tcase_create("differential");
	tcase_add_test(tc, test_differential);
	tcase_add_test(tc, test_differential_paged);
	tcase_add_test(tc, test_paged_lock_free);
	tcase_add_test(tc, test_cost_order);
	tcase_add_test(tc, test_paged_drain);
	tcase_add_test(tc, test_paged_drain_large);
	tcase_add_test(tc, test_paged_oldest_before);
	suite_add_tcase(s, tc);

	tc = tcase_create("corruption");
	tcase_add_test(tc, test_corruption);
	tcase_add_test(tc, test_corruption_paged);
	suite_add_tcase(s, tc);
	return s;
}
