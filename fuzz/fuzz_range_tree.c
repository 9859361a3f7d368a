/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the interval tree: the input is a list of operations
 * on a small page space, run against the tree and a per-page model.  The
 * arena is small (its size comes from the input) so -ENOMEM is exercised:
 * it must leave the tree exactly as it was.  Any disagreement aborts.
 * With the first byte's top bit the arena is a paged one (page words for
 * every page, as a library file's): small marks go to words, large ones
 * move them into the tree first, and -ENOMEM may strike in between.
 *
 * Build: clang -fsanitize=fuzzer,address -Isrc/core fuzz/fuzz_range_tree.c \
 *        src/core/range_tree.c src/core/page_words.c
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "range_tree.h"

#define PAGES 192u
#define MAX_CAP 160u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Words and ranges are not coalesced with each other: only pages and
 * the oldest range's start and age are compared, not range shapes. */
static bool paged;

struct page {
	uint8_t st; /* 0, RT_VOLATILE, RT_PURGED */
	int32_t prio;
	uint64_t seq;
};

static void fail(const char *what, size_t op)
{
	fprintf(stderr, "fuzz_range_tree: %s (op %zu)\n", what, op);
	abort();
}

static bool same(const struct page *a, const struct page *b)
{
	if (a->st != b->st)
		return false;
	return a->st != RT_VOLATILE ||
	       (a->prio == b->prio && a->seq == b->seq);
}

struct cmp {
	const struct page *m;
	uint64_t pos;
	bool bad;
};

static int cmp_cb(const struct rt_range *r, void *arg)
{
	struct cmp *c = arg;

	if (r->start < c->pos || r->end > PAGES || r->start >= r->end)
		goto bad;
	for (uint64_t p = c->pos; p < r->start; p++)
		if (c->m[p].st)
			goto bad;
	for (uint64_t p = r->start; p < r->end; p++) {
		const struct page *q = &c->m[p];

		if (q->st != r->state || (q->st == RT_VOLATILE &&
					  (q->prio != r->prio || q->seq != r->seq)))
			goto bad;
	}
	c->pos = r->end;
	return 0;
bad:
	c->bad = true;
	return 1;
}

