/* SPDX-License-Identifier: MIT */
/*
 * page_words.h - a state word per page, beside the range tree (internal).
 *
 * A page cache marks and unmarks single pages, thousands of them volatile
 * side by side, each of its own age.  In the range tree every such pair is
 * two descents through thousands of nodes, cache misses all the way.  A
 * file whose size is fixed (a library file) therefore also keeps one word
 * per page: a small mark goes into the words of its pages, and the pair
 * costs the same O(1) whatever the neighbours.
 *
 * A page's state lives in exactly one place: its word, or a tree range
 * (never both; range_tree.c keeps that, moving words into the tree before a
 * large mark covers them).  A word is {seq, prio, state, cost}: state 0 means
 * "not here", RT_VOLATILE and RT_PURGED as in the tree.
 *
 * The purge order (lowest prio, then lowest key: pw_key below) is the purge side's
 * business.  Whoever asks for the oldest word first sorts the volatile
 * words into an order area beside them and walks it, skipping entries whose
 * word no longer matches (unmarked, purged).  Once that order exists, a
 * mark only appends its entry behind it (one store); the next asker sorts
 * just those and, as their keys normally come after every older one (the
 * mark clock grows), takes them as the order's tail.  Only when they do
 * not (another priority, a clock a little behind) or the area is full is
 * everything sorted again.  A sort keeps only the PW_ORDER_MAX oldest
 * (a heap that fits in the cache while every word streams past once):
 * when those are used up, the next scan picks the next ones.  Purging is
 * rare, marking is hot.
 *
 * Without the lock (x86-64 with cmpxchg16b, the old gate): a mark or
 * unmark of one page whose word is all there is to it - no tree range
 * anywhere in the file (fast_off clear) - changes the word's tag (its last
 * 8 bytes: prio, state, cost) by one 8-byte compare-and-swap, the age
 * stored just before (it means something only while the word is
 * volatile), and counts in a stripe its thread owns alone (a plain add;
 * stripe 0, shared, by atomic add when none is free): two threads
 * on pages of one region write no line both write (pw_fast_mark,
 * pw_fast_clear).  Everything else, and everything that may put a page in
 * a range or copy the words away, runs under the lock, changes words only
 * by compare-and-swap too, and raises fast_off first (pw_fast_off): a
 * lock-free change that may have crossed it (fast_off seen raised after
 * its swap) is redone under the lock.  The protocol and why INTACT holds:
 * docs/design.md, "Page words".
 *
 * Position independence: everything lives in an area at the end of the
 * tree's arena, addressed by page number; nothing here is a pointer.
 * Layout (area_bytes = PW_HDR_BYTES + 32 * npages):
 *   [words: npages x 16, in pw_slot order][order: npages x 16][header: 128][stripes: 4 x 128]
 *
 * Untrusted content: page numbers read from the area are checked against
 * the locally trusted npages, loops are bounded by it, unknown states are
 * -EIO.  Locking is the caller's (the tree's lock) but for pw_fast_*.
 */
#ifndef VRANGE_PAGE_WORDS_H
#define VRANGE_PAGE_WORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plain_fence.h"

#define PW_STRIPES 4u
/* 128 bytes apart, and from the header every call reads: processors
 * fetch lines in pairs, so lines 64 bytes apart still contend. */
#define PW_STRIPES_AT 128u
#define PW_HDR_BYTES (PW_STRIPES_AT + 128u * PW_STRIPES)
/* Marks of at most this many pages go to the words (larger ones to the
 * tree, where a range costs one node whatever its length). */
#define PW_MAX_MARK 16u
/* Entries one sort keeps (64 KiB of them). */
#define PW_ORDER_MAX 4096u

struct pw_word {
	uint64_t seq;   /* RT_VOLATILE: its age; else left over, unread */
	int32_t prio;
	uint16_t state; /* 0, RT_VOLATILE or RT_PURGED */
	uint16_t cost;  /* RT_VOLATILE: its cost (1..PW_COST_MAX), else 0 */
};

/* Costs a word holds; a dearer mark goes to the tree. */
#define PW_COST_MAX 0xffffu

/*
 * The purge order within a priority (docs/design.md, "Purge order by
 * cost"): key = seq + (class(cost) - 1) * unit, saturating, ties by seq.
 * class(cost) rounds a cost down to 1, 2, 3, 4, 6, 8, 12, ... (two steps
 * per power of two: 64 classes), so the keys of one class ascend with
 * seq whatever the unit.  unit is the purge engine's current aging unit
 * (nanoseconds a page of cost 1 lasts once volatile, pw_cost_unit).
 */
static inline uint32_t pw_cost_cls(uint32_t cost)
{
	uint32_t k;

	if (cost <= 1)
		return 0;
	k = 31u - (uint32_t)__builtin_clz(cost);
	return 2 * k + ((cost >> (k - 1)) & 1u);
}

