/* SPDX-License-Identifier: MIT */
/*
 * range_tree.h - the interval tree that all marking stands on (internal).
 *
 * A set of non-overlapping page ranges [start, end) of one file (or of the
 * process's anonymous address space), each in one of two states:
 *
 *   RT_VOLATILE  marked volatile, contents still there; carries a place in the
 *                purge order: (prio, seq, cost), lower first (the key
 *                within a priority: pw_key in page_words.h).
 *   RT_PURGED    marked volatile and discarded since; stays so until cleared.
 *
 * Pages that are in no range are non-volatile.  Neighbours merge when their
 * state is equal and, for RT_VOLATILE, their (prio, seq, cost) is equal too: pieces
 * marked at different moments keep their own age so purge order stays exact.
 *
 * Position independence: nodes live in an arena addressed by 32-bit index
 * (0 = nil), and the header that holds the roots, free list and counters lives
 * at the start of that same arena.  The arena can therefore sit in a shared
 * mapping that several processes map at different addresses.  The handle
 * (struct rt_tree) is process-local; it holds the arena's address and the
 * capacity this process trusts (never the header's copy, which a hostile
 * process could have scribbled on).
 *
 * No operation calls malloc: nodes come from the arena (free list, then bump).
 * An operation that needs a node when the arena is full returns -ENOMEM and
 * leaves the tree unchanged.  Clearing a range (rt_clear) needs at most two
 * fresh nodes; rt_reserve_ok() tells whether they are there.
 *
 * Corruption: every index read from the arena is bounds-checked and every walk
 * is bounded; a violation makes the operation return -EIO without writing
 * outside the arena.
 *
 * Locking is the caller's: one tree, one lock.
 */
#ifndef VRANGE_RANGE_TREE_H
#define VRANGE_RANGE_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "page_words.h"

enum rt_state {
	RT_VOLATILE = 1,
	RT_PURGED = 2,
};

/* One range, as reported to callers. */
struct rt_range {
	uint64_t start, end; /* pages, end exclusive */
	uint64_t seq;        /* mark order (RT_VOLATILE only) */
	int32_t prio;        /* priority (RT_VOLATILE only) */
	uint32_t cost;       /* re-creation cost per page (RT_VOLATILE only) */
	uint64_t key;        /* rt_oldest*: the order key, pw_key() with the
				current unit (page_words.h) */
	enum rt_state state;
	bool words;          /* rt_oldest*: a run of page words (page_words.h) */
};

struct rt_hdr;  /* lives at the start of the arena; opaque here */
struct rt_node; /* the arena's elements; opaque here */

struct rt_tree {
	struct rt_hdr *hdr;
	struct rt_node *nodes; /* nodes[0] is the nil sentinel slot */
	uint32_t cap;          /* usable node slots, trusted locally */
	uint32_t ver;          /* the header version this arena must show */
	struct pw pw;          /* page words (pw.n == 0: none) */
};

/* Bytes of arena needed for a tree with room for nranges ranges. */
size_t rt_arena_bytes(uint32_t nranges);

/* Format a fresh, zero-filled arena of arena_bytes bytes; 0 or -EINVAL. */
int rt_format(struct rt_tree *t, void *arena, size_t arena_bytes);

/*
 * The same for the state of a file of npages pages whose size never
 * changes: the arena also holds a word per page (page_words.h), small
 * marks go there, and the arena cannot grow.  A page's state is in its
 * word or in a range, never both; every operation below sees the union.
 */
size_t rt_arena_bytes_paged(uint32_t nranges, uint32_t npages);
int rt_format_paged(struct rt_tree *t, void *arena, size_t arena_bytes,
		    uint32_t npages); /* zero-filled too */
/* Pages with words (0: none). */
static inline uint32_t rt_pages(const struct rt_tree *t)
{
	return t->pw.n;
}

/*
 * Attach to an arena that rt_format or rt_format_paged formatted (possibly
 * in another process).  Checks the header's magic and sizes against
 * arena_bytes: 0 or -EIO.  (A paged arena's page count is read from it:
 * callers that know it compare rt_pages().)
 */
int rt_attach(struct rt_tree *t, void *arena, size_t arena_bytes);

/*
 * The arena grew (the caller remapped it bigger, contents preserved): take
 * note of the new address and size.  0 or -EINVAL if it shrank.
 */
int rt_grow(struct rt_tree *t, void *arena, size_t arena_bytes);

/*
 * Mark [start, end) volatile with (prio, seq): non-volatile and volatile pages
 * become RT_VOLATILE with this age; RT_PURGED pages stay RT_PURGED.
 * *newly (if not NULL) gets the number of pages that were non-volatile.
 * 0, -ENOMEM (arena full, tree unchanged) or -EIO.
 */
int rt_mark_volatile_cost(struct rt_tree *t, uint64_t start, uint64_t end,
			  int32_t prio, uint64_t seq, uint32_t cost,
			  uint64_t *newly);
