/* SPDX-License-Identifier: MIT */
/*
 * page_words_fast.h - the lock-free single-page mark and unmark of the page
 * words (page_words.h), inline: a region's mark pair runs them in the
 * library's entry points with no call between (region.c), and the words'
 * locked operations (page_words.c) change words by the same swap.
 * Internal; nothing here is part of the ABI (the public header knows none
 * of it).  Included by page_words.h.
 */
#ifndef VRANGE_PAGE_WORDS_FAST_H
#define VRANGE_PAGE_WORDS_FAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* RT_VOLATILE (range_tree.h, which includes this header first). */
#define PW_RT_VOLATILE 1

#define PW_INTERNAL __attribute__((visibility("hidden")))

/* A word's state changes by one 8-byte compare-and-swap of its tag
 * (pw_word_cas) on x86-64 processors that also have cmpxchg16b (the gate
 * of the 16-byte swap this replaced, kept: the same machines go
 * lock-free); elsewhere only under the lock, and the lock-free operations
 * always say "take the lock". */
#if defined(__x86_64__) && defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#define PW_LOCK_FREE 1
_Static_assert(sizeof(struct pw_word) == 16, "word size");
/* The first x86-64 processors lack cmpxchg16b (the x86-64 baseline does
 * not promise it): there every change takes the lock, as elsewhere. */
extern bool pw_have_cas16 PW_INTERNAL;
#else
#define PW_LOCK_FREE 0
#endif

/*
 * Whoever holds the lock changes words by compare-and-swap too: a
 * lock-free mark or unmark may change the same word meanwhile (only
 * between "none" and RT_VOLATILE; never a purged word).
 *
 * The swap is of the word's tag - its last 8 bytes, {prio, state, cost} -
 * alone (an 8-byte compare-and-swap: on x86-64 2.4 times cheaper than a
 * 16-byte one, which was most of a mark pair).  Every change of state is
 * such a swap, so the INTACT argument is the tag's; the age (seq) is
 * stored just before the swap that makes the word volatile, and means
 * something only while the word is volatile: a swap that then fails may
 * leave it on a word of another state, where nothing reads it.  A reader
 * may see an age a moment newer than the swap that published it, or a
 * re-mark's age with the previous tag: an order off by that moment, never
 * a state.
 */
static inline uint64_t pw_tag_of(const struct pw_word *w)
{
	uint64_t t;

	memcpy(&t, &w->prio, sizeof(t));
	return t;
}

_Static_assert(offsetof(struct pw_word, prio) == 8 &&
	       offsetof(struct pw_word, cost) + sizeof(uint16_t) == 16,
	       "the tag is the word's last 8 bytes");

/* The tag as the lock-free path reads and swaps it, one 8-byte value
 * (x86-64 only, little-endian: prio, then state, then cost). */
static inline uint64_t *pw_tag_at(struct pw_word *w)
{
	return (uint64_t *)(void *)&w->prio;
}

static inline uint32_t pw_tag_state(uint64_t t)
{
	return (uint32_t)(t >> 32) & 0xffffu;
}

static inline uint64_t pw_tag(int32_t prio, uint32_t state, uint32_t cost)
{
	return (uint64_t)(uint32_t)prio | (uint64_t)state << 32 | (uint64_t)cost << 48;
}

static inline bool pw_word_cas(struct pw_word *w, struct pw_word old,
			       struct pw_word nw)
{
#if PW_LOCK_FREE
	if (pw_have_cas16) {
		uint64_t o = pw_tag_of(&old), n = pw_tag_of(&nw);

		if (nw.state == PW_RT_VOLATILE)
			__atomic_store_n(&w->seq, nw.seq, __ATOMIC_RELAXED);
		return __atomic_compare_exchange_n((uint64_t *)(void *)&w->prio,
						   &o, n, false, __ATOMIC_SEQ_CST,
						   __ATOMIC_RELAXED);
	}
#endif
	*w = nw;
	return true;
}

/* A copy of the word (it may be torn by a concurrent swap: a swap from
 * it then fails and the caller reads again). */
static inline struct pw_word pw_word_read(const struct pw_word *w)
{
	return *(const volatile struct pw_word *)w;
}

#ifdef PW_TEST_HOOKS
/* Tests only (tests/test_page_words_race.c): called inside pw_fast_mark
 * and pw_fast_clear between their first look at fast_off and the swap
 * (PW_BEFORE_SWAP) and between the swap and the second look
 * (PW_AFTER_SWAP), so a test can put a holder's steps exactly there. */