/* Pages, counters, range count and oldest range all agree with m. */
static void compare(struct rt_tree *t, const struct page *m, size_t op)
{
	struct cmp c = { m, 0, false };
	uint64_t vol = 0, pur = 0, v, p;
	uint32_t runs = 0;
	int best = -1;
	struct rt_range r;
	int ro;

	if (rt_visit(t, 0, PAGES, cmp_cb, &c) != 0 || c.bad)
		fail("pages differ", op);
	for (uint64_t q = c.pos; q < PAGES; q++)
		if (m[q].st)
			fail("pages differ at the end", op);
	for (unsigned q = 0; q < PAGES; q++) {
		if (m[q].st && (q == 0 || !same(&m[q - 1], &m[q])))
			runs++;
		if (m[q].st == RT_PURGED)
			pur++;
		if (m[q].st != RT_VOLATILE)
			continue;
		vol++;
		if (best < 0 || m[q].prio < m[best].prio ||
		    (m[q].prio == m[best].prio && m[q].seq < m[best].seq))
			best = (int)q;
	}
	if (rt_volatile_pages(t) != vol || rt_purged_pages(t) != pur)
		fail("counters", op);
	if (rt_count(t, 0, PAGES, &v, &p) != 0 || v != vol || p != pur)
		fail("rt_count", op);
	if (!paged && rt_nranges(t) != runs)
		fail("range count", op);
	if (rt_check(t) != 0)
		fail("rt_check", op);
	ro = rt_oldest(t, &r);
	if (best < 0) {
		if (ro != 0)
			fail("oldest in a tree without volatile pages", op);
		return;
	}
	unsigned end = (unsigned)best;
	while (end < PAGES && same(&m[end], &m[best]))
		end++;
	if (ro != 1 || r.start != (uint64_t)best ||
	    (paged ? r.end > end || r.end <= r.start : r.end != end) ||
	    r.prio != m[best].prio || r.seq != m[best].seq)
		fail("oldest", op);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint64_t arena_mem[(MAX_CAP + 8) * 8 + 1024];
	struct page m[PAGES], saved[PAGES];
	struct rt_tree t;
	size_t slot = rt_arena_bytes(1) - rt_arena_bytes(0);
	size_t bytes;

	if (size < 1)
		return 0;
	/* First byte: arena size, from 1 node to MAX_CAP; top bit: paged. */
	paged = data[0] & 0x80;
	if (paged)
		bytes = rt_arena_bytes_paged(1 + (data[0] & 0x7f) % MAX_CAP, PAGES);
	else
		bytes = (1 + 1 + data[0] % MAX_CAP) * slot;
	if (bytes > sizeof(arena_mem))
		abort();
	memset(arena_mem, 0, bytes);
	if ((paged ? rt_format_paged(&t, arena_mem, bytes, PAGES)
		   : rt_format(&t, arena_mem, bytes)) != 0)
		fail("rt_format", 0);
	memset(m, 0, sizeof(m));

	/*
	 * Then 5 bytes per op: kind (low 2 bits; the rest, if nonzero, is the
	 * seq, so inputs can repeat an age and make equal neighbours), start,
	 * length, prio, and a byte that sometimes stretches the op past the
	 * model's page space.
	 */
	for (size_t i = 1, op = 0; i + 5 <= size; i += 5, op++) {
		uint8_t kind = data[i] & 3;
		uint64_t lo = data[i + 1] % PAGES;
		uint64_t hi = lo + data[i + 2] % 64;
		int32_t prio = (int8_t)data[i + 3] % 4;
		uint64_t seq = (data[i] >> 2) ? (data[i] >> 2) : op + 100;
		uint64_t res[2] = { 0, 0 }, want[2] = { 0, 0 };
		int rc;

		if (hi > PAGES)
			hi = PAGES;
		if (data[i + 4] & 1) /* sometimes ops past the page space */
			hi = lo + data[i + 4];
		memcpy(saved, m, sizeof(m));
		for (uint64_t p = lo; p < hi && p < PAGES; p++) {
			struct page *q = &m[p];

			switch (kind) {
			case 0:
				want[0] += q->st == 0;
				if (q->st != RT_PURGED)
					*q = (struct page){ RT_VOLATILE, prio, seq };
				break;
			case 1:
				want[0] += q->st == RT_VOLATILE;
				want[1] += q->st == RT_PURGED;
				*q = (struct page){ 0, 0, 0 };
				break;
			case 2:
				if (q->st == RT_VOLATILE) {
					want[0]++;
					*q = (struct page){ RT_PURGED, 0, 0 };
				}
				break;
			default:
				if (q->st == RT_PURGED) {
					want[0]++;
					*q = (struct page){ RT_VOLATILE, prio, seq };
				}
				break;
			}
		}
		if (kind == 0 && hi > PAGES)
			want[0] += hi - PAGES; /* nothing is out there */
		switch (kind) {
		case 0:
			rc = rt_mark_volatile(&t, lo, hi, prio, seq, &res[0]);
			break;
		case 1:
			rc = rt_clear(&t, lo, hi, &res[0], &res[1]);
			break;
		case 2:
			rc = rt_mark_purged(&t, lo, hi, &res[0]);
			break;
		default:
			rc = rt_unpurge(&t, lo, hi, prio, seq, &res[0]);
			break;
		}
		if (rc == -ENOMEM) {
			memcpy(m, saved, sizeof(m));
		} else if (rc != 0) {
			fail("unexpected error", op);
		} else if (res[0] != want[0] || res[1] != want[1]) {
			fail("reported page counts", op);
		}
		if (hi > PAGES && rc == 0) {
			/* Pages past the model's space: drop them again. */
			if (rt_clear(&t, PAGES, hi, NULL, NULL) != 0)
				fail("clear past the end", op);
		}
		compare(&t, m, op);
	}
	return 0;
}
