/* SPDX-License-Identifier: MIT */
/*
 * shared_file.c - volatile state shared by every process holding a library
 * file (see the header for where it lives): formatting, recognising and
 * attaching, and the process-shared lock with recovery from a holder
 * that died.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/xattr.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shared_file.h"
#include "shared_lock.h"

#define VSHARED_MAGIC "libvrange-state7"
/* A foreign file's metadata: [header page][arena], the arena grows. */
#define VSHARED_MAGIC_FOREIGN "libvrange-fstat7"
#define VSHARED_VERSION 7u
#define XATTR_NAME "user.vrange"
#define XATTR_MAGIC "vrange7"
#define MAX_HOLDERS 16
/* Extra arena slots beyond one per page, so a full tree can still split. */
#define ARENA_SLACK 16u
/* The same in a pool slot, kept small: a clear needs two nodes at most. */
#define SLOT_SLACK 4u
/* How long a lock holder may keep others waiting before they give up. */
#define LOCK_TIMEOUT_MS 2000
/* How long once it did: enough for a holder that runs to let go. */
#define WEDGED_WAIT_MS 50
/* A foreign file's arena starts with room for this many ranges (or one
 * per page of the file and the slack, if more): untouched pages of the
 * sparse metadata file cost nothing, and it rarely has to grow. */
#define FOREIGN_MIN_NODES 4096u
/* And grows, doubling, up to this many (64 GiB of arena). */
#define FOREIGN_MAX_NODES (1u << 30)

/* The attribute on the user's file: what the metadata is, who holds it. */
struct vshared_xattr {
	char magic[8];
	uint32_t version;
	uint32_t nholders;
	uint64_t user_size;
	uint64_t meta_dev, meta_ino;
	struct {
		int32_t pid, fd;
	} h[MAX_HOLDERS];
};

static uint64_t round_page(uint64_t n)
{
	return (n + vr_page_size - 1) & ~((uint64_t)vr_page_size - 1);
}

/* Arena size and metadata file size for a user area of user_size bytes. */
static int layout(uint64_t user_size, uint64_t *arena_bytes, uint64_t *meta_size)
{
	uint64_t pages = round_page(user_size) >> vr_page_shift;

	if (user_size == 0 || pages > UINT32_MAX - ARENA_SLACK)
		return -EINVAL;
	*arena_bytes = round_page(rt_arena_bytes_paged((uint32_t)pages + ARENA_SLACK,
							(uint32_t)pages));
	*meta_size = *arena_bytes + vr_page_size;
	return 0;
}

static int map_meta(int mfd, uint64_t user_size, struct vshared *s)
{
	uint64_t arena_bytes, meta_size;
	void *p;
	int r = layout(user_size, &arena_bytes, &meta_size);

	if (r < 0)
		return -EIO;
	p = mmap(NULL, meta_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED)
		return -errno;
	s->map = p;
	s->map_bytes = meta_size;
	s->arena = p;
	s->foreign = false;
	s->hdr = (struct vshared_hdr *)((char *)p + arena_bytes);
	s->shared_arena_bytes = &s->hdr->cur_arena_bytes;
	s->max_page = &s->hdr->max_page;
	atomic_store_explicit(&s->lock, &s->hdr->lock, memory_order_relaxed);
	s->user_size = user_size;
	s->user_pages = round_page(user_size) >> vr_page_shift;
	s->arena_bytes = arena_bytes;
	return 0;
}

/* A foreign file's arena size for a file of file_size bytes now. */
static uint64_t foreign_start_bytes(uint64_t file_size)
{
	uint64_t nodes = (round_page(file_size) >> vr_page_shift) + ARENA_SLACK;

	if (nodes < FOREIGN_MIN_NODES)
		nodes = FOREIGN_MIN_NODES;
	if (nodes > FOREIGN_MAX_NODES)
		nodes = FOREIGN_MAX_NODES;
	return round_page(rt_arena_bytes((uint32_t)nodes));
}

static bool foreign_bytes_ok(uint64_t arena_bytes)
{
	return arena_bytes >= round_page(rt_arena_bytes(FOREIGN_MIN_NODES)) &&
	       arena_bytes <= round_page(rt_arena_bytes(FOREIGN_MAX_NODES)) &&
	       arena_bytes % vr_page_size == 0;
}

/* A foreign file's metadata, first its header page: it never moves (the
 * lock is there), while the arena behind it grows and its mapping moves. */
