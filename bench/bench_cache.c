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
 * - get + release on 2 threads, each on its own keys (ops per second).
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
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		struct pentry *e = plain_get(p, keys[i % NKEYS]);

		sink += ((unsigned char *)e->val)[i % VLEN];
		plain_release(p, e);
	}
	return (now_ns() - t0) / (double)n;
}

static double plain_hot(void *arg, long n)
{
	struct plain *p = arg;
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		struct pentry *e = plain_get(p, keys[7]);

		sink += ((unsigned char *)e->val)[i % VLEN];
		plain_release(p, e);
	}
	return (now_ns() - t0) / (double)n;
}

static double plain_puts(void *arg, long n)
{
	struct plain *p = arg;
	double t0 = now_ns();

	for (long i = 0; i < n; i++)
		plain_put(p, keys[i % NKEYS], value, VLEN);
	return (now_ns() - t0) / (double)n;
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
	double t0 = now_ns();

	for (long i = 0; i < n; i++)
		vget(arg, keys[i % NKEYS], i);
	return (now_ns() - t0) / (double)n;
}

static double vr_hot(void *arg, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++)
		vget(arg, keys[7], i);
	return (now_ns() - t0) / (double)n;
}

static double vr_puts(void *arg, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		int r = vrange_cache_put(arg, keys[i % NKEYS], KLEN, value, VLEN);

		if (r < 0)
			die("vrange_cache_put", -r);
	}
	return (now_ns() - t0) / (double)n;
}

/* --- two threads ----------------------------------------------------------- */

struct mt {
	void *cache;
	bool plain;
	int half;
	long n;
	pthread_barrier_t *go;
};

static void *mt_thread(void *arg)
{
	struct mt *m = arg;

	pthread_barrier_wait(m->go);
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
	return NULL;
}

/* Million get+release per second on 2 threads. */
static double mt_rate(void *cache, bool plain, long n)
{
	pthread_barrier_t go;
	struct mt m[2];
	pthread_t t[2];
	double t0;

	pthread_barrier_init(&go, NULL, 3);
	for (int i = 0; i < 2; i++) {
		m[i] = (struct mt){ cache, plain, i, n, &go };
		if (pthread_create(&t[i], NULL, mt_thread, &m[i]))
			die("pthread_create", EAGAIN);
	}
	pthread_barrier_wait(&go);
	t0 = now_ns();
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
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
	printf("bench_cache: %d keys, %d-byte values, best of %d, %ld ops each\n",
	       NKEYS, VLEN, REPS, n);
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
	mb = mt_rate(p, true, n);
	ma = mt_rate(c, false, n);
	printf("get+release on 2 threads   %8.2f M/s  plain (one mutex)    %8.2f M/s  speed-up %5.2fx\n",
	       ma, mb, ma / mb);
	printf("(plain cache in a single-threaded process: put %.1f ns, get+release %.1f ns)\n",
	       st_put, st_hit);
	pthread_mutex_unlock(&idle_lock);
	pthread_join(idle, NULL);
	r = vrange_cache_destroy(c);
	if (r < 0)
		die("vrange_cache_destroy", -r);
	return 0;
}