static inline uint64_t pw_cls_rep(uint32_t cls)
{
	uint32_t k = cls / 2;

	return cls & 1 ? 3ull << (k - 1) : 1ull << k;
}

static inline uint64_t pw_key_cls(uint64_t seq, uint32_t cls, uint64_t unit)
{
	uint64_t m = pw_cls_rep(cls) - 1;

	if (!m || !unit)
		return seq;
	if (m > (UINT64_MAX - seq) / unit)
		return UINT64_MAX;
	return seq + m * unit;
}

static inline uint64_t pw_key(uint64_t seq, uint32_t cost, uint64_t unit)
{
	return pw_key_cls(seq, pw_cost_cls(cost), unit);
}

/* The aging unit of this process's purges (set by purge.c after each
 * batch; nanoseconds, never 0). */
uint64_t pw_cost_unit(void);
void pw_set_cost_unit(uint64_t unit);

struct pw_ent { /* one entry of the purge order */
	uint64_t seq; /* its key: pw_key(word's seq, cost, ord_unit) */
	int32_t prio;
	uint32_t page;
};

struct pw_hdr {
	uint32_t magic;
	uint32_t npages;
	uint64_t nvol, npurged; /* words in each state */
	uint32_t ord_len;       /* sorted entries */
	uint32_t ord_pos;       /* entries before it are used up */
	uint32_t ord_nlog;      /* unsorted entries appended after ord_len */
	uint32_t ord_built;     /* 1: the entries above mean something */
	uint32_t ord_stale;     /* 1: a word turned volatile unrecorded */
	uint32_t ord_all;       /* 1: every volatile word had an entry; 0:
				 * only the oldest PW_ORDER_MAX did */
	uint32_t fast_off;      /* 1: no lock-free changes (a range may
				 * cover pages, the words are being copied) */
	uint32_t ord_costly;    /* 1: an entry of the order costs more
				 * than class 1 (its keys need ord_unit) */
	uint64_t ord_unit;      /* the aging unit the entries' keys used */
	uint64_t owner[PW_STRIPES]; /* stripe k's owner (k >= 1): the token
				 * of the one thread that writes it, or 0;
				 * owner[0] stays 0 (stripe 0 is shared) */
	uint32_t plain;         /* 1: a mark may turn a word in no state
				 * volatile with plain stores (pw_plain_stop) */
};
_Static_assert(sizeof(struct pw_hdr) <= PW_STRIPES_AT, "the header's line pair");

/* Volatile words counted by lock-free changes (nvol counts the locked
 * ones): a line pair of its own each.  Stripes 1.. are claimed by one
 * thread each (owner[], a compare-and-swap from 0), which then counts
 * with a plain load and store - no locked instruction; stripe 0 is for
 * threads that found none free and counts by atomic add. */
struct pw_stripe {
	int64_t vol;
	int64_t busy;             /* the owner's plain marks under way */
	struct plain_owner proc;  /* the owner's process, set at its claim */
	char pad[128 - 16 - sizeof(struct plain_owner)];
};

/* This process's view; npages is trusted locally, never re-read. */
struct pw {
	struct pw_hdr *h;
	struct pw_word *w;
	struct pw_ent *e;
	uint32_t n; /* 0: no words (a tree that can grow) */
};

/*
 * Where page i's word lies (n words).  Words are 16 bytes, eight to a
 * 128-byte line pair (processors fetch lines in pairs): side by side, two
 * threads marking neighbouring pages would write one line and take it from
 * each other on every swap.  So the pages of each whole block of 64 are
 * spread over the block's eight line pairs - page j of a block in slot
 * (j % 8) * 8 + j / 8 - and any eight consecutive pages there have words
 * in eight different pairs.  A last, partial block stays in page order.
 * A scan of consecutive pages still stays within one 1 KiB block.
 */
static inline uint64_t pw_slot(uint64_t i, uint32_t n)
{
	if (i >= (n & ~63u))
		return i;
	return (i & ~63ull) | ((i & 7) << 3) | ((i >> 3) & 7);
}

static inline struct pw_word *pw_at(const struct pw *p, uint64_t i)
{
	return p->w + pw_slot(i, p->n);
}

/* One run of pages with equal words, as the tree reports ranges. */
struct pw_run {
	uint64_t start, end, seq;
	int32_t prio;
	uint32_t state;
	uint32_t cost; /* RT_VOLATILE only */
	uint64_t key;  /* pw_oldest*: pw_key with the current unit */
};

/* Bytes of the area for npages pages (a multiple of 64). */
static inline size_t pw_area_bytes(uint32_t npages)
{
	return PW_HDR_BYTES + 32 * (size_t)npages;
}

/* Format the zero-filled area that starts at area. */
void pw_format(struct pw *p, void *area, uint32_t npages);
/* Attach to a formatted area: 0, or -EIO if its header disagrees. */
int pw_attach(struct pw *p, void *area, uint32_t npages);
/* npages as the header of an area of area_bytes at its end claims it
 * (0 if no sane header is there): for readers that know only the size. */