static int map_foreign_hdr(int mfd, struct vshared *s)
{
	void *h = mmap(NULL, vr_page_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);

	if (h == MAP_FAILED)
		return -errno;
	s->map = h;
	s->map_bytes = vr_page_size;
	s->foreign = true;
	s->hdr = h;
	atomic_store_explicit(&s->lock, &s->hdr->lock, memory_order_relaxed);
	s->shared_arena_bytes = &s->hdr->cur_arena_bytes;
	s->max_page = &s->hdr->max_page;
	s->user_size = 0;
	s->user_pages = 0;
	return 0;
}

/* Then arena_bytes of arena, which the metadata file must hold. */
static int map_foreign_arena(int mfd, uint64_t arena_bytes, struct vshared *s)
{
	struct stat st;
	void *a;

	if (!foreign_bytes_ok(arena_bytes) || fstat(mfd, &st) < 0 ||
	    (uint64_t)st.st_size < vr_page_size + arena_bytes)
		return -EIO;
	a = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
		 (off_t)vr_page_size);
	if (a == MAP_FAILED)
		return -errno;
	s->arena = a;
	s->arena_bytes = arena_bytes;
	return 0;
}

static size_t xattr_len(uint32_t nholders)
{
	return offsetof(struct vshared_xattr, h) + nholders * sizeof(((struct vshared_xattr *)0)->h[0]);
}

/* 1 and *x filled; 0 when the file has no attribute; -EIO if malformed. */
static int read_xattr(int fd, struct vshared_xattr *x)
{
	ssize_t n = fgetxattr(fd, XATTR_NAME, x, sizeof(*x));

	if (n < 0)
		return errno == ENODATA || errno == EOPNOTSUPP ? 0 : -errno;
	if ((size_t)n < xattr_len(0) || memcmp(x->magic, XATTR_MAGIC, sizeof(x->magic)) ||
	    x->version != VSHARED_VERSION || x->nholders > MAX_HOLDERS ||
	    (size_t)n != xattr_len(x->nholders))
		return -EIO; /* user_size 0: a foreign file's, its own size */
	return 1;
}

static int write_xattr(int fd, const struct vshared_xattr *x)
{
	return fsetxattr(fd, XATTR_NAME, x, xattr_len(x->nholders), 0) < 0 ? -errno : 0;
}

/* A fresh header (a metadata file's or a pool slot's): user_size 0 is a
 * foreign file's. */
static void fill_hdr(struct vshared_hdr *h, uint64_t user_size,
		     uint64_t arena_bytes, uint64_t dev, uint64_t ino)
{
	atomic_init(&h->lock.word, 0);
	memcpy(h->magic, user_size ? VSHARED_MAGIC : VSHARED_MAGIC_FOREIGN,
	       sizeof(h->magic));
	h->version = VSHARED_VERSION;
	h->page_size = (uint32_t)vr_page_size;
	h->user_size = user_size;
	h->arena_bytes = arena_bytes;
	h->cur_arena_bytes = arena_bytes;
	h->max_page = 0;
	h->dev = dev;
	h->ino = ino;
	atomic_store_explicit(&h->moved, 0, memory_order_relaxed);
	atomic_store_explicit(&h->ready, 1, memory_order_release);
}

/*
 * Format a fresh metadata file for user_size bytes (0: a foreign file,
 * now file_size bytes): its descriptor or -errno.
 */
static int create_meta(uint64_t user_size, uint64_t file_size)
{
	struct vshared s = { .meta_fd = -1 };
	struct rt_tree t;
	int mfd = memfd_create("vrange-state", MFD_CLOEXEC);
	int r;

	if (mfd < 0)
		return -errno;
	if (user_size) {
		r = layout(user_size, &s.arena_bytes, &s.map_bytes);
	} else {
		s.arena_bytes = foreign_start_bytes(file_size);
		s.map_bytes = vr_page_size + s.arena_bytes;
		r = 0;
	}
	if (r == 0 && vr_ftruncate(mfd, s.map_bytes) < 0)
		r = -errno;
	if (r == 0)
		r = user_size ? map_meta(mfd, user_size, &s) : map_foreign_hdr(mfd, &s);
	if (r == 0 && !user_size)
		r = map_foreign_arena(mfd, s.arena_bytes, &s);
	if (r == 0)
		r = user_size ? rt_format_paged(&t, s.arena, s.arena_bytes,
						(uint32_t)s.user_pages)
			      : rt_format(&t, s.arena, s.arena_bytes); /* size changes */
	if (r == 0)
		fill_hdr(s.hdr, user_size, s.arena_bytes, 0, 0);
	vshared_close(&s);
	if (r < 0) {
		close(mfd);
		return r;
	}
	return mfd;
}

