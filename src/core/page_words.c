/* SPDX-License-Identifier: MIT */
/*
 * page_words.c - a state word per page and the purge order over them
 * (see page_words.h).
 */
#include "page_words.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "range_tree.h"

_Static_assert(PW_RT_VOLATILE == RT_VOLATILE, "the fast path's state");

#if PW_LOCK_FREE
#include <cpuid.h>
bool pw_have_cas16;

__attribute__((constructor)) static void probe_cas16(void)
{
	unsigned int a, b, c, d;

	pw_have_cas16 = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_CMPXCHG16B);
}
#endif

#ifdef PW_TEST_HOOKS
void (*pw_test_hook)(int where);
#endif

/* "pwd6": plain marks (plain, a stripe's busy count), which every holder
 * of a pwd6 area fences against; a pwd5 area's holders would not.  (pwd5
 * brought stripes a thread owns: a pwd4 area, whose stripes any thread adds
 * to atomically, would lose counts to an owner's plain adds.) */
#define PW_MAGIC 0x36647770u

/* The aging unit (nanoseconds): 1 ms until the first purge measures it. */
#define PW_UNIT_START 1000000ull
static _Atomic uint64_t cost_unit = PW_UNIT_START;

uint64_t pw_cost_unit(void)
{
	return atomic_load_explicit(&cost_unit, memory_order_relaxed);
}

void pw_set_cost_unit(uint64_t unit)
{
	atomic_store_explicit(&cost_unit, unit ? unit : 1, memory_order_relaxed);
}

static struct pw_hdr *hdr_of(void *area, uint32_t npages)
{
	return (struct pw_hdr *)((char *)area + 32 * (size_t)npages);
}

static void view(struct pw *p, void *area, uint32_t npages)
{
	p->w = area;
	p->e = (struct pw_ent *)((char *)area + 16 * (size_t)npages);
	p->h = hdr_of(area, npages);
	p->n = npages;
}

void pw_format(struct pw *p, void *area, uint32_t npages)
{
	view(p, area, npages);
	/* The words of a zero-filled area are already "no state": a large
	 * region's metadata costs no page until its pages are marked. */
	memset(p->h, 0, PW_HDR_BYTES);
	p->h->magic = PW_MAGIC;
	p->h->npages = npages;
	p->h->plain = plain_fence_cheap();
}

int pw_attach(struct pw *p, void *area, uint32_t npages)
{
	struct pw_hdr *h = hdr_of(area, npages);

	if (h->magic != PW_MAGIC || h->npages != npages)
		return -EIO;
	view(p, area, npages);
	return 0;
}

uint32_t pw_peek_npages(const void *area_end_hdr)
{
	const struct pw_hdr *h = area_end_hdr;

	return h->magic == PW_MAGIC ? h->npages : 0;
}

static int64_t stripes_sum(const struct pw_hdr *h)
{
	const struct pw_stripe *st = pw_stripes_of(h);
	int64_t v = 0;

	for (uint32_t k = 0; k < PW_STRIPES; k++)
		v += __atomic_load_n(&st[k].vol, __ATOMIC_RELAXED);
	return v;
}

int64_t pw_peek_fast_vol(const void *area_end_hdr)
{
	const struct pw_hdr *h = area_end_hdr;

	return h->magic == PW_MAGIC ? stripes_sum(h) : 0;
}

uint64_t pw_vol(const struct pw *p)
{
	int64_t v = (int64_t)p->h->nvol + stripes_sum(p->h);

	return v > 0 ? (uint64_t)v : 0;
}

/* ------------------------------------------------------------------------ */
/* Changing a word                                                           */

/* A holder's store made before it reads words, against the plain marks
 * that may cross it: their stores are seen after the fence, or they see
 * the holder's store when they look again after theirs (and redo the mark
 * under the lock).  A locked swap needs nothing: it is a full barrier. */
