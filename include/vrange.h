/* SPDX-License-Identifier: MIT */
/**
 * @file vrange.h
 * libvrange - volatile ranges for Linux programs, in userspace.
 *
 * Memory an application marks "volatile" may be discarded by the library when
 * memory runs short; marking it "non-volatile" again tells whether anything
 * was discarded meanwhile.  The manual is the contract: libvrange(7) for the
 * concepts and the conventions every function follows (-errno results, page
 * rounding, thread safety), and a page per function, named after it
 * (man/ in the source tree).  Comments here only say what each one is.
 */
#ifndef VRANGE_H
#define VRANGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** mark_nonvolatile result: non-volatile again, every byte as it was left. */
#define VRANGE_INTACT 0
/** mark_nonvolatile result: at least one page was discarded while volatile. */
#define VRANGE_PURGED 1

/** vrange() mode: mark volatile, as in the proposed syscall. */
#define VRANGE_VOLATILE 0
/** vrange() mode: mark non-volatile, as in the proposed syscall. */
#define VRANGE_NONVOLATILE 1

/** The library's version, "MAJOR.MINOR.PATCH".  See vrange_version(3). */
const char *vrange_version(void);

/* ------------------------------------------------------------------------ */
/** @defgroup file File layer: volatile ranges on a shared-memory file, or
 * on a regular file of a file system that punches holes (ext4, xfs, btrfs)
 * State belongs to the file, shared by every fd and mapping of it.
 * See vrange_fd_mark_volatile(3), vrange_purge_disk(3).
 * @{ */

/** Mark the whole pages inside [off, off + len) volatile.  See
 * vrange_fd_mark_volatile(3). */
int vrange_fd_mark_volatile(int fd, off_t off, off_t len);

/** Make [off, off + len) non-volatile: VRANGE_INTACT or VRANGE_PURGED.  See
 * vrange_fd_mark_nonvolatile(3). */
int vrange_fd_mark_nonvolatile(int fd, off_t off, off_t len);

/** 1 if any page touching [off, off + len) is volatile, else 0.  See
 * vrange_fd_is_volatile(3). */
int vrange_fd_is_volatile(int fd, off_t off, off_t len);

/** Drop all state this process keeps for the file.  See vrange_fd_forget(3). */
int vrange_fd_forget(int fd);

/** Free space to keep on @p path's file system while it holds volatile
 * disk ranges: 0 = the default (the smaller of 5% and 1 GiB), UINT64_MAX =
 * never punch for space.  0, -EINVAL (NULL path), -ENOENT and the other
 * errors of stat(2), -ENOMEM (more than 32 file systems).  Thread-safe.
 * See vrange_set_disk_reserve(3). */
int vrange_set_disk_reserve(const char *path, uint64_t bytes);

/** Punch volatile ranges of disk files on @p path's file system, oldest
 * first, until at least @p bytes of space were freed or none is left
 * (SIZE_MAX = all): the bytes of space freed (st_blocks), or -EINVAL (NULL
 * path) and the errors of stat(2).  Thread-safe.  See vrange_purge_disk(3). */