/*
 * Metadata descriptors vshared_format() left open for a vfile of this
 * process to take over (open_holder): nobody else's.  Any other descriptor
 * an entry of this process names is a vfile's, which may be closing it
 * this very moment (a forget or a last put on another thread, the
 * registry entry already gone): that one is reopened, never taken - a
 * vfile that took it used a number its owner then closed (fd_hint's test
 * of forgets under pairs: -EIO, and a later close of whatever reused it).
 */
static pthread_mutex_t unowned_lock = PTHREAD_MUTEX_INITIALIZER;
static int *unowned;
static size_t nunowned, unowned_cap;

static int unowned_add(int mfd)
{
	int r = 0;

	pthread_mutex_lock(&unowned_lock);
	if (nunowned == unowned_cap) {
		size_t cap = unowned_cap ? 2 * unowned_cap : 16;
		int *v = realloc(unowned, cap * sizeof(*v));

		if (v) {
			unowned = v;
			unowned_cap = cap;
		}
	}
	if (nunowned < unowned_cap)
		unowned[nunowned++] = mfd;
	else
		r = -ENOMEM;
	pthread_mutex_unlock(&unowned_lock);
	return r;
}

/* Is mfd a descriptor format left for the taking?  Then it is the
 * caller's now. */
static bool unowned_take(int mfd)
{
	bool found = false;

	pthread_mutex_lock(&unowned_lock);
	for (size_t i = 0; i < nunowned && !found; i++)
		if (unowned[i] == mfd) {
			unowned[i] = unowned[--nunowned];
			found = true;
		}
	pthread_mutex_unlock(&unowned_lock);
	return found;
}

void vshared_fork_prepare(void)
{
	pthread_mutex_lock(&unowned_lock);
}

void vshared_fork_done(void)
{
	pthread_mutex_unlock(&unowned_lock);
}

int vshared_format(int fd, uint64_t user_size)
{
	struct vshared_xattr x = { .magic = XATTR_MAGIC, .version = VSHARED_VERSION };
	struct stat st;
	int mfd, r;

	vr_init_basic();
	if (vr_ftruncate(fd, user_size) < 0)
		return -errno;
	mfd = create_meta(user_size, 0);
	if (mfd < 0)
		return mfd;
	if (fstat(mfd, &st) < 0) {
		r = -errno;
		goto fail;
	}
	/* This process holds the metadata through mfd until a vfile adopts it. */
	x.user_size = user_size;
	x.meta_dev = st.st_dev;
	x.meta_ino = st.st_ino;
	x.nholders = 1;
	x.h[0].pid = getpid();
	x.h[0].fd = mfd;
	r = unowned_add(mfd);
	if (r == 0)
		r = write_xattr(fd, &x);
	if (r == 0)
		return 0;
	unowned_take(mfd);
fail:
	close(mfd);
	return r;
}

static bool take_formats_own(const struct vshared_xattr *x, uint32_t i);

void vshared_unformat(int fd)
{
	struct vshared_xattr x;

	if (read_xattr(fd, &x) != 1)
		return;
	/* Only the descriptor format left for the taking: a vfile that took
	 * it over and failed has closed it, and the number may be someone
	 * else's by now. */
	for (uint32_t i = 0; i < x.nholders; i++)
		if (take_formats_own(&x, i))
			close(x.h[i].fd);
}

int vshared_probe(int fd, uint64_t *user_size)
{
	struct vshared_xattr x;
	int r;

	vr_init_basic();
	r = read_xattr(fd, &x);
	if (r == 1)
		*user_size = x.user_size;
	return r;
}

static bool is_meta(int mfd, const struct vshared_xattr *x)
{
	struct stat st;

	return fstat(mfd, &st) == 0 && (uint64_t)st.st_dev == x->meta_dev &&
	       (uint64_t)st.st_ino == x->meta_ino;
}

/* Is holder i this process's descriptor that vshared_format() left open
 * for x's metadata?  Then it is the caller's now.  Metadata first: an
 * entry of ours left over from an earlier state may name a number that
 * is now another file's format descriptor, which stays its own. */
static bool take_formats_own(const struct vshared_xattr *x, uint32_t i)
{
	return x->h[i].pid == getpid() && x->h[i].fd >= 0 && is_meta(x->h[i].fd, x) &&
	       unowned_take(x->h[i].fd);
}

/*
 * A descriptor of the metadata through holder i, or -1.  An entry of this
 * very process naming the descriptor vshared_format() left open is taken
 * over; any other is reopened, as another process's is (see unowned).
 */