enum { PW_BEFORE_SWAP, PW_AFTER_SWAP };
extern void (*pw_test_hook)(int where);
#define PW_TEST_HOOK(where)                    \
	do {                                   \
		if (pw_test_hook)              \
			pw_test_hook(where);   \
	} while (0)
#else
#define PW_TEST_HOOK(where) do { } while (0)
#endif

static inline struct pw_word *pw_words_of(struct pw_hdr *h, uint32_t npages)
{
	return (struct pw_word *)((char *)h - 32 * (size_t)npages);
}

static inline struct pw_stripe *pw_stripes_of(const struct pw_hdr *h)
{
	return (struct pw_stripe *)((char *)(uintptr_t)h + PW_STRIPES_AT);
}

#if PW_LOCK_FREE
/* This thread's token and the stripe it last counted in (page_words.c). */
extern __thread uint64_t pw_my_token
	__attribute__((tls_model("initial-exec"))) PW_INTERNAL;
extern __thread unsigned int pw_my_stripe
	__attribute__((tls_model("initial-exec"))) PW_INTERNAL;
/* The stripe this thread owns in h, claiming one if it has none: k >= 1,
 * or 0 (none free: the shared stripe). */
unsigned int pw_stripe_find(struct pw_hdr *h) PW_INTERNAL;

/* Count a lock-free change: in the stripe this thread owns (plain add),
 * else in the shared one. */
static inline void pw_count_fast(struct pw_hdr *h, int64_t delta)
{
	unsigned int k = pw_my_stripe;
	int64_t *v;

	if (__builtin_expect(!k || __atomic_load_n(&h->owner[k], __ATOMIC_RELAXED) !=
				   pw_my_token, 0))
		k = pw_stripe_find(h);
	v = &pw_stripes_of(h)[k].vol;
	if (__builtin_expect(k != 0, 1))
		__atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + delta,
				 __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(v, delta, __ATOMIC_RELAXED);
}

static inline bool pw_fast_is_off(const struct pw_hdr *h)
{
	return __atomic_load_n(&h->fast_off, __ATOMIC_SEQ_CST) != 0;
}

/* A lock-free mark is not in the order: say so (once; a line the marking
 * threads then only read).  After the swap: an order built from a scan
 * that may have missed it was begun after ord_stale was cleared. */
static inline void pw_note_unordered(struct pw_hdr *h)
{
	if (__atomic_load_n(&h->ord_built, __ATOMIC_SEQ_CST) &&
	    !__atomic_load_n(&h->ord_stale, __ATOMIC_RELAXED))
		__atomic_store_n(&h->ord_stale, 1, __ATOMIC_RELAXED);
}
#endif

/*
 * The plain mark (docs/design.md, "The plain mark"): word w, in no state,
 * turned volatile with plain stores - no locked instruction - inside a
 * count of busy in this thread's own stripe, which a purge waits for
 * (pw_plain_stop), and only while the area says plain.  Counted before
 * the word turns volatile, as a swap's mark is.  false: not done (no
 * stripe of our own, plain marks stopped, the word not in no state).
 */
#if PW_LOCK_FREE
static inline bool pw_plain_mark(struct pw_hdr *h, struct pw_word *w, uint64_t *tag,
				 uint64_t seq, uint64_t nt)
{
	unsigned int k = pw_my_stripe;
	struct pw_stripe *st;
	bool done = false;

	if (__builtin_expect(!k || __atomic_load_n(&h->owner[k], __ATOMIC_RELAXED) !=
				   pw_my_token, 0) && !(k = pw_stripe_find(h)))
		return false;
	st = pw_stripes_of(h) + k;
	/* A signal handler's mark in between puts busy back as it found it. */
	__atomic_store_n(&st->busy, __atomic_load_n(&st->busy, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&h->plain, __ATOMIC_RELAXED) &&
	    !__atomic_load_n(tag, __ATOMIC_RELAXED)) {
		__atomic_store_n(&st->vol, __atomic_load_n(&st->vol, __ATOMIC_RELAXED) + 1,
				 __ATOMIC_RELAXED);
		PW_TEST_HOOK(PW_BEFORE_SWAP);
		__atomic_store_n(&w->seq, seq, __ATOMIC_RELAXED);
		__atomic_store_n(tag, nt, __ATOMIC_RELAXED);
		done = true;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&st->busy, __atomic_load_n(&st->busy, __ATOMIC_RELAXED) - 1,
			 __ATOMIC_RELAXED);
	return done;
}
#endif

