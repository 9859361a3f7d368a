/* SPDX-License-Identifier: MIT */
/*
 * model_cache.c - the purgeable cache (contract §7) in the model test.
 *
 * Up to three caches (capped or not, eager or lazy, of any priority) live
 * in the coordinator beside the page model's regions and mappings.  The
 * model knows, per key, whether an entry exists and which version of its
 * value (a pattern of key and version) it holds; the LRU order; every
 * hold and open reservation.  Checked after every operation:
 *   - a hit returns exactly the latest value of its key (never a byte lost,
 *     never an older version), at the pointer of any hold of it;
 *   - a held value or open reservation keeps every byte, through purges,
 *     the budget, forks and other holds (and reads so in a forked child);
 *   - a released value is lost only if something in the process purged
 *     since it was last seen;
 *   - LRU eviction under max_bytes exactly as documented, -EBUSY, -E2BIG,
 *     -EINVAL for every bad input, out-parameters untouched on failure;
 *   - the counters, exactly;
 *   - the purge order of released values (issue 25, item 4): values of
 *     their own pages (over half a page) in an uncapped cache go oldest
 *     release first, lazy or eager - checked by the settling pass while
 *     only this process's own purges ran (not the budget's monitor, which
 *     races the releases, nor a forked child's, which cannot flush the
 *     caches' deferred releases: contract section 7).
 * A purge may drop any released value, and dropping one may drop its page
 * neighbours: the model cannot tell which, so such keys become "maybe" and
 * the counters that depend on them only bounded, until a settling pass
 * looks every uncertain key up and makes the model exact again.
 *
 * Every decision draws from a stream of its own (seed, step): the page
 * model's draws, and so its seeds, are as they were without the cache.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "model_cache.h"

#define MC_CACHES 3
#define MC_KEYS   32
#define MC_HOLDS  24
#define MC_RESV   4
#define KEY_MAX   4096

enum kst { K_ABSENT, K_ALIVE, K_MAYBE };

struct mc_key {
	uint8_t st;
	uint32_t ver;
	size_t vlen;
	uint64_t tick;      /* last put or hit: the LRU order */
	uint64_t rel;       /* last release of its value: the purge order */
};

struct mc_cache {
	vrange_cache *c;    /* NULL: slot free */
	unsigned id;        /* for the trace */
	size_t max_bytes;
	int prio;
	unsigned flags;
	struct mc_key k[MC_KEYS];
	uint32_t ver;
	uint64_t tick;
	uint64_t hits, misses;           /* exact always */
	uint64_t purged, evictions;      /* exact while !unsure */
	uint64_t seen_purged, seen_evictions; /* last read: never go down */
	int unsure;                      /* a key was "maybe" since the last settle */
	uint64_t rel_clock;              /* releases, for mc_key.rel */
	int order_unsure;                /* purged by the monitor or a child */
};

struct mc_hold {
	int used, ci, key;
	uint32_t ver;
	const unsigned char *p;
	size_t vlen;
};

struct mc_resv {
	int used, ci, key;
	uint32_t ver;
	unsigned char *buf;
	size_t vlen;
};

static struct mc_cache MC[MC_CACHES];
static struct mc_hold H[MC_HOLDS];
static struct mc_resv R[MC_RESV];
static uint64_t crng, cseed;
static unsigned next_id;
static size_t ps;
static unsigned char *expect; /* scratch for an expected value */
static int budget_on;
static int enabled = -1; /* VRANGE_MODEL_CACHE=0: the page model alone */

static struct {
	uint64_t ops, puts, gets, hits, misses, lost, holds_checked, settles,
		 evicted, ebusy, bad, resv, order_checks, purges;
} S;

/* ------------------------------------------------------------------------ */
/* Random numbers, keys and values                                          */

static uint64_t rnd(void)
{
	uint64_t x = crng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	crng = x;
	return x * 0x2545f4914f6cdd1dull;
}

static unsigned rn(unsigned n)
{
	return n ? (unsigned)(rnd() % n) : 0;
}

/* Key k of every cache: lengths 1, 4096 and between; k itself first. */
static size_t key_len(int k)
{
	if (k % 8 == 6)
		return 1;
	if (k % 8 == 7)
		return KEY_MAX;
	return 3 + (size_t)(k * 37) % 60;
}