static int open_holder(const struct vshared_xattr *x, uint32_t i)
{
	char path[64];
	int mfd;

	if (x->h[i].pid <= 0 || x->h[i].fd < 0)
		return -1;
	if (take_formats_own(x, i))
		return x->h[i].fd;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)x->h[i].pid, (int)x->h[i].fd);
	/* Look before opening read-write: only the metadata file itself. */
	mfd = open(path, O_PATH | O_CLOEXEC);
	if (mfd < 0)
		return -1;
	if (!is_meta(mfd, x)) {
		close(mfd);
		return -1;
	}
	close(mfd);
	mfd = open(path, O_RDWR | O_CLOEXEC);
	if (mfd >= 0 && !is_meta(mfd, x)) {
		close(mfd);
		mfd = -1;
	}
	return mfd;
}

/*
 * Does holder i still hold the metadata?  Its pid may belong to a zombie
 * (its descriptors are closed already) or to a process that reused the
 * pid, and its fd number to another file: ask what /proc/<pid>/fd/<fd>
 * is.  Where that may not be looked at, only whether the pid exists.
 */
static bool holder_holds(const struct vshared_xattr *x, uint32_t i)
{
	char path[64];
	struct stat st;

	if (x->h[i].pid <= 0 || x->h[i].fd < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)x->h[i].pid, (int)x->h[i].fd);
	if (stat(path, &st) == 0)
		return (uint64_t)st.st_dev == x->meta_dev && (uint64_t)st.st_ino == x->meta_ino;
	if (errno == EACCES || errno == EPERM)
		return kill(x->h[i].pid, 0) == 0 || errno == EPERM;
	return false;
}

/* Rewrite the holder list: drop the dead and stale, add this process. */
static void register_holder(int fd, struct vshared *s)
{
	struct vshared_xattr x, out;
	uint32_t i;

	if (read_xattr(fd, &x) != 1)
		return;
	out = x;
	out.nholders = 0;
	for (i = 0; i < x.nholders && out.nholders < MAX_HOLDERS - 1; i++) {
		if (x.h[i].pid == getpid() || !holder_holds(&x, i))
			continue;
		out.h[out.nholders++] = x.h[i];
	}
	out.h[out.nholders].pid = getpid();
	out.h[out.nholders].fd = s->meta_fd;
	out.nholders++;
	write_xattr(fd, &out);
}

void vshared_add_self(int fd, struct vshared *s, struct rt_tree *tree)
{
	if (vshared_lock(s, tree) == 0) {
		register_holder(fd, s);
		vshared_unlock(s);
	}
}

static int find_holder(const struct vshared_xattr *x)
{
	int mfd = -1;

	for (uint32_t i = 0; i < x->nholders && mfd < 0; i++)
		mfd = open_holder(x, i);
	return mfd;
}

/* An OFD lock far beyond any data, so it never meets the application's. */
static int attr_lock(int fd, short type)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET,
		.l_start = INT64_MAX - 1, .l_len = 1,
	};

	return fcntl(fd, F_OFD_SETLKW, &fl) < 0 ? -errno : 0;
}


/* Why the file refused the attribute (debug log, foreign files). */
static const char *xattr_refusal(int err)
{
	switch (err) {
	case EOPNOTSUPP:
		return "the file system keeps no user xattrs";
	case EPERM:
	case EACCES:
		return "no permission to set an xattr on the file";
	case ENOSPC:
	case E2BIG:
	case EDQUOT:
		return "no room for the xattr";
	default:
		return "the xattr was refused";
	}
}

/*
 * No live process holds the metadata: every process that marked anything
 * is gone, so "nothing volatile" is the truth.  Start a fresh metadata file
 * and name it, one process at a time (the others then find it as holder).
 * With `make`, a file without the attribute gets one the same way (a
 * foreign file, the first time the library keeps state for it), so two
 * processes racing end up sharing one state.  The descriptor, or -1 with
 * *why filled.
 */
static int recreate_meta(int fd, struct vshared_xattr *x, bool make, const char **why)
{
	struct stat st;
	int mfd = -1, r;

	if (attr_lock(fd, F_WRLCK) < 0) {
		*why = "no OFD lock on the file";
		return -1;
	}
	r = read_xattr(fd, x);
	if (r == 1) {
		mfd = find_holder(x);
	} else if (r == 0 && make) {
		memset(x, 0, sizeof(*x));
		memcpy(x->magic, XATTR_MAGIC, sizeof(x->magic));
		x->version = VSHARED_VERSION;
		x->user_size = 0; /* a foreign file: its own size */
	} else {
		*why = r < 0 ? "malformed xattr" : "the xattr is gone";
		goto out;
	}
	if (mfd >= 0)
		goto out;
	if (fstat(fd, &st) < 0 ||
	    (mfd = create_meta(x->user_size, (uint64_t)st.st_size)) < 0) {
		*why = "no metadata file";
		mfd = -1;
		goto out;
	}
	if (fstat(mfd, &st) < 0) {
		r = -errno;
	} else {
		x->meta_dev = st.st_dev;
		x->meta_ino = st.st_ino;
		x->nholders = 1;
		x->h[0].pid = getpid();
		x->h[0].fd = mfd;
		r = write_xattr(fd, x);
	}
	if (r < 0) {
		*why = xattr_refusal(-r);
		close(mfd);
		mfd = -1;
	}
out:
	attr_lock(fd, F_UNLCK);
	return mfd;
}

