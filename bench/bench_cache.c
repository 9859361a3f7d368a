/* SPDX-License-Identifier: MIT */
/*
 * bench_cache.c - what the purgeable cache costs against a plain one.
 *
 * The plain cache is what an application writes by hand: one mutex, a
 * chained hash table (same hash function) and malloc'd values with a
 * reference count.  Measured in the same run:
 * - get + release of a 4 KiB value that hits, cycling over 1024 keys
 *   (target <= 2x the plain lookup), and on one hot key;
 * - put of 4 KiB (target <= 2x malloc + memcpy + insert, the old value
 *   freed);
 * - get + release on 2 threads, each on its own keys (ops per second);
 * - put of a new key (and remove of an old one: a steady 1024 entries),
 *   what a client does after a miss, against the same in the plain cache;
 * - 4 threads, 2048 keys each, 90% get+release and 10% put (ops per
 *   second against the plain cache's one mutex).
 * Figures are the best of several repetitions.  Nothing asserts on time.
 *
 * A second, idle thread lives through every run: a cache that needs a
 * lock serves threads, and glibc elides the atomic operations of a mutex
 * while a process has one thread only (the single-threaded figures of the
 * plain cache are printed too, for reference).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vrange.h>

#include "bench_util.h"

#define NKEYS 1024
#define VLEN 4096
#define REPS 7
#define KLEN 16

/* --- the plain cache ------------------------------------------------------ */

struct pentry {
	struct pentry *next;
	unsigned char key[KLEN];
	void *val;
	size_t vlen;
	unsigned int refs;
};

struct plain {
	pthread_mutex_t lock;
	struct pentry *b[4096];
};

static uint64_t hash(const unsigned char *k, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;

	for (; n >= 8; k += 8, n -= 8) {
		memcpy(&w, k, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	w = 0;
	memcpy(&w, k, n);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
	return h ^ (h >> 29);
}

static struct pentry **plain_find(struct plain *p, const unsigned char *k)
{
	struct pentry **l = &p->b[hash(k, KLEN) & 4095];

	while (*l && memcmp((*l)->key, k, KLEN))
		l = &(*l)->next;
	return l;
}

static void plain_put(struct plain *p, const unsigned char *k, const void *v, size_t n)
{
	struct pentry *e = malloc(sizeof(*e)), **l, *old;

	if (!e || !(e->val = malloc(n)))
		die("malloc", ENOMEM);
	memcpy(e->key, k, KLEN);
	memcpy(e->val, v, n);
	e->vlen = n;
	e->refs = 0;
	pthread_mutex_lock(&p->lock);
	l = plain_find(p, k);
	old = *l;
	e->next = old ? old->next : NULL;
	*l = e;
	pthread_mutex_unlock(&p->lock);
	if (old) { /* no holders in this benchmark */
		free(old->val);
		free(old);
	}
}

static struct pentry *plain_get(struct plain *p, const unsigned char *k)
{
	struct pentry *e;

	pthread_mutex_lock(&p->lock);
	e = *plain_find(p, k);
	if (e)
		e->refs++;
	pthread_mutex_unlock(&p->lock);
	return e;
}

static void plain_release(struct plain *p, struct pentry *e)
{
	pthread_mutex_lock(&p->lock);
	e->refs--;
	pthread_mutex_unlock(&p->lock);
}

/* --- the runs ------------------------------------------------------------- */

static unsigned char keys[NKEYS][KLEN];
static unsigned char value[VLEN];
static volatile unsigned long sink;

/*
 * One thread's runs are timed in its CPU time: on a shared machine the
 * wall clock of a run counts whatever else ran meanwhile, and best-of
 * cannot always find a run nobody preempted.
 */
static double cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double best_of(double (*fn)(void *, long), void *arg, long n)
{
	double best = 1e30;

	for (int r = 0; r < REPS; r++) {
		double t = fn(arg, n);

		if (t < best)
			best = t;
	}
	return best;
}

/* Best of each, the two runs taking turns (a busy machine disturbs both
 * alike); prints the line and returns the ratio. */
static double compare(const char *what, double (*fa)(void *, long), void *a,
		      const char *base, double (*fb)(void *, long), void *b,
		      long n, const char *target)
{
	double ta = 1e30, tb = 1e30;

	for (int r = 0; r < REPS; r++) {
		double t = fb(b, n);

		tb = t < tb ? t : tb;
		t = fa(a, n);
		ta = t < ta ? t : ta;
	}
	printf("%-26s %8.1f ns   %-20s %8.1f ns   ratio %5.2fx%s\n",
	       what, ta, base, tb, ta / tb, target);
	return ta / tb;
}

static double plain_hits(void *arg, long n)
{
	struct plain *p = arg;
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++) {
		struct pentry *e = plain_get(p, keys[i % NKEYS]);

		sink += ((unsigned char *)e->val)[i % VLEN];
		plain_release(p, e);
	}
	return (cpu_ns() - t0) / (double)n;
}

static double plain_hot(void *arg, long n)
{
	struct plain *p = arg;
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++) {
		struct pentry *e = plain_get(p, keys[7]);

		sink += ((unsigned char *)e->val)[i % VLEN];
		plain_release(p, e);
	}
	return (cpu_ns() - t0) / (double)n;
}