static void fence_plain(const struct pw *p)
{
	if (__atomic_load_n(&p->h->plain, __ATOMIC_RELAXED))
		plain_fence();
}

void pw_fast_off(struct pw *p)
{
	/* Already raised: by a holder before us, whose store came first. */
	if (!__atomic_load_n(&p->h->fast_off, __ATOMIC_RELAXED)) {
		__atomic_store_n(&p->h->fast_off, 1, __ATOMIC_SEQ_CST);
		fence_plain(p);
	}
}

void pw_fast_on(struct pw *p)
{
	if (__atomic_load_n(&p->h->fast_off, __ATOMIC_RELAXED))
		__atomic_store_n(&p->h->fast_off, 0, __ATOMIC_RELEASE);
}

/* How long a purge waits for plain marks under way (a thread preempted in
 * the middle of one) before it leaves the area for later. */
#define PLAIN_WAIT_NS 20000000ull

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Plain marks nested in one thread (signal handlers) never come near. */
#define PLAIN_BUSY_MAX 64

/* Stripe k shows no plain mark under way; or shows one still after the
 * wait, of an owner that is gone: a mark that will never end (the busy
 * count is taken back from what was seen).  A count no owner can have
 * made (no owner, or not a nesting depth) is another process's scribble,
 * not a mark to wait for. */
static bool stripe_quiet(const struct pw_hdr *h, unsigned int k, bool waited)
{
	struct pw_stripe *st = pw_stripes_of(h) + k;
	int64_t b = __atomic_load_n(&st->busy, __ATOMIC_ACQUIRE);
	struct plain_owner o;

	if (b <= 0 || b > PLAIN_BUSY_MAX || !__atomic_load_n(&h->owner[k], __ATOMIC_RELAXED))
		return true;
	if (!waited)
		return false;
	o = st->proc;
	return plain_owner_gone(&o) == 1 &&
	       __atomic_compare_exchange_n(&st->busy, &b, 0, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
}

int pw_plain_stop(struct pw *p)
{
	uint64_t deadline = 0;
	bool waited = false;

	if (!p->n)
		return 0;
	if (__atomic_load_n(&p->h->plain, __ATOMIC_RELAXED)) {
		__atomic_store_n(&p->h->plain, 0, __ATOMIC_SEQ_CST);
		plain_fence();
	}
	/* Found off already, it was turned off and fenced by an earlier
	 * holder - which may have died before its wait: wait anyway. */
	for (unsigned int k = 1; k < PW_STRIPES; k++) {
		while (!stripe_quiet(p->h, k, waited)) {
			uint64_t now = mono_ns();

			if (!deadline)
				deadline = now + PLAIN_WAIT_NS;
			else if (now >= deadline && waited)
				return -EAGAIN;
			waited = now >= deadline;
			sched_yield();
		}
	}
	return 0;
}

void pw_plain_resume(struct pw *p)
{
	/* Whether or not this process marks plainly itself: others sharing
	 * the file may (a vrangectl purge must not leave them swapping). */
	if (p->n && plain_fence_cheap() && !__atomic_load_n(&p->h->plain, __ATOMIC_RELAXED))
		__atomic_store_n(&p->h->plain, 1, __ATOMIC_RELEASE);
}

#if PW_LOCK_FREE
/*
 * Stripes a thread owns.  Each thread has a token, (salt << 32) | slot:
 * the salt is random per process (drawn again in a fork child), the slot
 * unique among this process's live threads.  A thread's first lock-free
 * change in an area claims a free stripe there (owner[k], compare-and-swap
 * from 0 to its token) and from then on counts in it with a plain load and
 * store: nobody else writes that line.  No stripe free (three threads
 * already own one, in this process or others): stripe 0, by atomic add.
 * A thread that exits gives its slot, and so its token and every claim
 * made with it, to the next thread of this process (no write to areas that
 * may be gone by then); pw_release_stripes gives this process's claims in
 * an area back before the area is unmapped.  A process killed keeps its
 * claims: later threads count in the rest, or in stripe 0.
 */
__thread uint64_t pw_my_token __attribute__((tls_model("initial-exec")));
__thread unsigned int pw_my_stripe __attribute__((tls_model("initial-exec")));
static _Atomic uint64_t proc_salt;     /* the token's upper half, never 0 */
static _Atomic uint64_t slots_busy;    /* slots 0..63 in use by live threads */
static _Atomic uint32_t slots_next = 64; /* slots past 64, never reused */
static pthread_key_t slot_key;
static bool slot_key_ok;

static uint32_t draw_salt(uint32_t not)
{
	uint32_t s = 0;

	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != (ssize_t)sizeof(s)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		s = (uint32_t)getpid() * 2654435761u ^ (uint32_t)ts.tv_nsec;
	}
	return s && s != not ? s : (not + 1) | 1;
}