/* A library file's header (metadata file or pool slot). */
static bool hdr_ok(const struct vshared_hdr *h, uint64_t user_size,
		   uint64_t arena_bytes)
{
	return !memcmp(h->magic, VSHARED_MAGIC, sizeof(h->magic)) &&
	       h->version == VSHARED_VERSION && h->page_size == vr_page_size &&
	       h->user_size == user_size && h->arena_bytes == arena_bytes &&
	       atomic_load_explicit(&h->ready, memory_order_acquire);
}

static int recover(struct vshared *s, struct rt_tree *tree);

/*
 * A foreign file's metadata: the header, then - under the lock, so that
 * nobody grows the arena meanwhile - the arena at its present size.  A
 * holder that died inside its critical section may have left the tree
 * torn, or the arena half grown: recovered as for a library file.
 */
static int attach_foreign(struct vshared *s, struct rt_tree *tree)
{
	bool dead;
	int r = map_foreign_hdr(s->meta_fd, s);

	if (r < 0)
		return r;
	if (memcmp(s->hdr->magic, VSHARED_MAGIC_FOREIGN, sizeof(s->hdr->magic)) ||
	    s->hdr->version != VSHARED_VERSION || s->hdr->page_size != vr_page_size ||
	    s->hdr->user_size != 0 ||
	    !atomic_load_explicit(&s->hdr->ready, memory_order_acquire))
		return -EIO;
	r = shared_lock_acquire(s->lock, LOCK_TIMEOUT_MS);
	if (r < 0)
		return -EIO;
	dead = r == 1;
	r = map_foreign_arena(s->meta_fd, *s->shared_arena_bytes, s);
	tree->hdr = NULL;
	if (r == 0 && rt_attach(tree, s->arena, s->arena_bytes) < 0 && !dead)
		r = -EIO;
	if (r == 0 && dead)
		r = recover(s, tree);
	shared_lock_release(s->lock);
	return r;
}

/* Map and check the metadata mfd names, and hold it: 1 or -errno. */
static int attach(int fd, int mfd, const struct vshared_xattr *x,
		  struct vshared *s, struct rt_tree *tree)
{
	struct stat st;
	int r;

	s->meta_fd = mfd;
	s->user_fd = fd;
	if (x->user_size == 0) {
		r = attach_foreign(s, tree);
	} else {
		r = map_meta(mfd, x->user_size, s);
		if (r == 0 && (fstat(mfd, &st) < 0 ||
			       (uint64_t)st.st_size != s->map_bytes))
			r = -EIO;
		if (r == 0 && (!hdr_ok(s->hdr, x->user_size, s->arena_bytes) ||
			       rt_attach(tree, s->arena, s->arena_bytes) < 0 ||
			       rt_pages(tree) != s->user_pages))
			r = -EIO;
	}
	if (r < 0) {
		vshared_close(s);
		return r;
	}
	vshared_add_self(fd, s, tree);
	return 1;
}

/* With no_recreate, metadata nobody holds is not made afresh (0). */
static int open_meta(int fd, struct vshared *s, struct rt_tree *tree,
		     bool no_recreate)
{
	struct vshared_xattr x;
	const char *why = "nobody holds it";
	int mfd = -1, r = read_xattr(fd, &x);

	s->meta_fd = -1;
	s->user_fd = fd;
	if (r <= 0)
		return r;
	mfd = find_holder(&x);
	if (mfd < 0 && !no_recreate)
		mfd = recreate_meta(fd, &x, false, &why);
	if (mfd < 0) {
		vr_debug("shared state unreachable (%s): process-local", why);
		return 0;
	}
	return attach(fd, mfd, &x, s, tree);
}

int vshared_open(int fd, struct vshared *s, struct rt_tree *tree)
{
	return open_meta(fd, s, tree, false);
}

int vshared_open_foreign(int fd, struct vshared *s, struct rt_tree *tree,
			 const char **why)
{
	struct vshared_xattr x;
	int mfd;

	s->meta_fd = -1;
	*why = "";
	mfd = recreate_meta(fd, &x, true, why);
	if (mfd < 0)
		return 0;
	return attach(fd, mfd, &x, s, tree);
}