/*
 * Lock-free, on page i of the area whose header is h (npages n, trusted
 * locally; the words are found from the header, so a reader that loads
 * one pointer sees one area).  1: done.  0: take the lock and do it
 * there (lock-free changes are off, the word is purged or not volatile,
 * or a change crossed a locked one: redo it).  pw_fast_clear's 1 means
 * the page was volatile and never purged: VRANGE_INTACT.
 *
 * Why a change that saw fast_off clear after its swap stands: a holder
 * raises fast_off (sequentially consistent) before it reads any word it
 * may move into a range or copy; the swap came before that second load,
 * which came before the raise, so the holder reads the swapped word.  One
 * that saw it raised may have been missed, or may sit in a word the tree
 * now also covers: the caller redoes it under the lock, which settles
 * both (a mark absorbs the word, an unmark clears word and range and
 * answers from them).
 */
static inline int pw_fast_mark_cost(struct pw_hdr *h, uint32_t n, uint64_t i,
				    int32_t prio, uint64_t seq, uint32_t cost)
{
#if PW_LOCK_FREE
	const uint64_t nt = pw_tag(prio, PW_RT_VOLATILE, cost);
	struct pw_word *w;
	uint64_t *tag, ot;

	if (!pw_have_cas16 || i >= n || !cost || cost > PW_COST_MAX ||
	    pw_fast_is_off(h))
		return 0;
	w = pw_words_of(h, n) + pw_slot(i, n);
	tag = pw_tag_at(w);
	ot = __atomic_load_n(tag, __ATOMIC_RELAXED);
	if (!ot && plain_marks_on()) {
		if (pw_plain_mark(h, w, tag, seq, nt))
			goto marked;
		ot = __atomic_load_n(tag, __ATOMIC_RELAXED); /* changed since? */
	}
	/* Counted before the word turns volatile (and uncounted after it
	 * turns back): a thread killed in between leaves the count high -
	 * a scan for nothing - never low, which would hide the page from
	 * purges (pw_oldest trusts a count of 0).  The swap's tag alone
	 * (pw_word_cas); a failed swap leaves the tag it found in ot. */
	for (;;) {
		uint32_t st = pw_tag_state(ot);

		if (st != 0 && st != PW_RT_VOLATILE)
			return 0; /* purged (stays so) or garbage: the lock */
		if (!st)
			pw_count_fast(h, 1);
		PW_TEST_HOOK(PW_BEFORE_SWAP);
		__atomic_store_n(&w->seq, seq, __ATOMIC_RELAXED);
		if (__atomic_compare_exchange_n(tag, &ot, nt, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			break;
		if (!st)
			pw_count_fast(h, -1);
	}
marked:
	pw_note_unordered(h);
	PW_TEST_HOOK(PW_AFTER_SWAP);
	return !pw_fast_is_off(h);
#else
	(void)h, (void)n, (void)i, (void)prio, (void)seq, (void)cost;
	return 0;
#endif
}

static inline int pw_fast_mark(struct pw_hdr *h, uint32_t n, uint64_t i,
			       int32_t prio, uint64_t seq)
{
	return pw_fast_mark_cost(h, n, i, prio, seq, 1);
}

static inline int pw_fast_clear(struct pw_hdr *h, uint32_t n, uint64_t i)
{
#if PW_LOCK_FREE
	uint64_t *tag, ot;

	if (!pw_have_cas16 || i >= n || pw_fast_is_off(h))
		return 0;
	tag = pw_tag_at(pw_words_of(h, n) + pw_slot(i, n));
	ot = __atomic_load_n(tag, __ATOMIC_RELAXED);
	do {
		if (pw_tag_state(ot) != PW_RT_VOLATILE)
			return 0; /* purged: the lock unpoisons and says so */
		PW_TEST_HOOK(PW_BEFORE_SWAP);
	} while (!__atomic_compare_exchange_n(tag, &ot, 0, false, __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	pw_count_fast(h, -1);
	PW_TEST_HOOK(PW_AFTER_SWAP);
	return !pw_fast_is_off(h);
#else
	(void)h, (void)n, (void)i;
	return 0;
#endif
}

#endif