ssize_t vrange_purge_disk(const char *path, size_t bytes);

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup region Region layer: memfd regions the library maps
 * See vrange_region_create(3), vrange_mark_volatile(3), vrange(3).
 * @{ */

/** Opaque handle of a region: a memfd mapped shared, read-write. */
typedef struct vrange_region vrange_region;

/** Purged volatile pages read as zeros (ashmem's behaviour). */
#define VRANGE_ACCESS_ZERO (1u << 0)
/** Touching a purged volatile page raises SIGBUS with si_addr inside it. */
#define VRANGE_ACCESS_SIGBUS (1u << 1)
/* neither flag: SIGBUS where userfaultfd is usable here, else ZERO */

/** Create a region: a memfd of @p size bytes, mapped shared.  See
 * vrange_region_create(3). */
int vrange_region_create(const char *name, size_t size, unsigned int flags,
			 vrange_region **out);

/** Map a shared-memory fd as a region.  See vrange_region_adopt(3). */
int vrange_region_adopt(int fd, unsigned int flags, vrange_region **out);

/** Unmap and close a region; NULL is a no-op.  See vrange_region_destroy(3). */
int vrange_region_destroy(vrange_region *r);

/** The region's mapping.  See vrange_region_base(3). */
void *vrange_region_base(const vrange_region *r);

/** The region's size in bytes.  See vrange_region_size(3). */
size_t vrange_region_size(const vrange_region *r);

/** The region's memfd, owned by the region; its first call makes the
 * region's state shareable (-errno if it cannot: -ENOSPC when the file
 * system has no room for the attribute naming that state; the region
 * keeps working and a later call tries again).  See vrange_region_fd(3). */
int vrange_region_fd(const vrange_region *r);

/** The access mode in force.  See vrange_region_access(3). */
unsigned int vrange_region_access(const vrange_region *r);

/** Purge priority of pages marked from now on (lower goes first).  See
 * vrange_region_set_priority(3). */
int vrange_region_set_priority(vrange_region *r, int priority);

/** Mark the whole pages inside [off, off + len) volatile, at the region's
 * cost (vrange_region_set_cost(), default 1).  See vrange_mark_volatile(3). */
int vrange_mark_volatile(vrange_region *r, size_t off, size_t len);

/** The same with @p cost, the relative cost of re-creating one page (1 =
 * the default; 0 is -EINVAL).  Within a priority a dearer range outlives
 * cheaper ones marked at the same time, but not forever.  See
 * vrange_mark_volatile(3). */
int vrange_mark_volatile_cost(vrange_region *r, size_t off, size_t len,
			      uint32_t cost);

/** The cost of the region's later plain marks (vrange_mark_volatile(),
 * vrange() on it); 0 is -EINVAL.  See vrange_region_set_cost(3). */
int vrange_region_set_cost(vrange_region *r, uint32_t cost);

/** Make [off, off + len) non-volatile: VRANGE_INTACT or VRANGE_PURGED.  See
 * vrange_mark_nonvolatile(3). */
int vrange_mark_nonvolatile(vrange_region *r, size_t off, size_t len);

/** 1 if any page touching [off, off + len) is volatile, else 0.  See
 * vrange_is_volatile(3). */
int vrange_is_volatile(vrange_region *r, size_t off, size_t len);

/** The address form, on regions and on memory the library did not create.
 * See vrange(3). */
int vrange(void *addr, size_t len, int mode, int *purged);

/** Refill callback: fill @p buf with the region's contents at @p off.  See
 * vrange_region_set_refill(3). */
typedef int (*vrange_refill_fn)(vrange_region *r, size_t off, void *buf,
				size_t len, void *arg);

/** Set (or, fn NULL, remove) the refill callback.  See
 * vrange_region_set_refill(3). */
int vrange_region_set_refill(vrange_region *r, vrange_refill_fn fn, void *arg);

/*
 * The inline fast path (docs/abi.md, "The inline fast path").  A mark or
 * unmark of one whole page of a region - the pair a page cache makes on
 * every fetch - runs here, in the caller, with no call into the library,
 * where the page's state word is all there is to it: one compare-and-swap
 * of the word, as the library's own lock-free path does.  Everything else
 * (more or less than a page, a page the library must lock for, a purged
 * page, a region whose head does not carry VRANGE_INLINE_ABI) takes the
 * call, which checks the arguments and does it all.  Define
 * VRANGE_NO_INLINE before including this header for the call alone.
 *
 * What the structs below describe is library memory the inline code reads
 * and writes: their layout is ABI and only VRANGE_INLINE_ABI names it.  A
 * library with another layout leaves that value out of its regions' heads,
 * and code built against this header then takes the call.  Nothing here is
 * for a program to touch.
 */

/** The layout the inline fast path of this header knows ("vrI2"). */
#define VRANGE_INLINE_ABI 0x32497276u

/** A page's state word: its tag (prio, state, cost: the last 8 bytes)
 * changes by one 8-byte compare-and-swap; seq is the age of a volatile
 * word, stored just before the swap that makes it volatile. */
struct vrange_inline_word {
	uint64_t seq;     /**< age (nanoseconds of the mark clock) if volatile */
	int32_t prio;     /**< purge priority if volatile */
	uint16_t state;   /**< 0 none, 1 volatile, 2 purged */
	uint16_t cost;    /**< cost (1..65535) if volatile, else 0 */
};

/** Lock-free counts of volatile words: stripe k (1..3) is written by the
 * one thread whose token is in owner[k], stripe 0 by atomic add. */
struct vrange_inline_stripe {
	int64_t vol;      /**< words made volatile minus those made not */
	int64_t busy;     /**< the owner's plain marks under way */
	char pad[112];    /**< the library's; a line pair each */
};

/** The header of a file's page words: the words lie right before it, in
 * slot order (npages x 16 bytes, then npages x 16 more of the library's),
 * with the four stripes of counts. */
struct vrange_inline_words {
	uint32_t magic;          /**< the library's */
	uint32_t npages;         /**< the library's (the region's is trusted) */
	uint64_t nvol, npurged;  /**< the library's counts, under its lock */
	uint32_t ord_len, ord_pos, ord_nlog; /**< the library's */
	uint32_t ord_built;      /**< 1: a mark not in the order sets ord_stale */
	uint32_t ord_stale;      /**< set by such a mark (once) */
	uint32_t ord_all;        /**< the library's */
	uint32_t fast_off;       /**< 1: no lock-free change; take the call */
	uint32_t ord_costly;     /**< the library's */
	uint64_t ord_unit;       /**< the library's */
	uint64_t owner[4];       /**< stripe k's owner thread token, or 0 */
	uint32_t plain;          /**< 1: a mark may be plain (no locked
				  *   instruction) where the library says so */
	char pad[28];            /**< to 128 bytes */
	struct vrange_inline_stripe stripe[4]; /**< the lock-free counts */
};

/** Where a file's page words are now (the library's view of them): a
 * move is seen whole, since the words are found from the header. */
struct vrange_inline_pw {
	struct vrange_inline_words *hdr; /**< the header, loaded with acquire */
	struct vrange_inline_word *words; /**< the library's; not read inline */
	void *order;                     /**< the library's */
	uint32_t npages;                 /**< 0: no words (take the call) */
};

struct vrange_inline_hit;

/** struct timespec as Linux on x86-64 lays it out (the header needs no
 * feature macro for it). */
struct vrange_inline_ts {
	int64_t sec;
	int64_t nsec;
};

/** CLOCK_MONOTONIC_COARSE of Linux. */
#define VRANGE_INLINE_CLOCK 6

/** The mark clock's line: the barrier floor, and the coarse time the
 * library's ticker (its monitor thread) keeps while marks are made, so
 * that a mark need not read the clock. */
struct vrange_inline_clock {
	uint64_t floor;  /**< every age is above it */
	uint64_t now;    /**< VRANGE_INLINE_CLOCK's time at the last tick */
	uint32_t state;  /**< VRANGE_INLINE_TICK_* */
	uint32_t pad;
};

/** No ticker: a mark reads the clock. */
#define VRANGE_INLINE_TICK_SELF 0
/** The ticker sleeps: a mark takes the call, which wakes it. */
#define VRANGE_INLINE_TICK_IDLE 1
/** Ticking: a mark takes now. */
#define VRANGE_INLINE_TICK_MARKED 2
/** Ticking, no mark since the last tick: a mark makes it MARKED first. */
#define VRANGE_INLINE_TICK_ARMED 3

/** What the inline path needs of the library as a whole. */
struct vrange_inline_lib {
	uint32_t abi;        /**< VRANGE_INLINE_ABI, else vrange() takes the call */
	/** Nonzero: this process's marks may be plain - a word in no state
	 * turned volatile by plain stores inside the stripe's busy count,
	 * which the library's purges wait for (0 in libraries before it). */
	uint32_t plain;
	/** clock_gettime(2), the vDSO's where the library found it: the
	 * ages are of VRANGE_INLINE_CLOCK */
	int (*clock_gettime)(int, struct vrange_inline_ts *);
	struct vrange_inline_clock *clock_line; /**< the floor and the tick */
	const unsigned char *want_mark;  /**< nonzero: a mark takes the call */
	const uint32_t *table_ver;       /**< the region table's version */
	/** The calling thread's blocks, as offsets from its thread pointer
	 * (initial-exec TLS: the same for every thread). */
	intptr_t tls_seq;    /**< uint64_t: its last age */
	intptr_t tls_token;  /**< uint64_t: its token, 0 none yet */
	intptr_t tls_stripe; /**< uint32_t: the stripe it last counted in */
	intptr_t tls_hit;    /**< struct vrange_inline_hit: its last vrange() region */
	/** NULL, never read: the type tls_hit leads to, named here so that
	 * the library's ABI record (docs/abi.md) holds every layout. */
	const struct vrange_inline_hit *hit_type;
};

/** The head of every region handle: a vrange_region pointer points at one. */
struct vrange_region_inline {
	uint32_t abi;        /**< VRANGE_INLINE_ABI, else take the call */
	uint32_t page_shift; /**< log2 of the page size */
	uint64_t size;       /**< the region's size in bytes */
	const struct vrange_inline_pw *pw; /**< the file's page words */
	int32_t prio;        /**< vrange_region_set_priority() */
	uint32_t cost;       /**< vrange_region_set_cost(), 0 = 1 */
	/** A copy of vrange_inline_lib()'s: one load less on the way. */
	struct vrange_inline_lib lib;
};

/** A thread's last region found by vrange(): valid while gen is even and
 * ver is the table's version. */
struct vrange_inline_hit {
	uint32_t gen, ver;
	char *base;
	size_t size;
	struct vrange_region_inline *r;
};

/** What the inline fast path of vrange() reads of the library (filled when
 * the library is loaded: async-signal-safe); its abi is VRANGE_INLINE_ABI
 * where the path runs.  See vrange_mark_volatile(3). */
const struct vrange_inline_lib *vrange_inline_lib(void);

#if defined(__x86_64__) && !defined(__ILP32__) && defined(__GNUC__) && \
	!defined(VRANGE_NO_INLINE) && !defined(VRANGE_BUILDING_LIBRARY)
#define VRANGE_INLINE 1

/* Tests only: VRANGE_INLINE_TEST_HOOK(where) runs between the first look
 * at fast_off and the swap (0) and between the swap and the second look (1). */
#ifndef VRANGE_INLINE_TEST_HOOK
#define VRANGE_INLINE_TEST_HOOK(where) ((void)0)
#endif

#define __VRANGE_ALWAYS_INLINE __attribute__((always_inline)) static inline

static inline char *__vrange_tp(void)
{
	char *tp;

	__asm__("mov %%fs:0, %0" : "=r"(tp));
	return tp;
}

/* One whole page of a region whose head carries this header's layout. */
static inline int __vrange_one_page(const struct vrange_region_inline *h,
				   size_t off, size_t len)
{
	return h && __atomic_load_n(&h->abi, __ATOMIC_RELAXED) == VRANGE_INLINE_ABI &&
	       len == (size_t)1 << h->page_shift && !(off & (len - 1)) &&
	       off < h->size;
}

/* The words' header with lock-free changes on, page i's word, and this
 * thread's stripe there; NULL: take the call. */
static inline struct vrange_inline_words *
__vrange_word(const struct vrange_region_inline *h, uint64_t i, char *tp,
	     struct vrange_inline_word **w, int64_t **cnt)
{
	const struct vrange_inline_lib *lib = &h->lib;
	uint32_t n = __atomic_load_n(&h->pw->npages, __ATOMIC_RELAXED), k;
	struct vrange_inline_words *hd;
	uint64_t me, slot;

	if (i >= n)
		return NULL;
	hd = __atomic_load_n(&h->pw->hdr, __ATOMIC_ACQUIRE);
	if (!hd || __atomic_load_n(&hd->fast_off, __ATOMIC_SEQ_CST))
		return NULL;
	/* The stripe this thread owns.  None: the call claims one if one is
	 * free; else the shared stripe 0, by atomic add. */
	me = *(uint64_t *)(void *)(tp + lib->tls_token);
	k = *(uint32_t *)(void *)(tp + lib->tls_stripe);
	if (!me)
		return NULL;
	if (k - 1 >= 3 || __atomic_load_n(&hd->owner[k], __ATOMIC_RELAXED) != me) {
		for (k = 1; k < 4; k++) {
			uint64_t o = __atomic_load_n(&hd->owner[k], __ATOMIC_RELAXED);

			if (o == me)
				break;
			if (!o)
				return NULL;
		}
		k &= 3;
		*(uint32_t *)(void *)(tp + lib->tls_stripe) = k;
	}
	*cnt = &hd->stripe[k].vol;
	/* Pages of each whole block of 64 spread over its eight line pairs. */
	slot = i >= (n & ~63u) ? i : (i & ~63ull) | (i & 7) << 3 | (i >> 3 & 7);
	*w = (struct vrange_inline_word *)(void *)((char *)hd - 32 * (size_t)n) + slot;
	return hd;
}

/* A plain add where nobody else writes the stripe; in stripe 0, an atomic
 * one. */
__VRANGE_ALWAYS_INLINE void __vrange_count(struct vrange_inline_words *hd, int64_t *cnt,
				 int64_t d)
{
	if (__builtin_expect(cnt != &hd->stripe[0].vol, 1))
		__atomic_store_n(cnt, __atomic_load_n(cnt, __ATOMIC_RELAXED) + d,
				 __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(cnt, d, __ATOMIC_RELAXED);
}

/* The tag of a word this region's mark makes volatile at cost (0: 1):
 * {prio, state 1, cost}, as the swaps write and expect it. */
__VRANGE_ALWAYS_INLINE uint64_t __vrange_volatile_tag(const struct vrange_region_inline *h,
						   uint32_t cost)
{
	return (uint64_t)(uint32_t)__atomic_load_n(&h->prio, __ATOMIC_RELAXED) |
	       1ull << 32 | (uint64_t)(cost ? cost : 1) << 48;
}

/* The time a mark's age starts from, as the library's own stamp takes it
 * (mark_clock.h): the tick's while the library's ticker runs - no clock
 * read - else the clock's, and the clock's on every 256th mark of a thread
 * in any case.  0: the ticker sleeps; take the call, which wakes it. */
__VRANGE_ALWAYS_INLINE int __vrange_mark_time(const struct vrange_inline_lib *lib,
					       uint64_t last, uint64_t *now)
{
	struct vrange_inline_clock *ck = lib->clock_line;
	uint32_t st = __atomic_load_n(&ck->state, __ATOMIC_RELAXED);
	struct vrange_inline_ts ts;

	if (st == VRANGE_INLINE_TICK_ARMED &&
	    __atomic_compare_exchange_n(&ck->state, &st, VRANGE_INLINE_TICK_MARKED, 0,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		st = VRANGE_INLINE_TICK_MARKED;
	if (__builtin_expect(st == VRANGE_INLINE_TICK_MARKED && (last & 255) != 255, 1)) {
		*now = __atomic_load_n(&ck->now, __ATOMIC_RELAXED);
		return 1;
	}
	if (st == VRANGE_INLINE_TICK_IDLE ||
	    lib->clock_gettime(VRANGE_INLINE_CLOCK, &ts) != 0)
		return 0;
	*now = (uint64_t)ts.sec * 1000000000u + (uint64_t)ts.nsec;
	return 1;
}

/* The plain mark, the library's pw_plain_mark: a word in no state made
 * volatile by plain stores - no locked instruction - where this process
 * and the area allow it and the thread counts in a stripe of its own,
 * inside that stripe's busy count, which a purge waits for before it
 * swaps a word to purged (docs/design.md, "The plain mark").  Counted
 * before the word turns volatile.  0: not done (take the swap). */
__VRANGE_ALWAYS_INLINE int __vrange_plain_mark(const struct vrange_region_inline *h,
					       struct vrange_inline_words *hd, int64_t *cnt,
					       struct vrange_inline_word *w, uint64_t now,
					       uint64_t nt)
{
	uint64_t *tag = (uint64_t *)(void *)&w->prio;
	int64_t *busy;
	int done = 0;

	if (!__atomic_load_n(&h->lib.plain, __ATOMIC_RELAXED) || cnt == &hd->stripe[0].vol)
		return 0;
	busy = &((struct vrange_inline_stripe *)(void *)cnt)->busy;
	/* A signal handler's mark in between puts busy back as it found it. */
	__atomic_store_n(busy, __atomic_load_n(busy, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&hd->plain, __ATOMIC_RELAXED) &&
	    !__atomic_load_n(tag, __ATOMIC_RELAXED)) {
		__atomic_store_n(cnt, __atomic_load_n(cnt, __ATOMIC_RELAXED) + 1,
				 __ATOMIC_RELAXED);
		VRANGE_INLINE_TEST_HOOK(0);
		__atomic_store_n(&w->seq, now, __ATOMIC_RELAXED);
		__atomic_store_n(tag, nt, __ATOMIC_RELAXED);
		done = 1;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(busy, __atomic_load_n(busy, __ATOMIC_RELAXED) - 1, __ATOMIC_RELAXED);
	return done;
}

/* The mark of one page at cost c (0: the region's): 1 done, 0 take the
 * call (which may redo it). */
__VRANGE_ALWAYS_INLINE int __vrange_try_mark(struct vrange_region_inline *h, size_t off,
				   size_t len, uint32_t c)
{
	const struct vrange_inline_lib *lib;
	struct vrange_inline_words *hd;
	struct vrange_inline_word *w;
	uint64_t now, floor, last, nt, ot, *tag, *age;
	int64_t *cnt;
	uint32_t cost, st;
	char *tp;

	if (!__vrange_one_page(h, off, len))
		return 0;
	lib = &h->lib;
	tp = __vrange_tp();
	age = (uint64_t *)(void *)(tp + lib->tls_seq);
	last = *age;
	if (!__vrange_mark_time(lib, last, &now))
		return 0;
	hd = __vrange_word(h, off >> h->page_shift, tp, &w, &cnt);
	cost = c ? c : __atomic_load_n(&h->cost, __ATOMIC_RELAXED);
	if (!hd || cost > 0xffffu)
		return 0;
	/* The age: later than the last barrier and than this thread's last. */
	floor = __atomic_load_n(&lib->clock_line->floor, __ATOMIC_ACQUIRE);
	if (now <= floor)
		now = floor + 1;
	*age = now = now > last ? now : last + 1;
	nt = __vrange_volatile_tag(h, cost);
	tag = (uint64_t *)(void *)&w->prio;
	/* The swap expects a word in no state, the pair's case, instead of
	 * reading it first: a load of the line the last swap wrote would put
	 * the two swaps of a pair in one chain.  A failed swap says what is
	 * there.  Counted before the word turns volatile: a thread killed in
	 * between leaves the count high (a scan for nothing), never low. */
	ot = 0;
	if (__vrange_plain_mark(h, hd, cnt, w, now, nt))
		goto marked;
	for (;;) {
		st = (uint32_t)(ot >> 32) & 0xffffu;
		if (st > 1)
			return 0; /* purged: the call, under the lock */
		if (!st)
			__vrange_count(hd, cnt, 1);
		VRANGE_INLINE_TEST_HOOK(0);
		__atomic_store_n(&w->seq, now, __ATOMIC_RELAXED);
		if (__atomic_compare_exchange_n(tag, &ot, nt, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			break;
		if (!st)
			__vrange_count(hd, cnt, -1);
	}
marked:
	if (__atomic_load_n(&hd->ord_built, __ATOMIC_SEQ_CST) &&
	    !__atomic_load_n(&hd->ord_stale, __ATOMIC_RELAXED))
		__atomic_store_n(&hd->ord_stale, 1, __ATOMIC_RELAXED);
	VRANGE_INLINE_TEST_HOOK(1);
	/* Lock-free changes turned off meanwhile, or the pressure monitor
	 * waiting for a mark: the call marks again and does the rest. */
	return !__atomic_load_n(&hd->fast_off, __ATOMIC_SEQ_CST) &&
	       !__atomic_load_n(lib->want_mark, __ATOMIC_RELAXED);
}

/* The unmark of one page: 1 it was volatile and never purged (INTACT),
 * 0 take the call (which may redo it). */
__VRANGE_ALWAYS_INLINE int __vrange_try_unmark(struct vrange_region_inline *h, size_t off,
				     size_t len)
{
	struct vrange_inline_words *hd;
	struct vrange_inline_word *w;
	uint64_t ot, *tag;
	int64_t *cnt;

	if (!__vrange_one_page(h, off, len))
		return 0;
	hd = __vrange_word(h, off >> h->page_shift, __vrange_tp(), &w, &cnt);
	if (!hd)
		return 0;
	tag = (uint64_t *)(void *)&w->prio;
	/* Expected: the word this region's mark makes (no load first, as in
	 * the mark); a failed swap says what is there. */
	ot = __vrange_volatile_tag(h, __atomic_load_n(&h->cost, __ATOMIC_RELAXED));
	for (;;) {
		VRANGE_INLINE_TEST_HOOK(0);
		if (__atomic_compare_exchange_n(tag, &ot, 0, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			break;
		if (((ot >> 32) & 0xffffu) != 1)
			return 0; /* purged, or not volatile: the call says */
	}
	__vrange_count(hd, cnt, -1);
	VRANGE_INLINE_TEST_HOOK(1);
	return !__atomic_load_n(&hd->fast_off, __ATOMIC_SEQ_CST);
}

/* What vrange() needs of the library's part, asked once per file that
 * includes this header: the offset of the thread's last hit (never 0
 * once known: TLS lies below the thread pointer) and the table version's
 * address.  A copy here spares a dependent load on the way to the word. */
static intptr_t __vrange_hit_off __attribute__((unused));
static const uint32_t *__vrange_table_ver __attribute__((unused));

/* The region holding [addr, addr + len) as this thread's last vrange()
 * found it, if the region table has not changed since (a lookup
 * linearized at the version's load: the library's own vrange() does the
 * same); NULL: take the call. */
static inline struct vrange_region_inline *__vrange_hit(void *addr, size_t len,
							 size_t *off)
{
	intptr_t at = __atomic_load_n(&__vrange_hit_off, __ATOMIC_ACQUIRE);
	const struct vrange_inline_hit *hit;
	struct vrange_inline_hit e;
	uint32_t g;
	size_t o;

	if (__builtin_expect(!at, 0)) {
		const struct vrange_inline_lib *lib = vrange_inline_lib();

		if (__atomic_load_n(&lib->abi, __ATOMIC_RELAXED) != VRANGE_INLINE_ABI ||
		    !lib->tls_hit)
			return 0;
		at = lib->tls_hit;
		__atomic_store_n(&__vrange_table_ver, lib->table_ver, __ATOMIC_RELAXED);
		__atomic_store_n(&__vrange_hit_off, at, __ATOMIC_RELEASE);
	}
	hit = (const struct vrange_inline_hit *)(void *)(__vrange_tp() + at);
	/* gen odd: this thread rewrites it (we run in a signal handler). */
	g = hit->gen;
	__atomic_signal_fence(__ATOMIC_ACQUIRE);
	e = *hit;
	__atomic_signal_fence(__ATOMIC_ACQUIRE);
	if ((g & 1) || !e.r || hit->gen != g ||
	    __atomic_load_n(__atomic_load_n(&__vrange_table_ver, __ATOMIC_RELAXED),
			    __ATOMIC_ACQUIRE) != e.ver)
		return 0;
	o = (size_t)((char *)addr - e.base);
	if (o >= e.size || len > e.size - o)
		return 0;
	*off = o;
	return e.r;
}

__VRANGE_ALWAYS_INLINE int __vrange_vrange(void *addr, size_t len, int mode,
					    int *purged)
{
	struct vrange_region_inline *r;
	size_t off;

	if (len && addr && (mode == VRANGE_VOLATILE || mode == VRANGE_NONVOLATILE) &&
	    (r = __vrange_hit(addr, len, &off)) != 0) {
		if (mode == VRANGE_VOLATILE) {
			if (__vrange_try_mark(r, off, len, 0))
				return 0;
		} else if (__vrange_try_unmark(r, off, len)) {
			if (purged)
				*purged = 0;
			return 0;
		}
	}
	return (vrange)(addr, len, mode, purged);
}

__VRANGE_ALWAYS_INLINE int __vrange_mark_volatile(vrange_region *r, size_t off,
						   size_t len)
{
	return __vrange_try_mark((struct vrange_region_inline *)(void *)r, off, len, 0) ?
		0 : (vrange_mark_volatile)(r, off, len);
}

__VRANGE_ALWAYS_INLINE int __vrange_mark_volatile_cost(vrange_region *r, size_t off,
						       size_t len, uint32_t cost)
{
	/* A cost of 0 is the call's -EINVAL. */
	return cost && __vrange_try_mark((struct vrange_region_inline *)(void *)r,
					 off, len, cost) ?
		0 : (vrange_mark_volatile_cost)(r, off, len, cost);
}

__VRANGE_ALWAYS_INLINE int __vrange_mark_nonvolatile(vrange_region *r, size_t off,
						      size_t len)
{
	return __vrange_try_unmark((struct vrange_region_inline *)(void *)r, off, len) ?
		VRANGE_INTACT : (vrange_mark_nonvolatile)(r, off, len);
}

/* The calls above, inline where they can be (VRANGE_NO_INLINE: never). */
#define vrange_mark_volatile(r, off, len) __vrange_mark_volatile(r, off, len)
#define vrange_mark_volatile_cost(r, off, len, cost) \
	__vrange_mark_volatile_cost(r, off, len, cost)
#define vrange_mark_nonvolatile(r, off, len) __vrange_mark_nonvolatile(r, off, len)
#define vrange(addr, len, mode, purged) __vrange_vrange(addr, len, mode, purged)
#endif /* VRANGE_INLINE */

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup purge Purging, memory pressure, budget
 * See vrange_purge(3), vrange_monitor_start(3), vrange_get_stats(3).
 * @{ */

/** Discard volatile pages, oldest first, until @p bytes are freed.  See
 * vrange_purge(3). */
ssize_t vrange_purge(size_t bytes);

/** Discard every volatile page of one region.  See vrange_region_purge(3). */
ssize_t vrange_region_purge(vrange_region *r);

/** Options for vrange_monitor_start(); later versions append fields. */
struct vrange_monitor_opts {
	size_t struct_size;         /**< sizeof(struct vrange_monitor_opts) */
	unsigned int psi_stall_us;  /**< PSI "some" stall per window, us */
	unsigned int psi_window_us; /**< PSI window, us */
	unsigned int purge_percent; /**< share of volatile bytes freed per event */
	unsigned int flags;         /**< VRANGE_MONITOR_NO_* */
};

/** Do not arm PSI triggers. */
#define VRANGE_MONITOR_NO_PSI (1u << 0)
/** Do not watch cgroup limits or events. */
#define VRANGE_MONITOR_NO_CGROUP (1u << 1)

/** Start the pressure monitor thread.  See vrange_monitor_start(3). */
int vrange_monitor_start(const struct vrange_monitor_opts *opts);

/** Stop the monitor thread and wait for it.  See vrange_monitor_stop(3). */
int vrange_monitor_stop(void);

/** Cap the resident bytes of the library's files; 0 = none.  See
 * vrange_set_budget(3). */
int vrange_set_budget(size_t bytes);

/** Counters returned by vrange_get_stats(); later versions append fields
 * at the end only.  The library learns the caller's size from
 * vrange_get_stats_sized(), so a program built against an older header
 * gets the fields it knows and nothing past them. */
struct vrange_stats {
	uint64_t regions;             /**< live regions */
	uint64_t files;               /**< files with file-layer state */
	uint64_t volatile_bytes;      /**< now marked volatile */
	uint64_t purged_bytes;        /**< of those, now discarded */
	uint64_t purges;              /**< purge passes run */
	uint64_t purged_total;        /**< bytes discarded since start */
	uint64_t pressure_events;     /**< pressure notifications acted on */
	uint64_t refills;             /**< pages restored by refill callbacks */
	char pressure_source[32];     /**< the monitor's source, "none" if none */
	char access_fallback[32];     /**< "" or why SIGBUS mode is unavailable */
	uint64_t sigbus_fallbacks;    /**< SIGBUS-mode mappings known now that
				       *   the kernel would not arm: purged pages
				       *   read zeros there (read-only fd, the
				       *   application's own userfaultfd) */
	char sigbus_fallback[32];     /**< "" or why the last of them fell back */
	/* Contract 9, disk files (also counted in volatile_bytes/purged_bytes): */
	uint64_t disk_volatile_bytes; /**< of volatile_bytes, on disk files */
	uint64_t disk_purged_bytes;   /**< of those, now punched */
	uint64_t disk_purges;         /**< passes run for disk space */
	uint64_t disk_freed_total;    /**< disk space they gave back (st_blocks) */
	uint64_t disk_unpunchable;    /**< disk files that are never punched */
	char disk_unpunchable_why[64];/**< "" or why the last of them is not */
	/* Contract 10, issue 27 (appended after the disk fields): */
	uint64_t purged_cost;         /**< pages discarded since start, each
				       *   times its cost (vrange_mark_volatile_cost) */
	/* Issue 28 (appended after purged_cost): */
	char plain_marks_off[32];     /**< "" or why this process's marks take a
				       *   locked instruction (no plain marks) */
};

/** Fill the first @p size bytes of @p out (sizeof(struct vrange_stats) of
 * the caller's header) with the library's counters.  See
 * vrange_get_stats(3). */
int vrange_get_stats_sized(struct vrange_stats *out, size_t size);

/* The library defines the 0.1 entry point of this name itself (src/vrange.c),
 * so it must not see the inline. */
#ifndef VRANGE_BUILDING_LIBRARY
/** Fill @p out with the library's counters: vrange_get_stats_sized() with
 * the size of this header's struct.  See vrange_get_stats(3). */
static inline int vrange_get_stats(struct vrange_stats *out)
{
	return vrange_get_stats_sized(out, sizeof(*out));
}
#endif

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup cache Purgeable cache: key -> value on volatile memory
 * See vrange_cache_create(3), vrange_cache_get(3), vrange_cache_reserve(3).
 * @{ */

/** Opaque handle of a cache. */
typedef struct vrange_cache vrange_cache;

/** Options for vrange_cache_create(); later versions append fields. */
struct vrange_cache_opts {
	size_t struct_size;  /**< sizeof(struct vrange_cache_opts) */
	const char *name;    /**< names its memfds ("vrange-cache:<name>"), shown by
	                          vrangectl and in /proc; may be NULL */
	size_t max_bytes;    /**< cap on value bytes stored; 0 = none; over it the
	                          least recently used released entries are evicted */
	int priority;        /**< purge priority of its memory, as regions (default 0) */
	unsigned flags;      /**< 0 or VRANGE_CACHE_EAGER */
	uint32_t cost;       /**< re-creation cost of a page of its values, as
	                          vrange_mark_volatile_cost(); 0 = the default, 1
	                          (appended: a struct_size that ends before it
	                          means 1) */
};

/** Cache flag: volatile at the last release, not lazily; see vrange_cache_create(3). */
#define VRANGE_CACHE_EAGER (1u << 0)

/** Create an empty cache; opts NULL for the defaults.  See
 * vrange_cache_create(3). */
int vrange_cache_create(const struct vrange_cache_opts *opts, vrange_cache **out);

/** Free a cache and every entry; -EBUSY while a value is held or reserved.
 * See vrange_cache_destroy(3). */
int vrange_cache_destroy(vrange_cache *c);

/** Copy a value in under a key, replacing its entry; starts released.  See
 * vrange_cache_put(3). */
int vrange_cache_put(vrange_cache *c, const void *key, size_t klen,
		     const void *val, size_t vlen);

/** vrange_cache_put() with the value's own re-creation cost (0 is
 * -EINVAL; values sharing a page are purged at the dearest cost put on
 * it).  See vrange_cache_put(3). */
int vrange_cache_put_cost(vrange_cache *c, const void *key, size_t klen,
			  const void *val, size_t vlen, uint32_t cost);

/** Look a key up and hold its value until released; -ENOENT on a miss.
 * See vrange_cache_get(3). */
int vrange_cache_get(vrange_cache *c, const void *key, size_t klen,
		     const void **val, size_t *vlen);

/** End one hold of a value vrange_cache_get() returned.  See
 * vrange_cache_release(3). */
int vrange_cache_release(vrange_cache *c, const void *val);

/** Remove a key's entry; a held value stays valid until released.  See
 * vrange_cache_remove(3). */
int vrange_cache_remove(vrange_cache *c, const void *key, size_t klen);

/** Reserve a held buffer in the cache to fill a value in place.  See
 * vrange_cache_reserve(3). */
int vrange_cache_reserve(vrange_cache *c, const void *key, size_t klen,
			 size_t vlen, void **buf);

/** Publish a reserved buffer as its key's value, as put would.  See
 * vrange_cache_commit(3). */
int vrange_cache_commit(vrange_cache *c, void *buf);

/** Drop a reservation unpublished.  See vrange_cache_abort(3). */
int vrange_cache_abort(vrange_cache *c, void *buf);

/** Counters returned by vrange_cache_get_stats(); later versions append. */
struct vrange_cache_stats {
	size_t struct_size;       /**< set by the caller: sizeof(struct vrange_cache_stats) */
	uint64_t entries;         /**< entries not yet found purged */
	uint64_t value_bytes;     /**< sum of their vlen */
	uint64_t resident_bytes;  /**< what the cache holds in memory now: its
				       pages in memory (values, free pages
				       kept) plus bookkeeping; a purge lowers it */
	uint64_t hits;            /**< gets that returned a value */
	uint64_t misses;          /**< gets that returned -ENOENT */
	uint64_t purged_entries;  /**< entries found purged (by get or the cache) */
	uint64_t evictions;       /**< entries evicted to keep under max_bytes */
	/* Since 0.2 (a smaller struct_size gets the fields above only): */
	uint64_t allocated_bytes; /**< pages given to entries' values, purged or
				       not, plus bookkeeping */
};

/** Read a cache's counters, as many as out->struct_size holds.  See
 * vrange_cache_get_stats(3). */
int vrange_cache_get_stats(vrange_cache *c, struct vrange_cache_stats *out);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* VRANGE_H */