static double plain_puts(void *arg, long n)
{
	struct plain *p = arg;
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++)
		plain_put(p, keys[i % NKEYS], value, VLEN);
	return (cpu_ns() - t0) / (double)n;
}

static void vget(vrange_cache *c, const unsigned char *k, long i)
{
	const void *v;
	size_t len;
	int r = vrange_cache_get(c, k, KLEN, &v, &len);

	if (r < 0)
		die("vrange_cache_get", -r);
	sink += ((const unsigned char *)v)[i % VLEN];
	r = vrange_cache_release(c, v);
	if (r < 0)
		die("vrange_cache_release", -r);
}

static double vr_hits(void *arg, long n)
{
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++)
		vget(arg, keys[i % NKEYS], i);
	return (cpu_ns() - t0) / (double)n;
}

static double vr_hot(void *arg, long n)
{
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++)
		vget(arg, keys[7], i);
	return (cpu_ns() - t0) / (double)n;
}

static double vr_puts(void *arg, long n)
{
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++) {
		int r = vrange_cache_put(arg, keys[i % NKEYS], KLEN, value, VLEN);

		if (r < 0)
			die("vrange_cache_put", -r);
	}
	return (cpu_ns() - t0) / (double)n;
}

/* --- new keys: what a client does after a miss ------------------------------- */

/* Put a key not in the cache and drop the one put CHURN_LIVE puts ago: a
 * steady CHURN_LIVE entries, every put a new one (the usual put comes
 * after a miss, not over a value still there). */
#define CHURN_KEYS 65536
#define CHURN_LIVE 1024

static unsigned char (*ckeys)[KLEN];
static long churn_at; /* keys [churn_at - CHURN_LIVE, churn_at) are stored */

static void plain_remove(struct plain *p, const unsigned char *k)
{
	struct pentry **l, *e;

	pthread_mutex_lock(&p->lock);
	l = plain_find(p, k);
	e = *l;
	if (e)
		*l = e->next;
	pthread_mutex_unlock(&p->lock);
	if (e) {
		free(e->val);
		free(e);
	}
}

static double plain_churn(void *arg, long n)
{
	struct plain *p = arg;
	double t0 = cpu_ns();

	for (long i = churn_at; i < churn_at + n; i++) {
		plain_put(p, ckeys[i % CHURN_KEYS], value, VLEN);
		plain_remove(p, ckeys[(i - CHURN_LIVE) % CHURN_KEYS]);
	}
	return (cpu_ns() - t0) / (double)n;
}

static double vr_churn(void *arg, long n)
{
	double t0 = cpu_ns();

	for (long i = churn_at; i < churn_at + n; i++) {
		int r = vrange_cache_put(arg, ckeys[i % CHURN_KEYS], KLEN, value, VLEN);

		if (r < 0)
			die("vrange_cache_put", -r);
		r = vrange_cache_remove(arg, ckeys[(i - CHURN_LIVE) % CHURN_KEYS], KLEN);
		if (r < 0 && r != -ENOENT)
			die("vrange_cache_remove", -r);
	}
	return (cpu_ns() - t0) / (double)n;
}

/* Both caches hold the same keys before a round of churn. */
static void churn_fill(struct plain *p, vrange_cache *c)
{
	for (long i = 0; i < CHURN_LIVE; i++) {
		plain_put(p, ckeys[i], value, VLEN);
		if (vrange_cache_put(c, ckeys[i], KLEN, value, VLEN) < 0)
			die("vrange_cache_put", ENOMEM);
	}
	churn_at = CHURN_LIVE;
}

