/* SPDX-License-Identifier: MIT */
/* held_files.c - the files this process holds (see held_files.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "fd_stat.h"
#include "held_files.h"

static void held_add(struct held_set *h, dev_t dev, ino_t ino, int fd)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct held_id *v = realloc(h->v, cap * sizeof(*v));

		if (!v) {
			h->doubt = true;
			return;
		}
		h->v = v;
		h->cap = cap;
	}
	h->v[h->n++] = (struct held_id){ dev, ino, fd };
}

/* Every file some mapping of this process maps. */
static void add_mapped(struct held_set *h)
{
	FILE *m = fopen("/proc/self/maps", "re");
	char *line = NULL;
	size_t cap = 0;

	if (!m) {
		h->doubt = true;
		return;
	}
	while (getline(&line, &cap, m) > 0) {
		unsigned long ino;
		unsigned int maj, min;

		if (sscanf(line, "%*x-%*x %*s %*x %x:%x %lu", &maj, &min, &ino) == 3 &&
		    ino)
			held_add(h, makedev(maj, min), (ino_t)ino, -1);
	}
	free(line);
	fclose(m);
}

/* The file behind descriptor n (named e in the listing d): 0, 1 gone
 * meanwhile, -1 not known.  fstat of the number where that is the system
 * call itself; elsewhere statx of the link, since the ashmem shim
 * interposes fstat and would take its registry lock. */
static int stat_listed(DIR *d, const char *e, int n, dev_t *dev, ino_t *ino)
{
#if FD_STAT_RAW
	struct stat st;

	(void)d, (void)e;
	if (fd_stat(n, &st) < 0)
		return errno == EBADF ? 1 : -1;
	*dev = st.st_dev;
	*ino = st.st_ino;
#else
	struct statx sx;

	(void)n;
	if (statx(dirfd(d), e, 0, STATX_INO, &sx) < 0)
		return errno == ENOENT ? 1 : -1;
	*dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
	*ino = (ino_t)sx.stx_ino;
#endif
	return 0;
}

/* Every file behind a descriptor of this process.  One that could not be
 * looked at may be the one that holds an orphan's file: doubt. */
static void add_descriptors(struct held_set *h)
{
	DIR *d = opendir("/proc/self/fd");

	if (!d) {
		h->doubt = true;
		return;
	}
	for (struct dirent *e; (errno = 0, e = readdir(d));) {
		int n = atoi(e->d_name), r;
		dev_t dev;
		ino_t ino;

		if (e->d_name[0] < '0' || e->d_name[0] > '9' || n == dirfd(d))
			continue;
		r = stat_listed(d, e->d_name, n, &dev, &ino);
		if (r < 0)
			h->doubt = true;
		else if (r == 0)
			held_add(h, dev, ino, n);
	}
	if (errno) /* the list ended early: the rest may hold one */
		h->doubt = true;
	closedir(d);
}

static int by_file(const void *a, const void *b)
{
	const struct held_id *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static void held_build(struct held_set *h)
{
	h->built = true;
	add_mapped(h);
	add_descriptors(h);
	if (h->n > 1)
		qsort(h->v, h->n, sizeof(*h->v), by_file);
}

bool held_here(struct held_set *h, dev_t dev, ino_t ino, int own_fd)
{
	size_t lo = 0, hi;

	if (!h->built)
		held_build(h);
	if (h->doubt)
		return true;
	/* The first entry not before (dev, ino), then its equals. */
	for (hi = h->n; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;
		const struct held_id *m = &h->v[mid];

		if (m->dev < dev || (m->dev == dev && m->ino < ino))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < h->n && h->v[lo].dev == dev && h->v[lo].ino == ino; lo++)
		if (h->v[lo].fd < 0 || h->v[lo].fd != own_fd)
			return true;
	return false;
}

void held_free(struct held_set *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