/* The same with cost 1. */
static inline int rt_mark_volatile(struct rt_tree *t, uint64_t start,
				   uint64_t end, int32_t prio, uint64_t seq,
				   uint64_t *newly)
{
	return rt_mark_volatile_cost(t, start, end, prio, seq, 1, newly);
}

/*
 * Make [start, end) non-volatile (remove every range there).
 * *vol and *purged (if not NULL) get how many pages were RT_VOLATILE and
 * RT_PURGED.  0, -ENOMEM or -EIO.  Never needs more than two free nodes.
 */
int rt_clear(struct rt_tree *t, uint64_t start, uint64_t end,
	     uint64_t *vol, uint64_t *purged);

/*
 * RT_VOLATILE pages in [start, end) become RT_PURGED; other pages unchanged.
 * *count (if not NULL) gets how many changed.  0, -ENOMEM or -EIO.
 */
int rt_mark_purged(struct rt_tree *t, uint64_t start, uint64_t end,
		   uint64_t *count);

/*
 * RT_PURGED pages in [start, end) become RT_VOLATILE with (prio, seq) (a
 * refill restored them).  *count gets how many changed.  0, -ENOMEM, -EIO.
 */
int rt_unpurge_cost(struct rt_tree *t, uint64_t start, uint64_t end,
		    int32_t prio, uint64_t seq, uint32_t cost, uint64_t *count);
static inline int rt_unpurge(struct rt_tree *t, uint64_t start, uint64_t end,
			     int32_t prio, uint64_t seq, uint64_t *count)
{
	return rt_unpurge_cost(t, start, end, prio, seq, 1, count);
}

/* Pages of [start, end) that are RT_VOLATILE / RT_PURGED.  0 or -EIO. */
int rt_count(const struct rt_tree *t, uint64_t start, uint64_t end,
	     uint64_t *vol, uint64_t *purged);

/*
 * The RT_VOLATILE range first in purge order: lowest prio, then lowest
 * key (pw_key: seq, raised by the cost class times the aging unit), then
 * lowest seq, then lowest start.  1 and *out filled, 0 if there is none, or -EIO.
 * O(log n), plus, with page words, a sort of the volatile words when
 * something was marked since the last call (it writes that order into
 * the arena: hence not const).
 */
int rt_oldest(struct rt_tree *t, struct rt_range *out);

/*
 * The first RT_VOLATILE range in purge order among those marked no later
 * than max_seq (a purge pass considers what was volatile when it began).
 * 1 and *out filled, 0 if there is none, or -EIO.  O(log n) per priority
 * whose ranges were all marked later.
 */
int rt_oldest_before(struct rt_tree *t, uint64_t max_seq, struct rt_range *out);

/*
 * Call fn on each range overlapping [start, end), in address order, clipped
 * to [start, end).  fn returns 0 to go on; anything else stops the walk and
 * is returned.  fn must not modify the tree.  Returns 0, fn's value or -EIO.
 */
typedef int (*rt_visit_fn)(const struct rt_range *r, void *arg);
int rt_visit(const struct rt_tree *t, uint64_t start, uint64_t end,
	     rt_visit_fn fn, void *arg);

/* Totals, O(1): the header's (volatile pages: plus the page words'
 * stripes of lock-free marks, page_words.h). */
uint64_t rt_volatile_pages(const struct rt_tree *t); /* RT_VOLATILE */
uint64_t rt_purged_pages(const struct rt_tree *t);   /* RT_PURGED */
uint32_t rt_nranges(const struct rt_tree *t);

/*
 * Record the range rt_oldest_before() just gave RT_PURGED, before its
 * pages are discarded: *stop is where what was recorded ends.  A range of
 * the tree is recorded whole; a run of page words only as far as each
 * word is still volatile (a lock-free unmark may have come first: that
 * page and the rest keep their data).  0 or -EIO.
 */
int rt_purge_exact(struct rt_tree *t, const struct rt_range *r, uint64_t *stop);
/* After a holder died, before rt_check(): the page words' counts made to
 * agree with the words (page_words.h, pw_recount), and the totals. */
void rt_recount_words(struct rt_tree *t);
/* The page words' lock-free changes off (page_words.h), before the state
 * is copied away; the tree's own operations raise and lower it. */
void rt_fast_off(struct rt_tree *t);

/*
 * The totals of a tree read from outside without its arena: hdr is a copy
 * of the arena's first 64 bytes, arena_bytes the size the arena must have.
 * The volatile count leaves out the page words' stripes, which sit at the
 * arena's end (pw_peek_fast_vol).
 * The header is checked as rt_attach checks it.  0 or -EIO.
 */
#define RT_HDR_COPY_BYTES 64
int rt_peek_totals(const void *hdr, size_t arena_bytes, uint64_t *vol,
		   uint64_t *purged);

/* Free node slots left (free list + never used).  */
uint32_t rt_free_nodes(const struct rt_tree *t);

/*
 * Full invariant check (for tests and for -EIO detection on attach):
 * ordering, non-overlap, coalescing, balance, purge-order index, counters,
 * free list.  0 or -EIO.  O(n).
 */
int rt_check(const struct rt_tree *t);

#endif
