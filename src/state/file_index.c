/* SPDX-License-Identifier: MIT */
/*
 * file_index.c - the registry's index of files by device and inode
 * (file_index.h says why).
 */
#include <stdint.h>
#include <stdlib.h>

#include "file_index.h"
#include "file_state.h"

#define FIRST_BUCKETS 64u

/* A first table needs no allocation: an index exists from the start. */
static struct vfile *first_table[FIRST_BUCKETS];
static struct vfile **table = first_table;
static size_t nbuckets = FIRST_BUCKETS; /* a power of two */
static size_t nentries;

static size_t bucket_of(dev_t dev, ino_t ino, size_t n)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)dev * 0xc2b2ae3d27d4eb4full;

	return (size_t)(h ^ h >> 29) & (n - 1);
}

static void push(struct vfile **t, size_t n, struct vfile *f)
{
	struct vfile **head = &t[bucket_of(f->dev, f->ino, n)];

	f->hprev = NULL;
	f->hnext = *head;
	if (*head)
		(*head)->hprev = f;
	*head = f;
}

/* Twice the buckets, entries kept in their chains' order (each chain is
 * moved from its tail, so two entries of one key keep theirs).  Without
 * memory the table stays as it is. */
static void grow(void)
{
	size_t n = nbuckets * 2;
	struct vfile **t = calloc(n, sizeof(*t));

	if (!t)
		return;
	for (size_t b = 0; b < nbuckets; b++) {
		struct vfile *f = table[b];

		while (f && f->hnext)
			f = f->hnext;
		for (struct vfile *prev; f; f = prev) {
			prev = f->hprev;
			push(t, n, f);
		}
	}
	if (table != first_table)
		free(table);
	table = t;
	nbuckets = n;
}

void findex_add(struct vfile *f)
{
	if (f->anon)
		return;
	if (nentries >= nbuckets)
		grow();
	push(table, nbuckets, f);
	f->indexed = true;
	nentries++;
}

void findex_del(struct vfile *f)
{
	if (!f->indexed)
		return;
	if (f->hprev)
		f->hprev->hnext = f->hnext;
	else
		table[bucket_of(f->dev, f->ino, nbuckets)] = f->hnext;
	if (f->hnext)
		f->hnext->hprev = f->hprev;
	f->hnext = f->hprev = NULL;
	f->indexed = false;
	nentries--;
}

struct vfile *findex_find(dev_t dev, ino_t ino, bool dormant)
{
	for (struct vfile *f = table[bucket_of(dev, ino, nbuckets)]; f; f = f->hnext)
		if (f->dev == dev && f->ino == ino && f->dormant == dormant)
			return f;
	return NULL;
}