/* --- several threads: a client's mix over many keys ------------------------ */

#define MIX_THREADS 4
#define MIX_KEYS 2048 /* per thread */

struct mix {
	void *cache;
	bool plain;
	int t;
	long n;
	pthread_barrier_t *go;
	double cpu;  /* out: this thread's CPU time, ns */
};

/* 90% get+release of a key of this thread's, 10% put of one (a refill). */
static void *mix_thread(void *arg)
{
	struct mix *m = arg;
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(m->t + 1);
	double c0;

	pthread_barrier_wait(m->go);
	c0 = cpu_ns();
	for (long i = 0; i < m->n; i++) {
		const unsigned char *k;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		k = ckeys[m->t * MIX_KEYS + (long)(x % MIX_KEYS)];
		if (x % 10 == 0) {
			if (m->plain)
				plain_put(m->cache, k, value, VLEN);
			else if (vrange_cache_put(m->cache, k, KLEN, value, VLEN) < 0)
				die("vrange_cache_put", ENOMEM);
		} else if (m->plain) {
			struct pentry *e = plain_get(m->cache, k);

			sink += ((unsigned char *)e->val)[i % VLEN];
			plain_release(m->cache, e);
		} else {
			vget(m->cache, k, i);
		}
	}
	m->cpu = cpu_ns() - c0;
	return NULL;
}

/*
 * Million operations per second of the mix on MIX_THREADS threads (wall
 * clock), and in *cpu the CPU time an operation cost, all threads summed
 * (on a machine whose cores are busy with other work, the wall clock says
 * little about the cache).
 */
static double mix_rate(void *cache, bool plain, long n, double *cpu)
{
	pthread_barrier_t go;
	struct mix m[MIX_THREADS];
	pthread_t t[MIX_THREADS];
	double t0;

	for (int i = 0; i < MIX_THREADS * MIX_KEYS; i++) {
		if (plain)
			plain_put(cache, ckeys[i], value, VLEN);
		else if (vrange_cache_put(cache, ckeys[i], KLEN, value, VLEN) < 0)
			die("vrange_cache_put", ENOMEM);
	}
	pthread_barrier_init(&go, NULL, MIX_THREADS + 1);
	for (int i = 0; i < MIX_THREADS; i++) {
		m[i] = (struct mix){ cache, plain, i, n, &go, 0 };
		if (pthread_create(&t[i], NULL, mix_thread, &m[i]))
			die("pthread_create", EAGAIN);
	}
	pthread_barrier_wait(&go);
	t0 = now_ns();
	*cpu = 0;
	for (int i = 0; i < MIX_THREADS; i++) {
		pthread_join(t[i], NULL);
		*cpu += m[i].cpu;
	}
	*cpu /= MIX_THREADS * (double)n;
	pthread_barrier_destroy(&go);
	return MIX_THREADS * (double)n / (now_ns() - t0) * 1e3;
}

/* --- two threads ----------------------------------------------------------- */

struct mt {
	void *cache;
	bool plain;
	int half;
	long n;
	pthread_barrier_t *go;
	double cpu;  /* out: this thread's CPU time, ns */
};

static void *mt_thread(void *arg)
{
	struct mt *m = arg;
	double c0;

	pthread_barrier_wait(m->go);
	c0 = cpu_ns();
	for (long i = 0; i < m->n; i++) {
		const unsigned char *k = keys[(i % (NKEYS / 2)) + m->half * (NKEYS / 2)];

		if (m->plain) {
			struct pentry *e = plain_get(m->cache, k);

			sink += ((unsigned char *)e->val)[0];
			plain_release(m->cache, e);
		} else {
			vget(m->cache, k, i);
		}
	}
	m->cpu = cpu_ns() - c0;
	return NULL;
}

/* Million get+release per second on 2 threads (wall clock), and in *cpu
 * the CPU time one cost, both threads summed. */
static double mt_rate(void *cache, bool plain, long n, double *cpu)
{
	pthread_barrier_t go;
	struct mt m[2];
	pthread_t t[2];
	double t0;

	pthread_barrier_init(&go, NULL, 3);
	for (int i = 0; i < 2; i++) {
		m[i] = (struct mt){ cache, plain, i, n, &go, 0 };
		if (pthread_create(&t[i], NULL, mt_thread, &m[i]))
			die("pthread_create", EAGAIN);
	}
	pthread_barrier_wait(&go);
	t0 = now_ns();
	*cpu = 0;
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		*cpu += m[i].cpu;
	}
	*cpu /= 2.0 * (double)n;
	pthread_barrier_destroy(&go);
	return 2.0 * (double)n / (now_ns() - t0) * 1e3;
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;

