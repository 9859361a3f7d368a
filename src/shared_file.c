/* SPDX-License-Identifier: MIT */
/*
 * shared_file.c - volatile state that lives inside the file (see the header
 * for the layout): formatting, recognising and attaching, and the robust
 * process-shared lock with recovery from a holder that died.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shared_file.h"

#define VSHARED_MAGIC "libvrange-state1"
#define VSHARED_VERSION 1u
/* Extra arena slots beyond one per page, so a full tree can still split. */
#define ARENA_SLACK 16u
/* How long a lock holder may keep others waiting before they give up. */
#define LOCK_TIMEOUT_SEC 5

struct vshared_hdr {
	char magic[16];
	uint32_t version;
	uint32_t page_size;
	uint64_t user_size;
	uint64_t arena_bytes;
	uint64_t file_size;
	pthread_mutex_t lock;   /* process-shared, robust */
	_Atomic uint32_t ready; /* set last, after everything above */
};

static uint64_t round_page(uint64_t n)
{
	return (n + vr_page_size - 1) & ~((uint64_t)vr_page_size - 1);
}

/* Arena size and total file size for a user area of user_size bytes. */
static int layout(uint64_t user_size, uint64_t *arena_bytes, uint64_t *file_size)
{
	uint64_t pages = round_page(user_size) >> vr_page_shift;

	if (user_size == 0 || pages > UINT32_MAX - ARENA_SLACK)
		return -EINVAL;
	*arena_bytes = round_page(rt_arena_bytes((uint32_t)pages + ARENA_SLACK));
	*file_size = round_page(user_size) + *arena_bytes + vr_page_size;
	return 0;
}

static int init_lock(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int r;

	pthread_mutexattr_init(&a);
	r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (r == 0)
		r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (r == 0)
		r = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -r;
}

static int map_meta(int fd, uint64_t user_size, uint64_t arena_bytes,
		    struct vshared *s)
{
	size_t bytes = arena_bytes + vr_page_size;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       (off_t)round_page(user_size));

	if (p == MAP_FAILED)
		return -errno;
	s->map = p;
	s->map_bytes = bytes;
	s->hdr = (struct vshared_hdr *)((char *)p + arena_bytes);
	s->user_size = user_size;
	s->user_pages = round_page(user_size) >> vr_page_shift;
	s->arena_bytes = arena_bytes;
	return 0;
}

int vshared_format(int fd, uint64_t user_size)
{
	struct vshared s;
	struct rt_tree t;
	uint64_t arena_bytes, file_size;
	int r;

	vr_init_basic();
	r = layout(user_size, &arena_bytes, &file_size);
	if (r < 0)
		return r;
	if (ftruncate(fd, (off_t)file_size) < 0)
		return -errno;
	r = map_meta(fd, user_size, arena_bytes, &s);
	if (r < 0)
		return r;
	r = rt_format(&t, s.map, arena_bytes);
	if (r == 0)
		r = init_lock(&s.hdr->lock);
	if (r == 0) {
		memcpy(s.hdr->magic, VSHARED_MAGIC, sizeof(s.hdr->magic));
		s.hdr->version = VSHARED_VERSION;
		s.hdr->page_size = (uint32_t)vr_page_size;
		s.hdr->user_size = user_size;
		s.hdr->arena_bytes = arena_bytes;
		s.hdr->file_size = file_size;
		atomic_store_explicit(&s.hdr->ready, 1, memory_order_release);
	}
	vshared_close(&s);
	return r;
}

/* Check a header against the file it was found in. */
static int header_ok(const struct vshared_hdr *h, uint64_t file_size)
{
	uint64_t arena_bytes, expect;

	if (memcmp(h->magic, VSHARED_MAGIC, sizeof(h->magic)) != 0)
		return 0;
	if (h->version != VSHARED_VERSION || h->page_size != vr_page_size ||
	    layout(h->user_size, &arena_bytes, &expect) < 0 ||
	    arena_bytes != h->arena_bytes || expect != file_size ||
	    h->file_size != file_size)
		return -EIO;
	return 1;
}

int vshared_probe(int fd, uint64_t *user_size)
{
	struct vshared_hdr h;
	struct stat st;
	int r;

	vr_init_basic();
	if (fstat(fd, &st) < 0)
		return -EBADF;
	if (st.st_size < (off_t)(2 * vr_page_size) || st.st_size % vr_page_size)
		return 0;
	if (pread(fd, &h, sizeof(h), st.st_size - (off_t)vr_page_size) != sizeof(h))
		return 0;
	r = header_ok(&h, (uint64_t)st.st_size);
	if (r == 1)
		*user_size = h.user_size;
	return r;
}

int vshared_open(int fd, const struct stat *st, struct vshared *s,
		 struct rt_tree *tree)
{
	uint64_t user_size = 0;
	int r = vshared_probe(fd, &user_size);

	if (r <= 0)
		return r;
	r = map_meta(fd, user_size, (uint64_t)st->st_size - round_page(user_size) -
		     vr_page_size, s);
	if (r < 0)
		return r;
	/* Re-check what we mapped: the file may have changed since the pread. */
	if (header_ok(s->hdr, (uint64_t)st->st_size) != 1 ||
	    !atomic_load_explicit(&s->hdr->ready, memory_order_acquire) ||
	    rt_attach(tree, s->map, s->arena_bytes) < 0) {
		vshared_close(s);
		return -EIO;
	}
	return 1;
}

void vshared_close(struct vshared *s)
{
	if (s->map)
		munmap(s->map, s->map_bytes);
	s->map = NULL;
	s->hdr = NULL;
}

/*
 * The previous holder died inside its critical section.  Tree operations
 * are not crash-atomic, so if it died inside one the tree may be torn.
 * Keep it if it checks out; else reset it to "every page purged", which can
 * only make a later unmark report VRANGE_PURGED for pages that were fine
 * (the application rebuilds them) and never lets a purge touch anything.
 */
static int recover(struct vshared *s, struct rt_tree *tree)
{
	if (rt_check(tree) == 0)
		return 0;
	vr_debug("shared state torn by a dead process: reset to purged");
	memset(s->map, 0, s->arena_bytes);
	if (rt_format(tree, s->map, s->arena_bytes) < 0 ||
	    rt_mark_volatile(tree, 0, s->user_pages, 0, 0, NULL) < 0 ||
	    rt_mark_purged(tree, 0, s->user_pages, NULL) < 0)
		return -EIO;
	return 0;
}

int vshared_lock(struct vshared *s, struct rt_tree *tree)
{
	struct timespec deadline;
	int r;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += LOCK_TIMEOUT_SEC;
	r = pthread_mutex_timedlock(&s->hdr->lock, &deadline);
	if (r == EOWNERDEAD) {
		if (recover(s, tree) < 0) {
			pthread_mutex_unlock(&s->hdr->lock);
			return -EIO;
		}
		pthread_mutex_consistent(&s->hdr->lock);
		r = 0;
	}
	/* ETIMEDOUT, ENOTRECOVERABLE, EINVAL (a scribbled lock): -EIO. */
	return r ? -EIO : 0;
}

void vshared_unlock(struct vshared *s)
{
	pthread_mutex_unlock(&s->hdr->lock);
}