static const unsigned char *key_of(int k)
{
	static unsigned char kb[MC_KEYS][KEY_MAX];
	static int made;

	if (!made) {
		for (int i = 0; i < MC_KEYS; i++)
			for (size_t j = 0; j < KEY_MAX; j++)
				kb[i][j] = j ? (unsigned char)(i * 131 + j * 7) : (unsigned char)i;
		made = 1;
	}
	return kb[k];
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The value of (cache, key, version): every byte depends on all three. */
static void value_fill(unsigned char *p, size_t n, unsigned id, int k, uint32_t ver)
{
	uint64_t x = ((uint64_t)id << 48) ^ ((uint64_t)k << 32) ^ ver;

	for (size_t i = 0; i < n; i += 8) {
		uint64_t z = mix(x + i);

		memcpy(p + i, &z, n - i < 8 ? n - i : 8);
	}
}

/* Value lengths: a byte, small (slab classes), around a page, several. */
static size_t pick_vlen(void)
{
	switch (rn(10)) {
	case 0:
		return 1 + rn(16);
	case 1:
	case 2:
	case 3:
		return 17 + rn(2032);
	case 4:
	case 5:
		return ps / 2 + 1 + rn((unsigned)ps / 2);
	case 6:
		return ps * (1 + rn(3));
	case 7:
		return ps + 1 + rn(2 * (unsigned)ps);
	default:
		return 1 + rn((unsigned)ps / 2);
	}
}

static int value_ok(const unsigned char *p, size_t n, unsigned id, int k,
		    uint32_t ver)
{
	value_fill(expect, n, id, k, ver);
	return memcmp(p, expect, n) == 0;
}

/* ------------------------------------------------------------------------ */
/* The model                                                                */

static int holds_of(int ci, int k, uint32_t ver)
{
	int n = 0;

	for (int h = 0; h < MC_HOLDS; h++)
		n += H[h].used && H[h].ci == ci && H[h].key == k && H[h].ver == ver;
	return n;
}

/* The key's current entry is held (it is linked, with that version). */
static int key_held(int ci, int k)
{
	return MC[ci].k[k].st != K_ABSENT && holds_of(ci, k, MC[ci].k[k].ver) > 0;
}

static int free_hold(void)
{
	for (int h = 0; h < MC_HOLDS; h++)
		if (!H[h].used)
			return h;
	return -1;
}

static int pick_hold(int ci)
{
	int n = 0, pick = -1;

	for (int h = 0; h < MC_HOLDS; h++)
		if (H[h].used && (ci < 0 || H[h].ci == ci) && rn((unsigned)++n) == 0)
			pick = h;
	return pick;
}

static int busy(int ci)
{
	for (int h = 0; h < MC_HOLDS; h++)
		if (H[h].used && H[h].ci == ci)
			return 1;
	for (int r = 0; r < MC_RESV; r++)
		if (R[r].used && R[r].ci == ci)
			return 1;
	return 0;
}

static void purged_one(int ci)
{
	struct mc_cache *m = &MC[ci];

	for (int k = 0; k < MC_KEYS; k++)
		if (m->k[k].st == K_ALIVE && !key_held(ci, k)) {
			m->k[k].st = K_MAYBE;
			m->unsure = 1;
		}
}

void mcache_purged(void)
{
	for (int ci = 0; ci < MC_CACHES; ci++)
		if (MC[ci].c)
			purged_one(ci);
}

void mcache_purged_elsewhere(void)
{
	mcache_purged();
	for (int ci = 0; ci < MC_CACHES; ci++)
		MC[ci].order_unsure = 1;
}

/* The key's value was released (its last hold, or the put's own). */
static void released(int ci, int k)
{
	MC[ci].k[k].rel = ++MC[ci].rel_clock;
}

/*
 * max_bytes at put, commit and release: the least recently used released
 * entries go (never keep) while the stored bytes exceed the cap.  Unsure,
 * some "maybe" entries may be gone already and the cache evicts fewer:
 * every entry the model's walk passes becomes "maybe".
 */
static void model_enforce(int ci, int keep)
{
	struct mc_cache *m = &MC[ci];
	uint64_t sum = 0, last = 0;

	if (!m->max_bytes)
		return;
	for (int k = 0; k < MC_KEYS; k++)
		if (m->k[k].st != K_ABSENT)
			sum += m->k[k].vlen;
	while (sum > m->max_bytes) {
		int tail = -1;

		for (int k = 0; k < MC_KEYS; k++)
			if (m->k[k].st != K_ABSENT && m->k[k].tick > last &&
			    (tail < 0 || m->k[k].tick < m->k[tail].tick))
				tail = k;
		if (tail < 0)
			break;
		last = m->k[tail].tick;
		if (tail == keep || key_held(ci, tail))
			continue;
		sum -= m->k[tail].vlen;
		S.evicted++;
		if (m->unsure) {
			m->k[tail].st = K_MAYBE;
		} else {
			m->k[tail].st = K_ABSENT;
			m->evictions++;
		}
	}
}

/* A value the cache just took in (put or commit) replaces the key's entry. */
static void model_store(int ci, int k, uint32_t ver, size_t vlen)
{
	struct mc_cache *m = &MC[ci];

	m->k[k].st = budget_on ? K_MAYBE : K_ALIVE;
	m->unsure |= budget_on;
	m->k[k].ver = ver;
	released(ci, k);
	m->k[k].vlen = vlen;
	m->k[k].tick = ++m->tick;
	model_enforce(ci, k);
}

static void check_hold(int h)
{
	const struct mc_hold *x = &H[h];

	S.holds_checked++;
	if (!value_ok(x->p, x->vlen, MC[x->ci].id, x->key, x->ver))
		model_fail("cache %u: the held value of key %d (version %u, %zu "
			   "bytes at %p) changed while held", MC[x->ci].id,
			   x->key, x->ver, x->vlen, (const void *)x->p);
}

static void check_resv(int r)
{
	const struct mc_resv *x = &R[r];

	if (!value_ok(x->buf, x->vlen, MC[x->ci].id, x->key, x->ver))
		model_fail("cache %u: the reserved buffer of key %d (%zu bytes) "
			   "changed before its commit", MC[x->ci].id, x->key,
			   x->vlen);
}

static void check_all_held(void)
{
	for (int h = 0; h < MC_HOLDS; h++)
		if (H[h].used)
			check_hold(h);
	for (int r = 0; r < MC_RESV; r++)
		if (R[r].used)
			check_resv(r);
}

/* The counters: exact, or bounded while some keys are "maybe". */
static void check_stats(int ci)
{
	struct mc_cache *m = &MC[ci];
	struct vrange_cache_stats st;
	uint64_t lo_n = 0, hi_n = 0, lo_b = 0, hi_b = 0;
	int rc;

	memset(&st, 0xa5, sizeof(st));
	st.struct_size = sizeof(st);
	rc = vrange_cache_get_stats(m->c, &st);
	if (rc)
		model_fail("cache %u: get_stats %d", m->id, rc);
	for (int k = 0; k < MC_KEYS; k++) {
		if (m->k[k].st == K_ABSENT)
			continue;
		hi_n++;
		hi_b += m->k[k].vlen;
		if (m->k[k].st == K_ALIVE) {
			lo_n++;
			lo_b += m->k[k].vlen;
		}
	}
	if (st.hits != m->hits || st.misses != m->misses)
		model_fail("cache %u: stats say %" PRIu64 " hits %" PRIu64
			   " misses, the model %" PRIu64 " / %" PRIu64, m->id,
			   st.hits, st.misses, m->hits, m->misses);
	if (st.entries < lo_n || st.entries > hi_n || st.value_bytes < lo_b ||
	    st.value_bytes > hi_b)
		model_fail("cache %u: stats say %" PRIu64 " entries of %" PRIu64
			   " bytes, the model %" PRIu64 "..%" PRIu64 " of %" PRIu64
			   "..%" PRIu64, m->id, st.entries, st.value_bytes,
			   lo_n, hi_n, lo_b, hi_b);
	if (st.purged_entries < m->seen_purged || st.evictions < m->seen_evictions)
		model_fail("cache %u: a counter went down: purged %" PRIu64
			   " (was %" PRIu64 "), evictions %" PRIu64 " (was %"
			   PRIu64 ")", m->id, st.purged_entries, m->seen_purged,
			   st.evictions, m->seen_evictions);
	if (!m->unsure && (st.purged_entries != m->purged ||
			   st.evictions != m->evictions))
		model_fail("cache %u: stats say %" PRIu64 " purged, %" PRIu64
			   " evicted; the model %" PRIu64 ", %" PRIu64, m->id,
			   st.purged_entries, st.evictions, m->purged,
			   m->evictions);
	/* What is in memory falls with a purge; what was given does not. */
	if (st.allocated_bytes < st.value_bytes || st.struct_size != sizeof(st))
		model_fail("cache %u: allocated_bytes %" PRIu64 " below value_bytes"
			   " %" PRIu64 " (or struct_size changed: %zu)", m->id,
			   st.allocated_bytes, st.value_bytes, st.struct_size);
	m->seen_purged = st.purged_entries;
	m->seen_evictions = st.evictions;
}

/* ------------------------------------------------------------------------ */
/* Operations                                                               */

static int pick_cache(void)
{
	int n = 0, pick = -1;

	for (int ci = 0; ci < MC_CACHES; ci++)
		if (MC[ci].c && rn((unsigned)++n) == 0)
			pick = ci;
	return pick;
}

static void c_create(void)
{
	struct vrange_cache_opts o = { .struct_size = sizeof(o) };
	struct vrange_stats before, after;
	char name[32];
	int ci = -1, rc, use_null;

	for (int i = 0; i < MC_CACHES && ci < 0; i++)
		if (!MC[i].c)
			ci = i;
	if (ci < 0)
		return;
	memset(&MC[ci], 0, sizeof(MC[ci]));
	MC[ci].id = ++next_id;
	snprintf(name, sizeof(name), "model-%u", MC[ci].id);
	o.name = rn(4) ? name : NULL;
	o.max_bytes = rn(2) ? 0 : (size_t)(4 + rn(40)) * ps;
	/* Below every page-model priority (-2..2) now and then: a purge of
	 * a little takes from the cache alone (c_purge). */
	o.priority = rn(3) ? (int)rn(5) - 2 : -3;
	o.flags = rn(3) ? 0 : VRANGE_CACHE_EAGER;
	use_null = !o.max_bytes && rn(6) == 0; /* NULL opts: the defaults */
	if (use_null)
		o = (struct vrange_cache_opts){ .struct_size = sizeof(o) };
	MC[ci].max_bytes = o.max_bytes;
	MC[ci].prio = o.priority;
	MC[ci].flags = o.flags;
	model_trace(" | C%u CREATE max %zu prio %d%s", MC[ci].id, o.max_bytes,
		    o.priority, o.flags ? " eager" : "");
	vrange_get_stats(&before);
	rc = vrange_cache_create(use_null ? NULL : &o, &MC[ci].c);
	if (rc || !MC[ci].c)
		model_fail("vrange_cache_create: %d", rc);
	vrange_get_stats(&after);
	if (after.regions != before.regions)
		model_fail("a cache counts in regions: %" PRIu64 " -> %" PRIu64,
			   before.regions, after.regions);
}

static void c_destroy(int ci)
{
	struct mc_cache *m = &MC[ci];
	int rc, want = busy(ci) ? -EBUSY : 0;

	model_trace(" | C%u DESTROY", m->id);
	if (!want && !m->unsure)
		check_stats(ci);
	rc = vrange_cache_destroy(m->c);
	if (rc != want)
		model_fail("cache %u: destroy %d, expected %d", m->id, rc, want);
	if (rc == -EBUSY) {
		S.ebusy++;
		return;
	}
	m->c = NULL;
}

static void c_put(int ci)
{
	struct mc_cache *m = &MC[ci];
	int k = (int)rn(MC_KEYS), rc;
	size_t vlen = pick_vlen();
	uint32_t ver = ++m->ver;
	unsigned char *v;

	if (m->max_bytes && rn(20) == 0)
		vlen = m->max_bytes + 1 + rn(100);
	v = malloc(vlen);
	if (!v)
		model_fail("malloc");
	value_fill(v, vlen, m->id, k, ver);
	model_trace(" | C%u PUT k%d v%u %zu", m->id, k, ver, vlen);
	rc = vrange_cache_put(m->c, key_of(k), key_len(k), v, vlen);
	free(v);
	S.puts++;
	if (m->max_bytes && vlen > m->max_bytes) {
		if (rc != -E2BIG)
			model_fail("cache %u: put of %zu bytes over max_bytes "
				   "%zu: %d, expected -E2BIG", m->id, vlen,
				   m->max_bytes, rc);
		return;
	}
	if (rc)
		model_fail("cache %u: put k%d: %d", m->id, k, rc);
	model_store(ci, k, ver, vlen);
}

/* Mostly a key with an entry: misses come from purges and evictions. */
static int pick_key(int ci)
{
	int n = 0, pick = -1;

	if (rn(4) == 0)
		return (int)rn(MC_KEYS);
	for (int k = 0; k < MC_KEYS; k++)
		if (MC[ci].k[k].st != K_ABSENT && rn((unsigned)++n) == 0)
			pick = k;
	return pick < 0 ? (int)rn(MC_KEYS) : pick;
}

/* get: -ENOENT or the key's latest value, held at h (or released at once). */
static void c_get(int ci, int keep)
{
	struct mc_cache *m = &MC[ci];
	int k = pick_key(ci), rc, h = keep ? free_hold() : -1;
	const void *val = (const void *)&m;
	size_t vlen = 12345;
	struct mc_key *x = &m->k[k];

	model_trace(" | C%u GET k%d", m->id, k);
	rc = vrange_cache_get(m->c, key_of(k), key_len(k), &val, &vlen);
	S.gets++;
	if (rc == -ENOENT) {
		if (val != (const void *)&m || vlen != 12345)
			model_fail("cache %u: a miss wrote its out-parameters",
				   m->id);
		if (x->st == K_ALIVE)
			model_fail("cache %u: get k%d (version %u, %zu bytes) "
				   "missed, but nothing purged since it was "
				   "stored or last seen%s", m->id, k, x->ver,
				   x->vlen, key_held(ci, k) ? " (and it is held)" : "");
		S.lost += x->st == K_MAYBE;
		x->st = K_ABSENT;
		m->misses++;
		S.misses++;
		return;
	}
	if (rc)
		model_fail("cache %u: get k%d: %d", m->id, k, rc);
	if (x->st == K_ABSENT)
		model_fail("cache %u: get k%d hit, but the key has no entry",
			   m->id, k);
	if (vlen != x->vlen || !value_ok(val, vlen, m->id, k, x->ver))
		model_fail("cache %u: get k%d returned %zu bytes that are not "
			   "version %u (%zu bytes) of its value", m->id, k, vlen,
			   x->ver, x->vlen);
	for (int o = 0; o < MC_HOLDS; o++)
		if (H[o].used && H[o].ci == ci && H[o].key == k &&
		    H[o].ver == x->ver && H[o].p != val)
			model_fail("cache %u: k%d moved while held: %p, now %p",
				   m->id, k, (const void *)H[o].p, val);
	m->hits++;
	S.hits++;
	x->st = K_ALIVE;
	x->tick = ++m->tick;
	if (h >= 0) {
		H[h] = (struct mc_hold){ 1, ci, k, x->ver, val, vlen };
		return;
	}
	rc = vrange_cache_release(m->c, val);
	if (rc)
		model_fail("cache %u: release right after get: %d", m->id, rc);
	released(ci, k);
	model_enforce(ci, -1);
}

static void c_release(int h)
{
	struct mc_hold x = H[h];
	int rc;

	model_trace(" | C%u RELEASE k%d v%u", MC[x.ci].id, x.key, x.ver);
	check_hold(h);
	H[h].used = 0;
	rc = vrange_cache_release(MC[x.ci].c, x.p);
	if (rc)
		model_fail("cache %u: release of k%d: %d", MC[x.ci].id, x.key, rc);
	if (MC[x.ci].k[x.key].st != K_ABSENT && MC[x.ci].k[x.key].ver == x.ver)
		released(x.ci, x.key);
	model_enforce(x.ci, -1);
}

static void c_remove(int ci)
{
	struct mc_cache *m = &MC[ci];
	int k = pick_key(ci), rc;
	struct mc_key *x = &m->k[k];

	model_trace(" | C%u REMOVE k%d", m->id, k);
	rc = vrange_cache_remove(m->c, key_of(k), key_len(k));
	if (rc != 0 && rc != -ENOENT)
		model_fail("cache %u: remove k%d: %d", m->id, k, rc);
	if ((x->st == K_ALIVE && rc) || (x->st == K_ABSENT && rc != -ENOENT))
		model_fail("cache %u: remove k%d: %d, but the key %s", m->id, k,
			   rc, x->st == K_ALIVE ? "has a live entry" : "has none");
	S.lost += x->st == K_MAYBE && rc;
	x->st = K_ABSENT;
}

static void c_reserve(int ci)
{
	struct mc_cache *m = &MC[ci];
	int k = (int)rn(MC_KEYS), r = -1, rc;
	size_t vlen = pick_vlen();
	void *buf = &r;

	for (int i = 0; i < MC_RESV && r < 0; i++)
		if (!R[i].used)
			r = i;
	if (r < 0)
		return;
	if (m->max_bytes && rn(10) == 0)
		vlen = m->max_bytes + 1;
	model_trace(" | C%u RESERVE k%d %zu", m->id, k, vlen);
	rc = vrange_cache_reserve(m->c, key_of(k), key_len(k), vlen, &buf);
	if (m->max_bytes && vlen > m->max_bytes) {
		if (rc != -E2BIG || buf != &r)
			model_fail("cache %u: reserve over max_bytes: %d", m->id, rc);
		return;
	}
	if (rc)
		model_fail("cache %u: reserve k%d: %d", m->id, k, rc);
	R[r] = (struct mc_resv){ 1, ci, k, ++m->ver, buf, vlen };
	value_fill(buf, vlen, m->id, k, R[r].ver);
	S.resv++;
}

static void c_commit_or_abort(int r, int commit)
{
	struct mc_resv x = R[r];
	struct mc_cache *m = &MC[x.ci];
	int rc;

	model_trace(" | C%u %s k%d v%u", m->id, commit ? "COMMIT" : "ABORT",
		    x.key, x.ver);
	check_resv(r);
	R[r].used = 0;
	rc = commit ? vrange_cache_commit(m->c, x.buf) : vrange_cache_abort(m->c, x.buf);
	if (rc)
		model_fail("cache %u: %s: %d", m->id, commit ? "commit" : "abort", rc);
	if (commit)
		model_store(x.ci, x.key, x.ver, x.vlen);
	/* Claimed: a second commit or abort of it is refused. */
	rc = rn(2) ? vrange_cache_commit(m->c, x.buf) : vrange_cache_abort(m->c, x.buf);
	if (rc != -EINVAL)
		model_fail("cache %u: a second commit/abort of a reservation: %d",
			   m->id, rc);
}

static void expect_einval(int rc, const char *what)
{
	S.bad++;
	if (rc != -EINVAL)
		model_fail("%s: %d, expected -EINVAL", what, rc);
}

/* Bad inputs of §7: -EINVAL (out-parameters untouched), and no change. */
static void c_bad(int ci)
{
	struct mc_cache *m = &MC[ci];
	vrange_cache *c = m->c;
	const unsigned char *key = key_of(1);
	const void *val = &val;
	size_t vlen = 7;
	void *buf = &buf;
	unsigned kind = rn(16);
	int h, rc;

	model_trace(" | C%u BAD %u", m->id, kind);
	switch (kind) {
	case 0:
		expect_einval(vrange_cache_put(NULL, key, 3, key, 3), "put NULL cache");
		expect_einval(vrange_cache_put(c, NULL, 3, key, 3), "put NULL key");
		break;
	case 1:
		expect_einval(vrange_cache_put(c, key, 0, key, 3), "put klen 0");
		expect_einval(vrange_cache_put(c, key, KEY_MAX + 1, key, 3),
			      "put klen 4097");
		break;
	case 2:
		expect_einval(vrange_cache_put(c, key, 3, key, 0), "put vlen 0");
		expect_einval(vrange_cache_put(c, key, 3, NULL, 3), "put NULL val");
		break;
	case 3:
		expect_einval(vrange_cache_get(c, key, 3, NULL, &vlen), "get NULL val");
		expect_einval(vrange_cache_get(c, key, 3, &val, NULL), "get NULL vlen");
		expect_einval(vrange_cache_get(c, key, 0, &val, &vlen), "get klen 0");
		expect_einval(vrange_cache_get(NULL, key, 3, &val, &vlen), "get NULL cache");
		if (val != &val || vlen != 7)
			model_fail("a bad get wrote its out-parameters");
		break;
	case 4:
		expect_einval(vrange_cache_remove(c, key, KEY_MAX + 1), "remove klen 4097");
		expect_einval(vrange_cache_remove(c, NULL, 1), "remove NULL key");
		expect_einval(vrange_cache_release(c, NULL), "release NULL");
		expect_einval(vrange_cache_release(c, &val), "release of a stack pointer");
		break;
	case 5: /* an interior pointer of a held value */
		h = pick_hold(ci);
		if (h >= 0 && H[h].vlen > 1)
			expect_einval(vrange_cache_release(c, H[h].p + 1 + rn((unsigned)H[h].vlen - 1)),
				      "release of an interior pointer");
		break;
	case 6: /* a value of another cache */
		h = pick_hold(-1);
		if (h >= 0 && H[h].ci != ci)
			expect_einval(vrange_cache_release(c, H[h].p),
				      "release of another cache's value");
		break;
	case 7: /* a reservation is not a get's hold */
		for (int r = 0; r < MC_RESV; r++)
			if (R[r].used && R[r].ci == ci)
				expect_einval(vrange_cache_release(c, R[r].buf),
					      "release of a reserved buffer");
		break;
	case 8: { /* one release more than gets */
		int k = (int)rn(MC_KEYS);

		if (m->k[k].st == K_ABSENT || key_held(ci, k))
			break;
		rc = vrange_cache_get(c, key_of(k), key_len(k), &val, &vlen);
		if (rc == -ENOENT) {
			if (m->k[k].st == K_ALIVE)
				model_fail("cache %u: get k%d missed without a purge",
					   m->id, k);
			m->k[k].st = K_ABSENT;
			m->misses++;
			break;
		}
		if (rc || !value_ok(val, vlen, m->id, k, m->k[k].ver))
			model_fail("cache %u: get k%d: %d or damaged", m->id, k, rc);
		m->hits++;
		m->k[k].st = K_ALIVE;
		m->k[k].tick = ++m->tick;
		rc = vrange_cache_release(c, val);
		if (rc)
			model_fail("cache %u: release: %d", m->id, rc);
		released(ci, k);
		model_enforce(ci, -1);
		expect_einval(vrange_cache_release(c, val), "one release more than gets");
		break;
	}
	case 9: { /* a held value is not a reservation */
		h = pick_hold(ci);
		if (h >= 0)
			expect_einval(rn(2) ? vrange_cache_commit(c, (void *)H[h].p)
					    : vrange_cache_abort(c, (void *)H[h].p),
				      "commit/abort of a held value");
		expect_einval(vrange_cache_commit(c, NULL), "commit NULL");
		break;
	}
	case 10:
		expect_einval(vrange_cache_reserve(c, key, 3, 0, &buf), "reserve vlen 0");
		expect_einval(vrange_cache_reserve(c, key, 3, 5, NULL), "reserve NULL buf");
		expect_einval(vrange_cache_reserve(c, key, 0, 5, &buf), "reserve klen 0");
		if (buf != &buf)
			model_fail("a bad reserve wrote its out-parameter");
		break;
	case 11: {
		struct vrange_cache_opts o = { .struct_size = sizeof(o) };
		vrange_cache *out = (vrange_cache *)&o;

		o.flags = 2u << rn(30);
		expect_einval(vrange_cache_create(&o, &out), "create with an unknown flag");
		o.flags = 0;
		o.struct_size = offsetof(struct vrange_cache_opts, flags);
		expect_einval(vrange_cache_create(&o, &out), "create with a short struct_size");
		expect_einval(vrange_cache_create(NULL, NULL), "create NULL out");
		if (out != (vrange_cache *)&o)
			model_fail("a bad create wrote its out-parameter");
		break;
	}
	case 12: {
		struct vrange_cache_stats st = {
			.struct_size = offsetof(struct vrange_cache_stats, evictions) };

		expect_einval(vrange_cache_get_stats(c, &st), "stats, short struct_size");
		st.struct_size = sizeof(st);
		expect_einval(vrange_cache_get_stats(NULL, &st), "stats NULL cache");
		expect_einval(vrange_cache_get_stats(c, NULL), "stats NULL out");
		break;
	}
	default:
		expect_einval(vrange_cache_get(c, key_of(7), KEY_MAX + 1, &val, &vlen),
			      "get klen 4097");
		break;
	}
}

/*
 * Look every uncertain key up (least recently used first, so the order
 * among them stays), hold the hits, then release them: afterwards every
 * entry the model has is alive and the counters are exact again.
 */
static void c_settle_checked(int ci, int ordered);

static void c_settle(int ci)
{
	/* A capped cache evicts too: missing may mean evicted, not purged. */
	c_settle_checked(ci, !MC[ci].max_bytes);
}

/* ordered: no key went but by this process's own purges since the model
 * was last sure of every key (then the purge order is checked). */
static void c_settle_checked(int ci, int ordered)
{
	struct mc_cache *m = &MC[ci];
	const void *held[MC_KEYS];
	int nh = 0, hk[MC_KEYS];
	uint64_t last = 0;
	/* The purge order: the newest release lost, the oldest kept. */
	uint64_t newest_lost = 0, oldest_kept = UINT64_MAX;
	int lost_k = -1, kept_k = -1;

	ordered &= !m->order_unsure;

	model_trace(" | C%u SETTLE", m->id);
	for (;;) {
		int k = -1, rc;
		const void *val;
		size_t vlen;

		for (int i = 0; i < MC_KEYS; i++)
			if (m->k[i].st == K_MAYBE && m->k[i].tick > last &&
			    (k < 0 || m->k[i].tick < m->k[k].tick))
				k = i;
		if (k < 0)
			break;
		last = m->k[k].tick;
		rc = vrange_cache_get(m->c, key_of(k), key_len(k), &val, &vlen);
		if (rc == -ENOENT) {
			if (m->k[k].vlen > ps / 2 && m->k[k].rel > newest_lost) {
				newest_lost = m->k[k].rel;
				lost_k = k;
			}
			m->k[k].st = K_ABSENT;
			m->misses++;
			S.lost++;
			continue;
		}
		if (rc || vlen != m->k[k].vlen ||
		    !value_ok(val, vlen, m->id, k, m->k[k].ver))
			model_fail("cache %u: settling get of k%d: %d, %zu bytes "
				   "(version %u, %zu expected)", m->id, k, rc, vlen,
				   m->k[k].ver, m->k[k].vlen);
		if (m->k[k].vlen > ps / 2 && m->k[k].rel < oldest_kept) {
			oldest_kept = m->k[k].rel;
			kept_k = k;
		}
		m->hits++;
		m->k[k].st = K_ALIVE;
		m->k[k].tick = ++m->tick;
		hk[nh] = k;
		held[nh++] = val;
	}
	if (ordered && lost_k >= 0 && kept_k >= 0 && oldest_kept < newest_lost)
		model_fail("cache %u%s: k%d was purged though k%d, released "
			   "before it, was kept (release %" PRIu64 " < %" PRIu64
			   "): not the purge order", m->id,
			   m->flags ? " (eager)" : " (lazy)", lost_k, kept_k,
			   oldest_kept, newest_lost);
	S.order_checks += ordered && lost_k >= 0 && kept_k >= 0;
	m->order_unsure = 0;
	/* Every key is certain now: what the cache counted meanwhile is what
	 * it found; adopt it (checked not to have gone down). */
	{
		struct vrange_cache_stats st = { .struct_size = sizeof(st) };

		vrange_cache_get_stats(m->c, &st);
		m->unsure = 0;
		m->purged = st.purged_entries;
		m->evictions = st.evictions;
		check_stats(ci);
	}
	S.settles++;
	for (int i = 0; i < nh; i++) {
		int rc = vrange_cache_release(m->c, held[i]);

		if (rc)
			model_fail("cache %u: settling release: %d", m->id, rc);
		released(ci, hk[i]);
		model_enforce(ci, -1);
	}
}

/*
 * A purge of part of what the cache surely has volatile (its released,
 * certainly alive values of their own pages), then a settle: released
 * values must have gone oldest release first (the check in c_settle).
 * Returns 1: the page model must take it as a purge of its own.
 */
static int c_purge(int ci)
{
	struct mc_cache *m = &MC[ci];
	uint64_t pages = 0, n;
	const void *val;
	size_t vlen;
	ssize_t rc;
	int sure, x = -1, cand = 0;

	/* The cache below every page-model priority, if there is one. */
	for (int i = 0; i < MC_CACHES; i++)
		if (MC[i].c && MC[i].prio < m->prio)
			m = &MC[ci = i];
	sure = !m->unsure;
	if (budget_on)
		return 0;
	/*
	 * Below every page-model priority: a value x got and released again
	 * right now must outlive a purge of no more than the pages of the
	 * values released before it (certainly there, volatile, older): the
	 * purge takes them, or older pages, first.  Whatever x's place in
	 * the cache's deferral (issue 25, item 4).
	 */
	for (int k = 0; k < MC_KEYS; k++)
		if (m->k[k].st == K_ALIVE && m->k[k].vlen > ps / 2 &&
		    !key_held(ci, k) && rn((unsigned)++cand) == 0)
			x = k;
	if (m->prio != -3 || cand < 2)
		x = -1;
	if (x >= 0) {
		model_trace(" | C%u GET k%d (purge order)", m->id, x);
		rc = vrange_cache_get(m->c, key_of(x), key_len(x), &val, &vlen);
		if (rc || vlen != m->k[x].vlen)
			model_fail("cache %u: get k%d: %zd", m->id, x, rc);
		m->hits++;
		m->k[x].tick = ++m->tick;
		if (vrange_cache_release(m->c, val))
			model_fail("cache %u: release k%d", m->id, x);
		released(ci, x);
		model_enforce(ci, -1);
	}
	for (int k = 0; k < MC_KEYS; k++)
		if (m->k[k].st == K_ALIVE && m->k[k].vlen > ps / 2 &&
		    !key_held(ci, k) && k != x)
			pages += (m->k[k].vlen + ps - 1) / ps;
	if (!pages)
		return 0;
	n = 1 + rnd() % pages;
	model_trace(" | C%u PURGE %" PRIu64 " pages (of %" PRIu64 ")", m->id,
		    n, pages);
	rc = vrange_purge(n * ps);
	if (rc < 0)
		model_fail("cache %u: vrange_purge: %zd", m->id, rc);
	mcache_purged();
	if (x >= 0) {
		rc = vrange_cache_get(m->c, key_of(x), key_len(x), &val, &vlen);
		if (rc)
			model_fail("cache %u%s: k%d, got and released last, was "
				   "purged by a purge of %" PRIu64 " pages while %"
				   PRIu64 " pages of values released before it "
				   "were volatile: not the purge order", m->id,
				   m->flags ? " (eager)" : " (lazy)", x, n, pages);
		if (!value_ok(val, vlen, m->id, x, m->k[x].ver))
			model_fail("cache %u: k%d damaged", m->id, x);
		m->hits++;
		m->k[x].st = K_ALIVE;
		m->k[x].tick = ++m->tick;
		if (vrange_cache_release(m->c, val))
			model_fail("cache %u: release k%d", m->id, x);
		released(ci, x);
		model_enforce(ci, -1);
		S.order_checks++;
	}
	c_settle_checked(ci, sure);
	S.purges++;
	return 1;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */

void mcache_reset(uint64_t seed)
{
	if (!ps) {
		ps = (size_t)sysconf(_SC_PAGESIZE);
		expect = malloc(8 * ps);
		if (!expect)
			model_fail("malloc");
	}
	if (enabled < 0) {
		const char *e = getenv("VRANGE_MODEL_CACHE");

		enabled = !e || !*e || *e != '0';
	}
	memset(MC, 0, sizeof(MC));
	memset(H, 0, sizeof(H));
	memset(R, 0, sizeof(R));
	cseed = seed;
	budget_on = 0;
}

int mcache_step(uint32_t n, int budget)
{
	int ci, h, r, purged = 0;
	unsigned op;

	if (!enabled)
		return 0;
	crng = (cseed * 0xd1b54a32d192ed03ull) ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull);
	crng = crng ? crng : 1;
	(void)rnd();
	budget_on = budget;
	if (budget)
		mcache_purged_elsewhere(); /* the monitor purges whenever it likes */
	/* Held values are checked after whatever the page model just did. */
	if (rn(4)) {
		h = pick_hold(-1);
		if (h >= 0)
			check_hold(h);
		return 0;
	}
	S.ops++;
	check_all_held();
	ci = pick_cache();
	op = rn(100);
	if (ci < 0 || (op < 4 && rn(2)))
		op = 200;
	if (op < 3)
		c_destroy(ci);
	else if (op < 30)
		c_put(ci);
	else if (op < 55)
		c_get(ci, rn(2));
	else if (op < 70) {
		h = pick_hold(ci);
		if (h >= 0)
			c_release(h);
	} else if (op < 76)
		c_remove(ci);
	else if (op < 80)
		c_reserve(ci);
	else if (op < 84) {
		for (r = 0; r < MC_RESV; r++)
			if (R[r].used && R[r].ci == ci) {
				c_commit_or_abort(r, rn(3) != 0);
				break;
			}
	} else if (op < 89)
		check_stats(ci);
	else if (op < 93)
		c_bad(ci);
	else if (op < 97)
		purged = c_purge(ci);
	else if (op < 99) {
		if (MC[ci].unsure && !budget)
			c_settle(ci);
	} else
		c_create();
	if (op == 200)
		c_create();
	if (budget)
		mcache_purged_elsewhere();
	ci = pick_cache();
	if (ci >= 0)
		check_stats(ci);
	return purged;
}

int mcache_child_check(void)
{
	int bad = 0;

	for (int h = 0; h < MC_HOLDS; h++)
		if (H[h].used && !value_ok(H[h].p, H[h].vlen, MC[H[h].ci].id,
					   H[h].key, H[h].ver)) {
			fprintf(stderr, "forked child: cache %u's held value of "
				"key %d is not intact\n", MC[H[h].ci].id, H[h].key);
			bad = 1;
		}
	for (int r = 0; r < MC_RESV; r++)
		if (R[r].used && !value_ok(R[r].buf, R[r].vlen, MC[R[r].ci].id,
					   R[r].key, R[r].ver)) {
			fprintf(stderr, "forked child: a reserved buffer of cache "
				"%u is not intact\n", MC[R[r].ci].id);
			bad = 1;
		}
	{
		/* The child forgets its parent's caches but may make its own. */
		vrange_cache *c;
		const void *v;
		size_t n;
		int rc = vrange_cache_create(NULL, &c);

		if (!rc)
			rc = vrange_cache_put(c, "child", 5, "value", 6);
		if (!rc)
			rc = vrange_cache_get(c, "child", 5, &v, &n);
		if (!rc && (n != 6 || memcmp(v, "value", 6)))
			rc = -EBADMSG;
		if (!rc)
			rc = vrange_cache_release(c, v);
		if (!rc)
			rc = vrange_cache_destroy(c);
		if (rc) {
			fprintf(stderr, "forked child: a cache of its own: %d\n", rc);
			bad = 1;
		}
	}
	return bad;
}

void mcache_teardown(int budget)
{
	budget_on = budget;
	for (int h = 0; h < MC_HOLDS; h++)
		if (H[h].used)
			c_release(h);
	for (int r = 0; r < MC_RESV; r++)
		if (R[r].used)
			c_commit_or_abort(r, 0);
	for (int ci = 0; ci < MC_CACHES; ci++) {
		if (!MC[ci].c)
			continue;
		if (budget)
			mcache_purged_elsewhere();
		else if (MC[ci].unsure)
			c_settle(ci);
		check_stats(ci);
		c_destroy(ci);
		if (MC[ci].c)
			model_fail("cache %u: destroy refused at the end", MC[ci].id);
	}
}

void mcache_summary(void)
{
	printf("cache model: %" PRIu64 " operations: %" PRIu64 " puts, %" PRIu64
	       " gets (%" PRIu64 " hits, %" PRIu64 " misses), %" PRIu64
	       " values lost to purges, %" PRIu64 " evicted, %" PRIu64
	       " reservations, %" PRIu64 " purges, %" PRIu64 " settles (%" PRIu64
	       " checked the purge order), %" PRIu64 " -EBUSY, %" PRIu64
	       " bad inputs, %" PRIu64 " held values checked\n", S.ops, S.puts,
	       S.gets, S.hits, S.misses, S.lost, S.evicted, S.resv, S.purges,
	       S.settles, S.order_checks, S.ebusy, S.bad, S.holds_checked);
}