uint32_t pw_peek_npages(const void *area_end_hdr);

/* Volatile words, locked and lock-free changes together (exact while no
 * lock-free change is under way). */
uint64_t pw_vol(const struct pw *p);
/* The lock-free part alone, of the area whose header is at area_end_hdr
 * (0 if no sane header is there): for readers of a copy of the header. */
int64_t pw_peek_fast_vol(const void *area_end_hdr);

/* v + delta, never below 0 (a total and the stripes' signed part). */
static inline uint64_t pw_plus(uint64_t v, int64_t delta)
{
	if (delta < 0)
		return (uint64_t)-delta < v ? v - (uint64_t)-delta : 0;
	return v + (uint64_t)delta;
}

/* Any word holding state?  (A lock-free mark under way may be missed:
 * it is then ordered after the caller's operation.) */
static inline bool pw_any(const struct pw *p)
{
	return p->n && (p->h->npurged || pw_vol(p));
}

/* This process gives back the stripes its threads own in the area whose
 * header is h (before the area is unmapped; no thread of ours marks in it
 * any more).  A thread that exits keeps its claims for the next thread of
 * this process: its token is handed on (pw_stripe_token). */
void pw_release_stripes(struct pw_hdr *h);

/* Under the lock: lock-free changes off, before anything that may put a
 * page in a range or copies the words away; back on when no range is
 * left (the caller knows). */
void pw_fast_off(struct pw *p);
void pw_fast_on(struct pw *p);

/*
 * Under the lock, before a purge turns words from volatile to purged:
 * plain marks off (plain 0), fenced, and none left under way - each
 * stripe's busy count 0, or its owner's process gone.  A plain mark loads
 * the word as "no state" and stores it volatile; one that crossed the
 * purge's swap would store over "purged".  0, or -EAGAIN: one is still
 * under way after PLAIN_WAIT_NS (a thread preempted inside it): leave the
 * area for later.  pw_purge and pw_purge_exact call it.
 */
int pw_plain_stop(struct pw *p);
/* Plain marks back on as the lock is released (the purge that stopped
 * them is done), unless this process's fence is the fallback's sleep. */
void pw_plain_resume(struct pw *p);

/*
 * The operations, on pages [s, e) clipped to the words (e > npages is
 * clipped, except for pw_mark, which the caller keeps inside).  Each adds
 * to *a the pages it changed from non-volatile / volatile / purged as
 * range_tree.c needs for its totals.  0 or -EIO (a word holds garbage:
 * what came before it is done).
 */
struct pw_delta {
	int64_t vol, purged; /* change of the totals */
	uint64_t was_none, was_vol, was_purged; /* pages before, by state */
};
int pw_mark(struct pw *p, uint64_t s, uint64_t e, int32_t prio, uint64_t seq,
	    uint32_t cost, struct pw_delta *d);
int pw_clear(struct pw *p, uint64_t s, uint64_t e, struct pw_delta *d);
int pw_purge(struct pw *p, uint64_t s, uint64_t e, struct pw_delta *d);
/* The purge of a run the order gave, before its pages are discarded:
 * purges from s on while each word is still volatile, *stop where that
 * ends (a lock-free unmark got there first: that page keeps its data). */
int pw_purge_exact(struct pw *p, uint64_t s, uint64_t e, uint64_t *stop,
		   struct pw_delta *d);
int pw_unpurge(struct pw *p, uint64_t s, uint64_t e, int32_t prio,
	       uint64_t seq, uint32_t cost, struct pw_delta *d);

/* The first run of equal non-zero words in [s, e): 1, 0 if none, -EIO. */
int pw_next_run(const struct pw *p, uint64_t s, uint64_t e, struct pw_run *out);

/* The oldest volatile run (pages in order of the purge key, consecutive,
 * of one age): 1, 0 if none, -EIO.  May rebuild the order (O(n log n)). */
int pw_oldest(struct pw *p, struct pw_run *out);

/* The same among the words marked no later than max_seq (a purge pass
 * takes what was volatile when it began): 1, 0 if none, -EIO.  Walks the
 * order, skipping a priority at its first entry past max_seq; a scan of
 * the words when the order holds only the oldest and none of them. */
int pw_oldest_before(struct pw *p, uint64_t max_seq, struct pw_run *out);

/* After a holder died (the lock taken over): the counts made to agree
 * with the words again - a thread killed inside a lock-free call leaves
 * its stripe a page off, a holder killed inside a loop its counts - and
 * the change returned for the tree's totals.  0 or -EIO (a word holds
 * garbage).  O(npages). */
int pw_recount(struct pw *p, int64_t *dvol, int64_t *dpurged);

/* Counters and states check out (volatile counted no lower than the
 * words hold: see pw_check): 0 or -EIO.  O(npages). */
int pw_check(const struct pw *p);

#include "page_words_fast.h"

#endif
