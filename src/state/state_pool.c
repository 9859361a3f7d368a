/* SPDX-License-Identifier: MIT */
/*
 * state_pool.c - slots for the state of regions nobody else holds yet (see
 * the header): one memfd per process, mapped once over a large reserved
 * range and grown by ftruncate; power-of-two slots with a free list each.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "state_pool.h"

#define POOL_NAME "vrange-pool"
/* Address space reserved for one pool (pages cost nothing until used). */
#define POOL_RESERVE (64ull << 30)
#define POOL_RESERVE_MIN (1ull << 30)
/* The file grows in steps of this. */
#define POOL_GROW (2u << 20)
/* Fresh slots are faulted in this many bytes at a time (one madvise, not a
 * page fault per slot: a shmem fault is most of a create's cost). */
#define POOL_POPULATE (64u << 10)
#define SLOT_MIN_SHIFT 8u
#define SLOT_MAX_SHIFT 18u
#define NCLASSES (SLOT_MAX_SHIFT - SLOT_MIN_SHIFT + 1)

struct pool {
	int fd;
	char *base;
	uint64_t reserved;  /* bytes of address space mapped */
	uint64_t size;      /* bytes of the file */
	uint64_t bump;      /* first byte never handed out */
	uint64_t populated; /* bytes faulted in ahead of use */
	uint64_t live;      /* slots handed out and not freed */
	bool sealed;        /* shared with a fork: no more slots from it */
	uint64_t free_head[NCLASSES]; /* offset + 1 of a free slot, 0 = none */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool *current;

static int pool_new(struct pool **out)
{
	struct pool *p = calloc(1, sizeof(*p));
	uint64_t want = POOL_RESERVE;
	void *m = MAP_FAILED;

	if (!p)
		return -ENOMEM;
	p->fd = memfd_create(POOL_NAME, MFD_CLOEXEC);
	if (p->fd < 0) {
		int r = -errno;

		free(p);
		return r;
	}
	/* The reservation opens (PROT_READ|PROT_WRITE) only as far as the
	 * file reaches: beyond its end every page would raise SIGBUS, and
	 * anything that sweeps readable memory (a core dump, valgrind's leak
	 * scan, which took one fault per page of 16 GiB and never finished)
	 * must skip it. */
	for (;;) {
		m = mmap(NULL, want, PROT_NONE,
			 MAP_SHARED | MAP_NORESERVE, p->fd, 0);
		if (m != MAP_FAILED || want <= POOL_RESERVE_MIN)
			break;
		want >>= 2;
	}
	if (m == MAP_FAILED) {
		close(p->fd);
		free(p);
		return -ENOMEM;
	}
	p->base = m;
	p->reserved = want;
	*out = p;
	return 0;
}

static void pool_drop(struct pool *p)
{
	munmap(p->base, p->reserved);
	close(p->fd);
	free(p);
}

static unsigned int class_of(size_t bytes)
{
	unsigned int c = 0;

	while (((size_t)1 << (SLOT_MIN_SHIFT + c)) < bytes)
		c++;
	return c;
}

/* Fault the pool in up to end (and a step beyond) in one call.  Where the
 * kernel refuses (no MADV_POPULATE_WRITE before 5.14, no memory now), the
 * slots up to the file's end fault one by one, as any memory would. */
static void populate(struct pool *p, uint64_t end)
{
	uint64_t to;

	if (end <= p->populated)
		return;
	to = (end + POOL_POPULATE - 1) & ~(uint64_t)(POOL_POPULATE - 1);
	if (to > p->size)
		to = p->size;
	if (madvise(p->base + p->populated, to - p->populated,
		    MADV_POPULATE_WRITE) == 0)
		p->populated = to;
	else
		p->populated = p->size; /* asked again once the file grows */
}

static int carve(struct pool *p, unsigned int c, uint64_t *off)
{
	uint64_t bytes = (uint64_t)1 << (SLOT_MIN_SHIFT + c);
	uint64_t at = (p->bump + bytes - 1) & ~(bytes - 1);

	if (p->free_head[c]) {
		*off = p->free_head[c] - 1;
		memcpy(&p->free_head[c], p->base + *off, sizeof(uint64_t));
		memset(p->base + *off, 0, bytes);
		return 0;
	}
	if (at + bytes > p->reserved)
		return -ENOMEM;
	if (at + bytes > p->size) {
		uint64_t size = (at + bytes + POOL_GROW - 1) & ~(uint64_t)(POOL_GROW - 1);

		if (size > p->reserved)
			size = p->reserved;
		if (vr_ftruncate(p->fd, size) < 0 ||
		    mprotect(p->base + p->size, size - p->size,
			     PROT_READ | PROT_WRITE) < 0)
			return -errno;
		p->size = size;
	}
	populate(p, at + bytes);
	p->bump = at + bytes;
	*off = at;
	return 0;
}

int pool_alloc(size_t bytes, struct pool_slot *out)
{
	unsigned int c;
	uint64_t off = 0;
	int r = 0;

	if (bytes == 0 || bytes > POOL_SLOT_MAX)
		return -EINVAL;
	c = class_of(bytes);
	pthread_mutex_lock(&pool_lock);
	if (!current || current->sealed)
		r = pool_new(&current);
	if (r == 0)
		r = carve(current, c, &off);
	if (r == 0) {
		current->live++;
		out->pool = current;
		out->off = off;
		out->bytes = 1u << (SLOT_MIN_SHIFT + c);
		out->addr = current->base + off;
		out->fd = current->fd;
	}
	pthread_mutex_unlock(&pool_lock);
	return r;
}

void pool_free(struct pool_slot *s)
{
	struct pool *p = s->pool;
	bool drop;

	if (!p)
		return;
	pthread_mutex_lock(&pool_lock);
	if (!p->sealed && !s->forked) {
		unsigned int c = class_of(s->bytes);

		memcpy(p->base + s->off, &p->free_head[c], sizeof(uint64_t));
		p->free_head[c] = s->off + 1;
	}
	/* A slot shared with a fork child is never handed out again (the
	 * child may still use it), nor is any slot of a pool inherited.  An
	 * inherited pool goes with its last slot; our own stays (making one
	 * costs a 64 GiB reservation and its teardown). */
	drop = --p->live == 0 && p->sealed;
	pthread_mutex_unlock(&pool_lock);
	if (drop)
		pool_drop(p);
	s->pool = NULL;
	s->addr = NULL;
	s->fd = -1;
}

void pool_fork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
}

void pool_fork_parent(void)
{
	pthread_mutex_unlock(&pool_lock);
}

/* The pool is the parent's: slots only come from a pool of our own. */
void pool_fork_child(void)
{
	if (current) {
		current->sealed = true;
		if (current->live == 0)
			pool_drop(current);
	}
	current = NULL;
	pthread_mutex_init(&pool_lock, NULL);
}