void vshared_close(struct vshared *s)
{
	if (s->map && !s->pooled)
		munmap(s->map, s->map_bytes);
	if (s->foreign && s->arena)
		munmap(s->arena, s->arena_bytes);
	if (s->old_map)
		munmap(s->old_map, s->old_map_bytes);
	if (s->meta_fd >= 0)
		close(s->meta_fd);
	pool_free(&s->slot);
	s->map = s->old_map = s->arena = NULL;
	s->foreign = false;
	s->hdr = NULL;
	s->pooled = s->in_slot = false;
	atomic_store_explicit(&s->lock, NULL, memory_order_relaxed);
	s->meta_fd = -1;
}

int vshared_follow(struct vshared *s, struct rt_tree *tree)
{
	uint64_t n = *s->shared_arena_bytes;
	struct stat st;
	void *p;

	if (n == s->arena_bytes)
		return 0;
	/* Arenas only grow; the file must hold what the header says. */
	if (n < s->arena_bytes || !foreign_bytes_ok(n) || fstat(s->meta_fd, &st) < 0 ||
	    (uint64_t)st.st_size < vr_page_size + n)
		return -EIO;
	p = mremap(s->arena, s->arena_bytes, n, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return -ENOMEM;
	s->arena = p;
	s->arena_bytes = n;
	return tree->hdr && rt_grow(tree, p, n) < 0 ? -EIO : 0;
}

int vshared_grow(struct vshared *s, struct rt_tree *tree)
{
	uint64_t n = s->arena_bytes * 2, max = round_page(rt_arena_bytes(FOREIGN_MAX_NODES));
	struct stat st;
	void *p;

	if (!s->foreign || s->arena_bytes >= max)
		return -ENOMEM;
	if (n > max)
		n = max;
	/* Never shrink the file: other processes map all of it.  Mapping,
	 * then the header, then the tree's own capacity: a holder that dies
	 * between two of them leaves what a follower or recover() completes. */
	if (fstat(s->meta_fd, &st) < 0)
		return -ENOMEM;
	if ((uint64_t)st.st_size < vr_page_size + n &&
	    vr_ftruncate(s->meta_fd, vr_page_size + n) < 0)
		return -ENOMEM;
	p = mremap(s->arena, s->arena_bytes, n, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return -ENOMEM;
	s->arena = p;
	s->arena_bytes = n;
	*s->shared_arena_bytes = n;
	return rt_grow(tree, p, n) < 0 ? -ENOMEM : 0;
}

/* No page number reaches this (vr_page_range caps offsets at 2^63). */
#define MAX_PAGE_BOUND ((uint64_t)1 << 52)

/*
 * The previous holder died inside its critical section.  Tree operations
 * are not crash-atomic, so if it died inside one the tree may be torn.
 * Keep it if it checks out; else reset it to "every page purged", which can
 * only make a later unmark report VRANGE_PURGED for pages that were fine
 * (the application rebuilds them) and never lets a purge touch anything.
 * "Every page" of a foreign file is every page below the highest end ever
 * marked (its size may have changed since).
 */
static int recover(struct vshared *s, struct rt_tree *tree)
{
	uint64_t pages = s->user_pages;

	if (s->foreign) {
		int r = vshared_follow(s, tree);

		if (r < 0)
			return r;
		pages = *s->max_page < MAX_PAGE_BOUND ? *s->max_page : MAX_PAGE_BOUND;
		*s->max_page = pages;
	}
	/* Counts off only (a kill inside a lock-free call or a loop) are
	 * repaired; a torn tree or a page both in a word and a range is not. */
	if (tree->hdr)
		rt_recount_words(tree);
	if (tree->hdr && rt_check(tree) == 0)
		return 0;
	vr_debug("shared state torn by a dead process: reset to purged");
	/* A foreign arena may be large and mostly never used: punch it
	 * rather than write zeros over all of it. */
	if (!s->foreign || fallocate(s->meta_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				     (off_t)vr_page_size, (off_t)s->arena_bytes) < 0)
		memset(s->arena, 0, s->arena_bytes);
	if ((s->foreign ? rt_format(tree, s->arena, s->arena_bytes)
			: rt_format_paged(tree, s->arena, s->arena_bytes,
					  (uint32_t)s->user_pages)) < 0 ||
	    (pages && (rt_mark_volatile(tree, 0, pages, 0, 0, NULL) < 0 ||
		       rt_mark_purged(tree, 0, pages, NULL) < 0)))
		return -EIO;
	return 0;
}

/*
 * Make ns (tree nt) s's state; the caller holds the lock s had.  Every
 * field first, the lock pointer last: a thread that finds the new lock
 * finds the rest.  The old slot stays held (or mapped) until close: other
 * threads may still be waiting on its lock.
 */
static void swap_in(struct vshared *s, struct rt_tree *tree,
		    const struct vshared *ns, const struct rt_tree *nt)
{
	if (!s->pooled && s->map && !s->old_map) {
		s->old_map = s->map;
		s->old_map_bytes = s->map_bytes;
	}
	s->meta_fd = ns->meta_fd;
	s->map = ns->map;
	s->map_bytes = ns->map_bytes;
	s->arena = ns->arena;
	s->hdr = ns->hdr;
	s->arena_bytes = ns->arena_bytes;
	s->pooled = false;
	s->in_slot = false;
	*tree = *nt;
	atomic_store_explicit(&s->lock, atomic_load(&ns->lock), memory_order_release);
}

/* Another process moved the slot's state into a metadata file: attach to
 * it as any holder would (never to fresh metadata: our slot's state is
 * not "nothing volatile").  The caller holds the slot's lock. */
static int follow_move(struct vshared *s, struct rt_tree *tree)
{
	struct vshared ns = { .meta_fd = -1 };
	struct rt_tree nt;
	int r = open_meta(s->user_fd, &ns, &nt, true);

	if (r != 1 || ns.user_size != s->user_size) {
		vr_debug("state moved out of reach: %d", r);
		if (r == 1)
			vshared_close(&ns);
		return -EIO;
	}
	swap_in(s, tree, &ns, &nt);
	return 0;
}

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* Arena bytes of a pool slot for user_size bytes, or 0 if it takes none. */
static size_t slot_arena(uint64_t user_size)
{
	uint64_t pages = round_page(user_size) >> vr_page_shift;
	size_t arena;

	if (user_size == 0 || pages > POOL_SLOT_MAX / 64)
		return 0;
	/* Paged as a library file's: the same single-page fast path. */
	arena = align64(rt_arena_bytes_paged((uint32_t)pages + SLOT_SLACK,
					     (uint32_t)pages));
	if (arena + align64(sizeof(struct vshared_hdr)) > POOL_SLOT_MAX)
		return 0;
	return arena;
}

int vshared_pool_format(struct vshared *s, struct rt_tree *tree, int user_fd,
			uint64_t user_size, uint64_t dev, uint64_t ino)
{
	size_t arena = slot_arena(user_size);
	int r;

	if (!arena)
		return -E2BIG;
	r = pool_alloc(arena + align64(sizeof(struct vshared_hdr)), &s->slot);
	if (r < 0)
		return r;
	s->meta_fd = -1;
	s->map = s->arena = s->slot.addr;
	s->map_bytes = s->slot.bytes;
	s->hdr = (struct vshared_hdr *)((char *)s->arena + arena);
	s->user_size = user_size;
	s->user_pages = round_page(user_size) >> vr_page_shift;
	s->arena_bytes = arena;
	s->user_fd = user_fd;
	s->pooled = true;
	s->in_slot = true;
	r = rt_format_paged(tree, s->arena, arena, (uint32_t)s->user_pages);
	if (r < 0) {
		vshared_close(s);
		return r;
	}
	fill_hdr(s->hdr, user_size, arena, dev, ino);
	atomic_store_explicit(&s->lock, &s->hdr->lock, memory_order_release);
	return 0;
}

/* One range of a slot's tree into the tree at arg (rt_visit). */
static int copy_range(const struct rt_range *rg, void *arg)
{
	struct rt_tree *to = arg;

	if (rt_mark_volatile_cost(to, rg->start, rg->end, rg->prio, rg->seq,
				  rg->cost, NULL) < 0)
		return -EIO;
	if (rg->state == RT_PURGED && rt_mark_purged(to, rg->start, rg->end, NULL) < 0)
		return -EIO;
	return 0;
}

int vshared_move(struct vshared *s, struct rt_tree *tree, struct shared_lock **old)
{
	struct vshared_xattr x = { .magic = XATTR_MAGIC, .version = VSHARED_VERSION };
	struct vshared ns = { .meta_fd = -1 };
	struct rt_tree nt;
	struct stat st;
	int r;

	if (!s->pooled)
		return -EINVAL;
	/* No lock-free change may land in the slot after the copy read it
	 * (page_words.h): those under way are redone under the lock, which
	 * then leads to the new state. */
	rt_fast_off(tree);
	ns.meta_fd = create_meta(s->user_size, 0);
	if (ns.meta_fd < 0)
		return ns.meta_fd;
	r = map_meta(ns.meta_fd, s->user_size, &ns);
	if (r == 0 && fstat(ns.meta_fd, &st) < 0)
		r = -errno;
	/* Nobody sees the new metadata before the attribute names it.  A
	 * paged arena cannot grow into a bigger one: its ranges are copied
	 * over one by one, each with its own place in the purge order. */
	if (r == 0 && (rt_attach(&nt, ns.arena, ns.arena_bytes) < 0 ||
		       rt_pages(&nt) != s->user_pages ||
		       rt_visit(tree, 0, s->user_pages, copy_range, &nt) != 0 ||
		       rt_check(&nt) < 0))
		r = -EIO;
	if (r == 0) {
		x.user_size = s->user_size;
		x.meta_dev = st.st_dev;
		x.meta_ino = st.st_ino;
		x.nholders = 1;
		x.h[0].pid = getpid();
		x.h[0].fd = ns.meta_fd;
		r = write_xattr(s->user_fd, &x);
	}
	if (r < 0) {
		vshared_close(&ns);
		return r;
	}
	*old = atomic_load_explicit(&s->lock, memory_order_relaxed);
	swap_in(s, tree, &ns, &nt);
	atomic_store_explicit(&vshared_hdr_of(*old)->moved, 1, memory_order_release);
	return 0;
}

int vshared_attach_slot(struct vshared *s, struct rt_tree *tree, int user_fd,
			int pool_fd, uint64_t off, uint64_t arena_bytes,
			uint64_t user_size, uint64_t dev, uint64_t ino)
{
	uint64_t start, end, mask = vr_page_size - 1;
	struct vshared_hdr *h;
	struct stat st;
	char *p;

	if (!arena_bytes || arena_bytes != slot_arena(user_size) || off % 64 ||
	    off > (UINT64_MAX >> 2))
		return -EIO;
	start = off & ~mask;
	end = (off + arena_bytes + align64(sizeof(*h)) + mask) & ~mask;
	/* A mapping past the file's end would raise SIGBUS here. */
	if (fstat(pool_fd, &st) < 0 || (uint64_t)st.st_size < end)
		return -EIO;
	p = mmap(NULL, end - start, PROT_READ | PROT_WRITE, MAP_SHARED, pool_fd,
		 (off_t)start);
	if (p == MAP_FAILED)
		return -EIO;
	s->meta_fd = -1;
	s->map = p;
	s->map_bytes = end - start;
	s->arena = p + (off - start);
	s->hdr = h = (struct vshared_hdr *)((char *)s->arena + arena_bytes);
	s->user_size = user_size;
	s->user_pages = round_page(user_size) >> vr_page_shift;
	s->arena_bytes = arena_bytes;
	s->user_fd = user_fd;
	s->pooled = false;
	s->in_slot = true;
	atomic_store_explicit(&s->lock, &h->lock, memory_order_relaxed);
	if (!hdr_ok(h, user_size, arena_bytes) || h->dev != dev || h->ino != ino ||
	    rt_attach(tree, s->arena, arena_bytes) < 0 ||
	    rt_pages(tree) != s->user_pages) {
		vshared_close(s);
		return -EIO;
	}
	return 1;
}

int vshared_lock_slow(struct vshared *s, struct rt_tree *tree)
{
	struct shared_lock *l;
	bool wedged;
	int r;

	for (;;) {
		l = atomic_load_explicit(&s->lock, memory_order_acquire);
		/* A lock that was held past the timeout once is not waited
		 * for that long again (every call would stall behind a
		 * hostile or stopped holder), only briefly: the wedge lasts
		 * as long as its cause, and ends with the first call that
		 * gets the lock. */
		wedged = atomic_load_explicit(&s->wedged, memory_order_relaxed);
		r = shared_lock_acquire(l, wedged ? WEDGED_WAIT_MS : LOCK_TIMEOUT_MS);
		if (r < 0 && !wedged) {
			vr_debug("shared state locked for %d ms: giving up on it",
				 LOCK_TIMEOUT_MS);
			atomic_store_explicit(&s->wedged, true, memory_order_relaxed);
		} else if (r >= 0 && wedged) {
			vr_debug("shared state lock free again");
			atomic_store_explicit(&s->wedged, false, memory_order_relaxed);
		}
		if (r < 0)
			return -EIO;
		/* The state moved while we waited: its lock is another now. */
		if (l != atomic_load_explicit(&s->lock, memory_order_acquire)) {
			shared_lock_release(l);
			continue;
		}
		/* A metadata file never moves: its flag is a scribble. */
		if (s->in_slot &&
		    atomic_load_explicit(&vshared_hdr_of(l)->moved, memory_order_acquire)) {
			r = follow_move(s, tree);
			shared_lock_release(l);
			if (r < 0)
				return r;
			continue;
		}
		if (r == 1 && recover(s, tree) < 0) {
			shared_lock_release(l);
			return -EIO;
		}
		return 0;
	}
}
