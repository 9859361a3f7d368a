/* SPDX-License-Identifier: MIT */
/* seqlock.c - the writer side of the lock-free address tables (seqlock.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "seqlock.h"

/* Room for one more entry: the array itself, or a bigger copy of it. */
static struct seq_array *room(struct seq_array *_Atomic *cur, size_t size)
{
	struct seq_array *a = atomic_load(cur), *na;
	size_t cap;

	if (a && a->n < a->cap)
		return a;
	cap = a ? a->cap * 2 : 16;
	na = malloc(sizeof(*na) + cap * size);
	if (!na)
		return NULL;
	na->n = a ? a->n : 0;
	na->cap = cap;
	na->retired = a;
	if (a)
		memcpy(na->e, a->e, a->n * size);
	atomic_store(cur, na);
	return na;
}

int seq_array_insert(struct seq_array *_Atomic *cur, struct seqlock *seq,
		     size_t i, const void *entry, size_t size)
{
	struct seq_array *a = room(cur, size);
	char *e;

	if (!a)
		return -ENOMEM;
	e = (char *)a->e;
	seq_write_begin(seq);
	memmove(e + (i + 1) * size, e + i * size, (a->n - i) * size);
	memcpy(e + i * size, entry, size);
	a->n++;
	seq_write_end(seq);
	return 0;
}

void seq_array_remove(struct seq_array *a, struct seqlock *seq, size_t i,
		      size_t size)
{
	char *e = (char *)a->e;

	seq_write_begin(seq);
	memmove(e + i * size, e + (i + 1) * size, (a->n - i - 1) * size);
	a->n--;
	seq_write_end(seq);
}