static void *idle_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&idle_lock); /* until main unlocks it */
	pthread_mutex_unlock(&idle_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t idle;
	double st_put, st_hit;
	long n = argc > 1 ? atol(argv[1]) : 200000;
	struct plain *p = calloc(1, sizeof(*p));
	vrange_cache *c;
	double ma, mb;
	int r;

	if (!p)
		die("calloc", ENOMEM);
	pthread_mutex_init(&p->lock, NULL);
	for (int i = 0; i < NKEYS; i++)
		snprintf((char *)keys[i], KLEN, "key-%011d", i);
	for (int i = 0; i < VLEN; i++)
		value[i] = (unsigned char)i;
	r = vrange_cache_create(NULL, &c);
	if (r < 0)
		die("vrange_cache_create", -r);
	printf("bench_cache: %d keys, %d-byte values, best of %d, %ld ops each "
	       "(times are CPU time)\n", NKEYS, VLEN, REPS, n);
	/* Reference only: one thread, mutexes without atomics. */
	st_put = best_of(plain_puts, p, n);
	st_hit = best_of(plain_hits, p, n);
	pthread_mutex_lock(&idle_lock);
	if (pthread_create(&idle, NULL, idle_thread, NULL))
		die("pthread_create", EAGAIN);

	compare("put 4 KiB", vr_puts, c, "malloc+memcpy+insert", plain_puts, p, n,
		" (target <= 2x)");
	compare("get+release 4 KiB hit", vr_hits, c, "mutex+hash lookup", plain_hits,
		p, n, " (target <= 2x)");
	compare("get+release, one hot key", vr_hot, c, "mutex+hash lookup", plain_hot,
		p, n, "");
	{
		double ca, cb;

		mb = mt_rate(p, true, n, &cb);
		ma = mt_rate(c, false, n, &ca);
		printf("get+release on 2 threads: CPU per op %.1f ns, plain (one mutex) %.1f ns, "
		       "ratio %.2fx; wall %.2f M/s, plain %.2f M/s\n", ca, cb, ca / cb, ma, mb);
	}
	ckeys = malloc(sizeof(*ckeys) * CHURN_KEYS);
	if (!ckeys)
		die("malloc", ENOMEM);
	for (int i = 0; i < CHURN_KEYS; i++)
		snprintf((char *)ckeys[i], KLEN, "new-%011d", i);
	churn_fill(p, c);
	{
		double ta = 1e30, tb = 1e30;

		/* Each round goes on from where the last stopped: new keys. */
		for (int rep = 0; rep < REPS; rep++) {
			double t = plain_churn(p, n / 4);

			tb = t < tb ? t : tb;
			t = vr_churn(c, n / 4);
			ta = t < ta ? t : ta;
			churn_at += n / 4;
		}
		printf("%-26s %8.1f ns   %-20s %8.1f ns   ratio %5.2fx%s\n",
		       "put new key + remove", ta, "plain put + remove", tb, ta / tb,
		       " (target <= 2x)");
	}
	for (long i = churn_at - CHURN_LIVE; i < churn_at; i++) {
		plain_remove(p, ckeys[i % CHURN_KEYS]);
		(void)vrange_cache_remove(c, ckeys[i % CHURN_KEYS], KLEN);
	}
	{
		double ca, cb;

		mb = mix_rate(p, true, n / 2, &cb);
		ma = mix_rate(c, false, n / 2, &ca);
		printf("%d threads x %d keys, 90%% get+release, 10%% put: CPU per op %.1f ns, "
		       "plain %.1f ns, ratio %.2fx; wall %.2f M/s, plain %.2f M/s\n",
		       MIX_THREADS, MIX_KEYS, ca, cb, ca / cb, ma, mb);
	}
	printf("(plain cache in a single-threaded process: put %.1f ns, get+release %.1f ns)\n",
	       st_put, st_hit);
	pthread_mutex_unlock(&idle_lock);
	pthread_join(idle, NULL);
	r = vrange_cache_destroy(c);
	if (r < 0)
		die("vrange_cache_destroy", -r);
	return 0;
}