/* At thread exit: the slot goes back (the key's value is slot + 1). */
static void slot_put(void *v)
{
	uintptr_t slot = (uintptr_t)v - 1;

	if (slot < 64)
		atomic_fetch_and(&slots_busy, ~(1ull << slot));
}

/* This thread's token (lock-free: an unmark may run in a SIGBUS handler). */
static uint64_t token(void)
{
	uint64_t busy, slot;

	if (pw_my_token)
		return pw_my_token;
	busy = atomic_load(&slots_busy);
	for (;;) {
		if (busy == UINT64_MAX) {
			slot = atomic_fetch_add(&slots_next, 1);
			break;
		}
		slot = (uint64_t)__builtin_ctzll(~busy);
		if (atomic_compare_exchange_weak(&slots_busy, &busy,
						 busy | 1ull << slot))
			break;
	}
	if (slot_key_ok)
		pthread_setspecific(slot_key, (void *)(uintptr_t)(slot + 1));
	pw_my_token = atomic_load(&proc_salt) << 32 | (uint32_t)slot;
	return pw_my_token;
}

static void pw_fork_child(void)
{
	/* The parent's threads own the parent's claims: this process has
	 * a salt of its own, and its one thread a new token. */
	atomic_store(&proc_salt, draw_salt((uint32_t)atomic_load(&proc_salt)));
	atomic_store(&slots_busy, 0);
	atomic_store(&slots_next, 64);
	pw_my_token = 0;
	pw_my_stripe = 0;
	if (slot_key_ok)
		pthread_setspecific(slot_key, NULL);
}

__attribute__((constructor)) static void stripes_init(void)
{
	atomic_store(&proc_salt, draw_salt(0));
	slot_key_ok = pthread_key_create(&slot_key, slot_put) == 0;
	pthread_atfork(NULL, NULL, pw_fork_child);
}

/* A library unloaded: no thread's exit may call into it any more. */
__attribute__((destructor)) static void stripes_fini(void)
{
	if (slot_key_ok)
		pthread_key_delete(slot_key);
	slot_key_ok = false;
}

unsigned int pw_stripe_find(struct pw_hdr *h)
{
	uint64_t me = token();

	for (unsigned int k = 1; k < PW_STRIPES; k++)
		if (__atomic_load_n(&h->owner[k], __ATOMIC_RELAXED) == me)
			return pw_my_stripe = k;
	for (unsigned int k = 1; k < PW_STRIPES; k++) {
		uint64_t free_ = 0;

		/* Acquire: the count a former owner left is seen whole. */
		if (__atomic_compare_exchange_n(&h->owner[k], &free_, me, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			/* Before any plain mark of ours can make busy
			 * nonzero (stores stay in order). */
			plain_owner_self(&pw_stripes_of(h)[k].proc);
			return pw_my_stripe = k;
		}
	}
	return 0;
}

void pw_release_stripes(struct pw_hdr *h)
{
	uint64_t salt = atomic_load(&proc_salt);

	for (unsigned int k = 1; k < PW_STRIPES; k++) {
		uint64_t t = __atomic_load_n(&h->owner[k], __ATOMIC_RELAXED);

		/* Release: the next owner sees the count ours left. */
		if (t && t >> 32 == salt)
			__atomic_compare_exchange_n(&h->owner[k], &t, 0, false,
						    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
}
#else
void pw_release_stripes(struct pw_hdr *h)
{
	(void)h;
}
#endif

static inline uint64_t clip(const struct pw *p, uint64_t e)
{
	return e < p->n ? e : p->n;
}

static inline void count_was(struct pw_delta *d, uint32_t st)
{
	if (st == RT_VOLATILE)
		d->was_vol++;
	else if (st == RT_PURGED)
		d->was_purged++;
	else
		d->was_none++;
}

static inline bool bad_state(uint32_t st)
{
	return st > RT_PURGED;
}

/* Record that page i turned volatile with (prio, seq): an entry appended
 * to the order if there is one and room behind it, else the order is
 * marked stale.  Before the word changes: a holder that dies between the
 * two leaves at worst an entry the word does not confirm. */
static inline void log_mark(struct pw *p, uint64_t i, int32_t prio,
			    uint64_t seq, uint32_t cost)
{
	struct pw_hdr *h = p->h;
	uint32_t at = h->ord_len + h->ord_nlog;

	if (!h->ord_built || h->ord_stale)
		return;
	if (h->ord_len <= p->n && at < p->n) {
		if (pw_cost_cls(cost))
			h->ord_costly = 1;
		p->e[at] = (struct pw_ent){ .seq = pw_key(seq, cost, h->ord_unit),
					    .prio = prio, .page = (uint32_t)i };
		h->ord_nlog++;
	} else {
		h->ord_stale = 1;
	}
}

/* The counters of the header follow every word change at once, so a holder
 * that dies mid-operation leaves counts that do not add up (pw_check). */
int pw_mark(struct pw *p, uint64_t s, uint64_t e, int32_t prio, uint64_t seq,
	    uint32_t cost, struct pw_delta *d)
{
	const struct pw_word nw = { .seq = seq, .prio = prio, .state = RT_VOLATILE,
				    .cost = (uint16_t)cost };
	struct pw_hdr *h = p->h;

	if (e > p->n || !cost || cost > PW_COST_MAX)
		return -EIO;
	for (uint64_t i = s; i < e; i++) {
		struct pw_word *w = pw_at(p, i), old = pw_word_read(w);

		if (bad_state(old.state))
			return -EIO;
		if (old.state == RT_PURGED) { /* only a holder changes that */
			count_was(d, old.state);
			continue;
		}
		log_mark(p, i, prio, seq, cost);
		while (!pw_word_cas(w, old, nw))
			old = pw_word_read(w);
		count_was(d, old.state);
		if (!old.state) {
			h->nvol++;
			d->vol++;
		}
	}
	return 0;
}

int pw_clear(struct pw *p, uint64_t s, uint64_t e, struct pw_delta *d)
{
	struct pw_hdr *h = p->h;

	e = clip(p, e);
	for (uint64_t i = s; i < e; i++) {
		struct pw_word *w = pw_at(p, i), old;

		do {
			old = pw_word_read(w);
			if (bad_state(old.state))
				return -EIO;
		} while (old.state && !pw_word_cas(w, old, (struct pw_word){ 0 }));
		if (!old.state)
			continue;
		count_was(d, old.state);
		if (old.state == RT_VOLATILE) {
			h->nvol--;
			d->vol--;
		} else {
			h->npurged--;
			d->purged--;
		}
	}
	return 0;
}

/* Word i from volatile to purged: 1, 0 if it is not volatile (any more),
 * -EIO.  *was: its state. */
static int purge_one(struct pw *p, uint64_t i, uint32_t *was)
{
	struct pw_word *w = pw_at(p, i), old;

	do {
		old = pw_word_read(w);
		*was = old.state;
		if (bad_state(old.state))
			return -EIO;
		if (old.state != RT_VOLATILE)
			return 0;
	} while (!pw_word_cas(w, old, (struct pw_word){ .state = RT_PURGED }));
	p->h->nvol--;
	p->h->npurged++;
	return 1;
}

int pw_purge(struct pw *p, uint64_t s, uint64_t e, struct pw_delta *d)
{
	int r = pw_plain_stop(p);

	if (r < 0)
		return r;
	e = clip(p, e);
	for (uint64_t i = s; i < e; i++) {
		uint32_t was;

		r = purge_one(p, i, &was);

		if (r < 0)
			return r;
		count_was(d, was);
		d->vol -= r;
		d->purged += r;
	}
	return 0;
}

int pw_purge_exact(struct pw *p, uint64_t s, uint64_t e, uint64_t *stop,
		   struct pw_delta *d)
{
	uint64_t i;
	int r = pw_plain_stop(p);

	*stop = s;
	if (r < 0)
		return r;
	e = clip(p, e);
	for (i = s; i < e; i++) {
		uint32_t was;

		r = purge_one(p, i, &was);
		if (r <= 0)
			break;
		count_was(d, was);
		d->vol--;
		d->purged++;
	}
	*stop = i;
	return r < 0 ? r : 0;
}

int pw_unpurge(struct pw *p, uint64_t s, uint64_t e, int32_t prio,
	       uint64_t seq, uint32_t cost, struct pw_delta *d)
{
	const struct pw_word nw = { .seq = seq, .prio = prio, .state = RT_VOLATILE,
				    .cost = (uint16_t)(cost && cost <= PW_COST_MAX ?
						       cost : 1) };
	struct pw_hdr *h = p->h;

	e = clip(p, e);
	for (uint64_t i = s; i < e; i++) {
		struct pw_word *w = pw_at(p, i), old = pw_word_read(w);

		if (bad_state(old.state))
			return -EIO;
		count_was(d, old.state);
		/* A purged word is only ever changed under the lock. */
		if (old.state != RT_PURGED)
			continue;
		h->npurged--;
		h->nvol++;
		d->purged--;
		d->vol++;
		log_mark(p, i, prio, seq, nw.cost);
		pw_word_cas(w, old, nw);
	}
	return 0;
}

static inline bool same_word(const struct pw_word *a, const struct pw_word *b)
{
	if (a->state != b->state)
		return false;
	return a->state != RT_VOLATILE ||
	       (a->prio == b->prio && a->seq == b->seq && a->cost == b->cost);
}

int pw_next_run(const struct pw *p, uint64_t s, uint64_t e, struct pw_run *out)
{
	uint64_t i, j;
	struct pw_word w;

	e = clip(p, e);
	for (i = s; i < e && !pw_at(p, i)->state; i++)
		;
	if (i >= e)
		return 0;
	w = *pw_at(p, i);
	if (bad_state(w.state))
		return -EIO;
	for (j = i + 1; j < e && same_word(pw_at(p, j), &w); j++)
		;
	*out = (struct pw_run){ .start = i, .end = j, .state = w.state };
	if (w.state == RT_VOLATILE) {
		out->seq = w.seq;
		out->prio = w.prio;
		out->cost = w.cost;
	}
	return 1;
}

/* ------------------------------------------------------------------------ */
/* The purge order                                                           */

static inline bool ent_less(const struct pw_ent *a, const struct pw_ent *b)
{
	if (a->prio != b->prio)
		return a->prio < b->prio;
	if (a->seq != b->seq)
		return a->seq < b->seq;
	return a->page < b->page;
}

/* Heap sort of the entries: in place, no allocation, O(n log n) whatever
 * the input (another process could scribble on it meanwhile: indices stay
 * below n however the keys compare). */
static void sift(struct pw_ent *v, uint32_t root, uint32_t n)
{
	for (;;) {
		uint32_t c = 2 * root + 1;
		struct pw_ent t;

		if (c >= n)
			return;
		if (c + 1 < n && ent_less(&v[c], &v[c + 1]))
			c++;
		if (!ent_less(&v[root], &v[c]))
			return;
		t = v[root];
		v[root] = v[c];
		v[c] = t;
		root = c;
	}
}

/* v[0..c] is a heap but for v[c]: lift it. */
static void sift_up(struct pw_ent *v, uint32_t c)
{
	while (c > 0) {
		uint32_t up = (c - 1) / 2;
		struct pw_ent t;

		if (!ent_less(&v[up], &v[c]))
			return;
		t = v[up];
		v[up] = v[c];
		v[c] = t;
		c = up;
	}
}

/* Sort the heap v[0..n) ascending. */
static void sort_heap(struct pw_ent *v, uint32_t n)
{
	for (uint32_t end = n; end > 1; end--) {
		struct pw_ent t = v[0];

		v[0] = v[end - 1];
		v[end - 1] = t;
		sift(v, 0, end - 1);
	}
}

static void sort_entries(struct pw_ent *v, uint32_t n)
{
	for (uint32_t i = n / 2; i-- > 0;)
		sift(v, i, n);
	sort_heap(v, n);
}

/* The PW_ORDER_MAX oldest volatile words, sorted: a max-heap of the
 * oldest seen so far while the words stream past, then sorted in place. */
static void build_order(struct pw *p)
{
	struct pw_hdr *h = p->h;
	uint32_t cap = p->n < PW_ORDER_MAX ? p->n : PW_ORDER_MAX, n = 0;
	bool all = true;

	/* Before the scan: a lock-free mark the scan misses flags the order
	 * stale again (note_unordered). */
	bool costly = false;
	uint64_t unit = pw_cost_unit();

	h->ord_stale = 0;
	h->ord_built = 1;
	h->ord_unit = unit;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	fence_plain(p);
	for (uint32_t i = 0; i < p->n; i++) {
		const struct pw_word w = pw_word_read(pw_at(p, i));
		struct pw_ent x;

		if (w.state != RT_VOLATILE)
			continue;
		if (pw_cost_cls(w.cost))
			costly = true;
		x = (struct pw_ent){ .seq = pw_key(w.seq, w.cost, unit),
				     .prio = w.prio, .page = i };
		if (n < cap) {
			p->e[n] = x;
			sift_up(p->e, n++);
		} else {
			all = false;
			if (ent_less(&x, &p->e[0])) {
				p->e[0] = x;
				sift(p->e, 0, n);
			}
		}
	}
	sort_heap(p->e, n);
	h->ord_costly = costly;
	h->ord_all = all;
	h->ord_len = n;
	h->ord_pos = 0;
	h->ord_nlog = 0;
}

/*
 * Take the entries marks appended into the order: sorted, they become its
 * tail when none sorts before the last old entry (the old order is
 * sorted: its last entry is its largest, used up or not).  When every old
 * entry is used up they move to the front, so a steady stream of marks
 * and purges never fills the area.  false: sort everything instead.
 */
static bool take_log(struct pw *p)
{
	struct pw_hdr *h = p->h;
	uint32_t len = h->ord_len, pos = h->ord_pos, k = h->ord_nlog;

	if (len > p->n || pos > len || k > p->n - len)
		return false;
	sort_entries(p->e + len, k);
	if (!h->ord_all) {
		/* The order holds the oldest words only: the entries behind
		 * its last one are found by the next scan, ones before it
		 * need one now. */
		if (!len || ent_less(&p->e[len], &p->e[len - 1]))
			return false;
		h->ord_nlog = 0;
		return true;
	}
	if (pos < len && ent_less(&p->e[len], &p->e[len - 1]))
		return false;
	if (pos == len) {
		memmove(p->e, p->e + len, (size_t)k * sizeof(*p->e));
		len = 0;
		h->ord_pos = 0;
	}
	h->ord_len = len + k;
	h->ord_nlog = 0;
	return true;
}

/* Does entry x still describe its page's word? */
static inline bool ent_live(const struct pw *p, const struct pw_ent *x)
{
	struct pw_word w;

	if (x->page >= p->n)
		return false;
	w = pw_word_read(pw_at(p, x->page));
	return w.state == RT_VOLATILE && w.prio == x->prio &&
	       pw_key(w.seq, w.cost, p->h->ord_unit) == x->seq;
}

/* Keys of an order that weighs costs follow the unit: one built with a
 * unit half or twice the current one is built again. */
static inline bool unit_moved(const struct pw_hdr *h)
{
	uint64_t u = pw_cost_unit(), o = h->ord_unit;

	return h->ord_costly && (u / 2 > o || o / 2 > u);
}

/* The first live entry from ord_pos on (advancing ord_pos past dead ones:
 * an entry that stopped matching only matches again after a mark, and a
 * mark records an entry of its own).  1 and *pos, or 0. */
static int first_live(struct pw *p, uint32_t *pos)
{
	struct pw_hdr *h = p->h;
	uint32_t len = h->ord_len, i = h->ord_pos;

	if (len > p->n || i > len)
		return 0;
	while (i < len && !ent_live(p, &p->e[i]))
		i++;
	h->ord_pos = i;
	*pos = i;
	return i < len;
}

static void run_at(const struct pw *p, uint32_t pos, struct pw_run *out);

int pw_oldest(struct pw *p, struct pw_run *out)
{
	struct pw_hdr *h = p->h;
	uint32_t pos;

	if (!p->n || !pw_vol(p))
		return 0;
	if (!h->ord_built || h->ord_stale || unit_moved(h) ||
	    (h->ord_nlog && !take_log(p)) ||
	    !first_live(p, &pos)) {
		/* None yet, marks it could not follow, or used up (the
		 * oldest ones only were kept) while words are volatile:
		 * build afresh.  None then: unmarked meanwhile, lock-free. */
		build_order(p);
		if (!first_live(p, &pos))
			return 0;
	}
	run_at(p, pos, out);
	return 1;
}

/* The run that starts with the live entry at pos: neighbouring pages of
 * the same age, which purge as one hole. */
static void run_at(const struct pw *p, uint32_t pos, struct pw_run *out)
{
	const struct pw_ent *x = &p->e[pos];
	uint32_t len = p->h->ord_len, k;
	struct pw_word w;

	for (k = 1; pos + k < len && pos + k < p->n; k++) {
		const struct pw_ent *y = &p->e[pos + k];

		if (y->prio != x->prio || y->seq != x->seq ||
		    y->page != x->page + k || !ent_live(p, y))
			break;
	}
	w = pw_word_read(pw_at(p, x->page));
	*out = (struct pw_run){ .start = x->page, .end = (uint64_t)x->page + k,
				.seq = w.seq, .prio = x->prio,
				.state = RT_VOLATILE, .cost = w.cost,
				.key = pw_key(w.seq, w.cost, pw_cost_unit()) };
}

/* The oldest volatile word marked no later than max_seq, by a scan (an
 * order of the oldest words only may hold none such while others do). */
static int scan_before(const struct pw *p, uint64_t max_seq, struct pw_run *out)
{
	const struct pw_word *b = NULL;
	uint32_t bi = 0, j;
	uint64_t unit = pw_cost_unit(), bk = 0;

	for (uint32_t i = 0; i < p->n; i++) {
		const struct pw_word *w = pw_at(p, i);
		uint64_t k;

		if (w->state != RT_VOLATILE || w->seq > max_seq)
			continue;
		k = pw_key(w->seq, w->cost, unit);
		if (!b || w->prio < b->prio ||
		    (w->prio == b->prio && (k < bk || (k == bk && w->seq < b->seq)))) {
			b = w;
			bi = i;
			bk = k;
		}
	}
	if (!b)
		return 0;
	for (j = bi + 1; j < p->n && same_word(pw_at(p, j), b); j++)
		;
	*out = (struct pw_run){ .start = bi, .end = j, .seq = b->seq,
				.prio = b->prio, .state = RT_VOLATILE,
				.cost = b->cost, .key = bk };
	return 1;
}

int pw_oldest_before(struct pw *p, uint64_t max_seq, struct pw_run *out)
{
	struct pw_hdr *h = p->h;
	uint32_t i, len;
	int r = pw_oldest(p, out);

	if (r <= 0 || out->seq <= max_seq)
		return r;
	/* Within a priority an order of one cost class ascends by seq: once
	 * one entry is past max_seq, the rest of its priority is too.  With
	 * costs, each entry's own word says when it was marked. */
	len = h->ord_len;
	i = h->ord_pos;
	if (len > p->n || i > len)
		return -EIO;
	while (i < len) {
		const struct pw_ent *x = &p->e[i];

		if (h->ord_costly) {
			if (ent_live(p, x) && pw_at(p, x->page)->seq <= max_seq) {
				run_at(p, i, out);
				return 1;
			}
			i++;
			continue;
		}
		if (x->seq > max_seq) {
			int32_t prio = x->prio;

			while (i < len && p->e[i].prio == prio)
				i++;
			continue;
		}
		if (ent_live(p, x)) {
			run_at(p, i, out);
			return 1;
		}
		i++;
	}
	return h->ord_all ? 0 : scan_before(p, max_seq, out);
}

/* The words by state, into cnt: 0, or -EIO for a word no operation
 * leaves (an unknown state; an age on a word that is not volatile). */
static int tally(const struct pw *p, uint64_t cnt[3])
{
	for (uint32_t i = 0; i < p->n; i++) {
		const struct pw_word w = pw_word_read(pw_at(p, i));

		/* The age of a word that is not volatile is left over from
		 * a swap (pw_word_cas): not checked. */
		if (bad_state(w.state) ||
		    (w.state != RT_VOLATILE && (w.prio || w.cost)) ||
		    (w.state == RT_VOLATILE && !w.cost))
			return -EIO;
		cnt[w.state]++;
	}
	return 0;
}

int pw_recount(struct pw *p, int64_t *dvol, int64_t *dpurged)
{
	uint64_t cnt[3] = { 0, 0, 0 };
	int64_t nvol;

	if (tally(p, cnt) < 0)
		return -EIO;
	/* nvol may be below 0 (a page marked lock-free, cleared under the
	 * lock): it is only ever read summed with the stripes. */
	nvol = (int64_t)cnt[RT_VOLATILE] - stripes_sum(p->h);
	*dvol = nvol - (int64_t)p->h->nvol;
	*dpurged = (int64_t)cnt[RT_PURGED] - (int64_t)p->h->npurged;
	p->h->nvol = (uint64_t)nvol;
	p->h->npurged = cnt[RT_PURGED];
	return 0;
}

int pw_check(const struct pw *p)
{
	uint64_t cnt[3] = { 0, 0, 0 };

	if (p->h->magic != PW_MAGIC || p->h->npages != p->n || tally(p, cnt) < 0)
		return -EIO;
	/* The count of volatile words is never below the words: a lock-free
	 * mark counts before its word turns volatile, an unmark after, and two
	 * marks that both found one word in no state, one of them plain, both
	 * counted it ("The plain mark" in docs/design.md).  Higher is only a
	 * scan for nothing; lower would hide pages from purges. */
	return (int64_t)cnt[RT_VOLATILE] <= (int64_t)p->h->nvol + stripes_sum(p->h) &&
	       cnt[RT_PURGED] == p->h->npurged ? 0 : -EIO;
}
