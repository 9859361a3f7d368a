/* SPDX-License-Identifier: MIT */
/*
 * file_state.c - per-file volatile state: the registry of files, marking,
 * and the discard step of the purge engine.
 *
 * Why "INTACT means nothing was discarded" holds: a page is discarded only
 * in discard_batch(), which runs with the tree lock held, finds the page volatile
 * in the tree, records it as purged in the tree, and punches it - all before
 * it lets go of the lock.  vfile_mark_nonvolatile() takes the same lock, so
 * it runs either wholly before a discard (then the page is no longer
 * volatile and the discard does not choose it) or wholly after (then it sees
 * the page recorded as purged and reports VRANGE_PURGED).  There is no third
 * order.  docs/design.md spells this out.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "any_mapping.h"
#include "app_map_faults.h"
#include "disk_file.h"
#include "disk_room.h"
#include "file_index.h"
#include "fd_hint.h"
#include "file_state.h"
#include "held_files.h"
#include "pressure.h"
#include "publish.h"
#include "purge.h"
#include "uffd_purge.h"
#include "vrange.h"

#define INITIAL_NODES 64u
/* Spare nodes kept so that a clear (needs two) never has to grow. */
#define SPARE_NODES 4u

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vfile *registry;
/* The inotify instance that watches dormant files (registry lock). */
static int watch_ifd = -1;

static int arena_grow(struct vfile *f)
{
	uint64_t want = (uint64_t)f->tree.cap * 2;
	size_t bytes;
	void *p;

	/* A library file's shared arena is sized for one range per page: it
	 * never fills.  A foreign file's grows in its metadata file. */
	if (f->shared)
		return f->sh.foreign ? vshared_grow(&f->sh, &f->tree) : -ENOMEM;
	if (want > UINT32_MAX - 1)
		return -ENOMEM;
	bytes = rt_arena_bytes((uint32_t)want);
	/* mremap and ftruncate are plain system calls: safe in a signal
	 * handler too.  The memfd keeps exactly the arena's size (readers
	 * take the size for the arena's). */
	if (f->arena_fd >= 0 && vr_ftruncate(f->arena_fd, bytes) < 0)
		return -ENOMEM;
	p = mremap(f->arena, f->arena_bytes, bytes, MREMAP_MAYMOVE);
	if (p == MAP_FAILED) {
		if (f->arena_fd >= 0 &&
		    vr_ftruncate(f->arena_fd, f->arena_bytes) < 0)
			vr_debug("arena memfd left larger than its arena");
		return -ENOMEM;
	}
	f->arena = p;
	f->arena_bytes = bytes;
	return rt_grow(&f->tree, p, bytes);
}

int vfile_reserve(struct vfile *f, uint32_t n)
{
	while (rt_free_nodes(&f->tree) < n) {
		int r = arena_grow(f);

		if (r < 0)
			return r;
	}
	return 0;
}

static int keep_spare(struct vfile *f)
{
	/* A library file's arena has a slot per page: it cannot run short. */
	return f->shared && !f->sh.foreign ? 0 : vfile_reserve(f, SPARE_NODES);
}

/*
 * A process-local arena lives in a memfd of its own, mapped shared: the
 * tree's counters and ranges are then readable by vrangectl through
 * /proc/<pid>/fd without this process's help and without any cost to the
 * marking paths (publish.h).  Without a memfd, private memory still works
 * (the state is then not visible from outside).
 */
/* A memfd arena starts this big: its pages cost nothing until the tree
 * uses them, and it rarely has to grow.  (vrange() never takes it for
 * the application's memory wherever it lands: any_mapping.c.) */
#define MEMFD_ARENA_MIN (64u << 10)

static int arena_create(struct vfile *f)
{
	size_t bytes = rt_arena_bytes(INITIAL_NODES);
	int fd = memfd_create("vrange-local", MFD_CLOEXEC);
	void *p = MAP_FAILED;

	if (fd >= 0 && bytes < MEMFD_ARENA_MIN)
		bytes = MEMFD_ARENA_MIN;
	if (fd >= 0 && vr_ftruncate(fd, bytes) == 0)
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		if (fd >= 0)
			close(fd);
		fd = -1;
		bytes = rt_arena_bytes(INITIAL_NODES);
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (p == MAP_FAILED)
		return -ENOMEM;
	f->arena_fd = fd;
	f->arena = p;
	f->arena_bytes = bytes;
	return rt_format(&f->tree, p, bytes);
}

/*
 * Our own descriptor of the file: a fresh open file description when /proc
 * allows it, so nothing we do moves the application's file offset; else a
 * dup of a descriptor that is open for writing (punching needs that).
 */
static int own_descriptor(int fd, bool *own_ofd)
{
	char path[64];
	int nfd, fl;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	nfd = open(path, O_RDWR | O_CLOEXEC);
	*own_ofd = nfd >= 0;
	if (nfd >= 0)
		return nfd;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -EBADF;
	if ((fl & O_ACCMODE) != O_RDWR)
		return -EBADF;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	return nfd < 0 ? -errno : nfd;
}

/* A disk file that may be punched keeps room for its records on its file
 * system while we hold it by our descriptor (disk_room.h). */
static void room_take(struct vfile *f)
{
	if (f->disk && !f->disk_refused && f->fd >= 0 && !f->disk_room) {
		disk_room_take(f->fd, f->dev);
		f->disk_room = true;
	}
}

static void room_drop(struct vfile *f)
{
	if (f->disk_room) {
		disk_room_drop(f->dev);
		f->disk_room = false;
	}
}

static void vfile_free(struct vfile *f)
{
	room_drop(f);
	if (f->wd >= 0 && watch_ifd >= 0)
		inotify_rm_watch(watch_ifd, f->wd);
	if (f->fd >= 0 && !f->fd_borrowed)
		close(f->fd);
	/* Before its words go: the stripes our threads own there are free
	 * for others' plain counts (page_words.h). */
	if (f->tree.pw.n)
		pw_release_stripes(f->tree.pw.h);
	if (f->arena)
		munmap(f->arena, f->arena_bytes);
	if (f->arena_fd >= 0)
		close(f->arena_fd);
	vshared_close(&f->sh);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static struct vfile *vfile_alloc(const struct stat *st);

/*
 * A disk file's record of punched pages (disk_file.h) into its tree, as
 * RT_PURGED pages, under the tree lock: whoever makes a state for the file
 * - the first process after every earlier holder went, or one attaching
 * to a live state - brings the tree up to what was ever punched and not
 * yet reported.  Pages already purged stay so; volatile ones the record
 * names become purged (an unmark killed between its two steps: a false
 * VRANGE_PURGED, the safe side).  A malformed record counts as every page
 * of the file purged, and the file is never punched (its record cannot be
 * added to).
 */
static int disk_load(struct vfile *f, uint64_t size)
{
	struct disk_run runs[DISK_RECORD_MAX];
	int n = disk_record_read(f->fd, runs), r;

	if (n == -EIO) {
		runs[0].start = 0;
		runs[0].end = (size + vr_page_size - 1) >> vr_page_shift;
		n = runs[0].end ? 1 : 0;
		f->disk_refused = "its user.vrange.purged attribute is malformed";
	}
	if (n <= 0)
		return n;
	r = vfile_lock(f);
	if (r < 0)
		return r;
	for (int i = 0; i < n && r == 0; i++) {
		uint64_t s = runs[i].start, e = runs[i].end;

		if (f->shared)
			vshared_note_end(&f->sh, e);
		for (;;) {
			r = rt_mark_volatile(&f->tree, s, e, 0, vr_next_seq(), NULL);
			if (r == 0)
				r = rt_mark_purged(&f->tree, s, e, NULL);
			if (r != -ENOMEM)
				break;
			r = arena_grow(f);
			if (r < 0)
				break;
		}
		if (r == 0)
			r = keep_spare(f);
	}
	vfile_unlock(f);
	return r;
}

static int vfile_new(int fd, const struct stat *st, struct vfile **out)
{
	struct vfile *f = vfile_alloc(st);
	int r;

	if (!f)
		return -ENOMEM;
	r = own_descriptor(fd, &f->own_ofd);
	if (r < 0)
		goto fail;
	f->fd = r;
	r = vshared_open(f->fd, &f->sh, &f->tree);
	if (r == 0) {
		/* A foreign file: its state belongs to the file too (contract
		 * 1), so it gets shared metadata where the file takes the
		 * attribute that names it; else process-local state. */
		const char *why;

		r = vshared_open_foreign(f->fd, &f->sh, &f->tree, &why);
		if (r == 0)
			vr_debug("file %lu keeps process-local state: %s",
				 (unsigned long)f->ino, why);
	}
	f->disk = disk_is_disk(f->fd);
	/* A disk file whose state cannot be shared is never punched: another
	 * process could punch by its own copy what this one reports INTACT,
	 * and the same refusal would meet the record. */
	if (r == 0 && f->disk) {
		f->disk_refused = "the file system refuses the user.vrange attribute";
		vr_debug("disk file %lu is never punched: %s", (unsigned long)f->ino,
			 f->disk_refused);
	}
	if (r == 0)
		r = arena_create(f);
	else if (r == 1)
		f->shared = true;
	if (r >= 0 && f->disk)
		r = disk_load(f, (uint64_t)st->st_size);
	if (r < 0)
		goto fail;
	room_take(f);
	*out = f;
	return 0;
fail:
	vfile_free(f);
	return r;
}

/* Registry lock held. */
static void registry_push(struct vfile *f)
{
	findex_add(f);
	f->prev = NULL;
	f->next = registry;
	if (registry)
		registry->prev = f;
	registry = f;
}

static struct vfile *vfile_alloc(const struct stat *st)
{
	struct vfile *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->fd = -1;
	f->wd = -1;
	f->arena_fd = -1;
	f->sh.meta_fd = -1;
	f->sh.slot.fd = -1;
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->refs = 1;
	pthread_mutex_init(&f->lock, NULL);
	return f;
}

static void registry_add(struct vfile *f)
{
	pthread_mutex_lock(&registry_lock);
	registry_push(f);
	pthread_mutex_unlock(&registry_lock);
	vfile_publish(f);
}

int vfile_new_region(int fd, const struct stat *st, uint64_t size,
		     struct vfile **out)
{
	struct vfile *f = vfile_alloc(st);
	int r;

	if (!f)
		return -ENOMEM;
	/* A fresh memfd: its inode is in no entry of the registry (an entry
	 * keeps its file, and so its inode number, alive), so no lookup. */
	r = vshared_pool_format(&f->sh, &f->tree, fd, size, st->st_dev, st->st_ino);
	if (r < 0) {
		vfile_free(f);
		return r;
	}
	f->fd = fd;
	f->fd_borrowed = true;
	f->shared = true;
	atomic_store(&f->lazy, true);
	registry_add(f);
	*out = f;
	return 0;
}

/* Another mapping of f's file may read its holes from now on: the purged
 * pages our region's mapping left to the fault thread get their poison
 * first.  Where that fails the file stays unreached (the caller fails). */
static int reach(struct vfile *f)
{
	int r = 0;

	if (!atomic_load(&f->unreached))
		return 0;
	pthread_mutex_lock(&f->lock);
	if (atomic_load(&f->unreached) && (r = vfile_lock(f)) == 0) {
		for (struct vmap *m = f->maps; m && r == 0; m = m->next)
			if (m->region)
				r = uffd_region_poison_holes(m->region);
		if (r == 0)
			atomic_store(&f->unreached, false);
		vfile_unlock(f);
	}
	pthread_mutex_unlock(&f->lock);
	return r;
}

static int share(struct vfile *f, bool own_fd)
{
	struct shared_lock *old;
	bool own = false;
	int nfd = -1, r = reach(f);

	if (r < 0 || !atomic_load_explicit(&f->lazy, memory_order_acquire))
		return r;
	pthread_mutex_lock(&f->lock);
	if (!atomic_load(&f->lazy))
		goto out;
	if (f->fd_borrowed && own_fd) {
		nfd = own_descriptor(f->fd, &own);
		if (nfd < 0) {
			r = nfd;
			goto out;
		}
	}
	r = vfile_lock(f);
	if (r < 0)
		goto out;
	if (nfd >= 0) {
		/* Under the tree lock, which every punch holds: a purge
		 * finds one number or the other, both name the file. */
		f->fd = nfd;
		f->own_ofd = own;
		f->sh.user_fd = nfd;
		f->fd_borrowed = false;
		nfd = -1;
	}
	if (f->sh.pooled) {
		r = vshared_move(&f->sh, &f->tree, &old);
		if (r < 0) {
			vfile_unlock(f);
			goto out;
		}
		shared_lock_release(old);
	} else {
		vfile_unlock(f);
	}
	if (f->fd_borrowed)
		goto out; /* the state moved, the descriptor is still borrowed */
	atomic_store_explicit(&f->lazy, false, memory_order_release);
out:
	pthread_mutex_unlock(&f->lock);
	if (nfd >= 0)
		close(nfd);
	if (r == 0)
		vfile_publish(f);
	return r;
}

int vfile_share(struct vfile *f)
{
	return share(f, true);
}

/* Must f be shared before a fork: its state in our pool, or holes only
 * our own mapping may touch (the child maps the file too). */
static bool goes_to_child(struct vfile *f)
{
	return f->shared && (f->sh.pooled || atomic_load(&f->unreached));
}

void vfile_share_all_states(void)
{
	struct vfile **v = NULL;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next)
		cap += goes_to_child(f);
	if (cap)
		v = malloc(cap * sizeof(*v));
	for (struct vfile *f = registry; v && f && n < cap; f = f->next) {
		if (goes_to_child(f)) {
			f->refs++;
			v[n++] = f;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	for (size_t i = 0; i < n; i++) {
		if (share(v[i], false) < 0)
			vr_debug("a region's state stays in the pool across fork");
		vfile_put(v[i]);
	}
	free(v);
}

static struct vfile *lookup_locked(dev_t dev, ino_t ino)
{
	return findex_find(dev, ino, false);
}

struct vfile *vfile_new_anon(void)
{
	struct vfile *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->fd = -1;
	f->wd = -1;
	f->arena_fd = -1;
	f->sh.meta_fd = -1;
	f->anon = true;
	f->refs = 1; /* never dropped */
	pthread_mutex_init(&f->lock, NULL);
	if (arena_create(f) < 0) {
		vfile_free(f);
		return NULL;
	}
	pthread_mutex_lock(&registry_lock);
	registry_push(f);
	pthread_mutex_unlock(&registry_lock);
	vfile_publish(f);
	return f;
}

/* f was found by its identity: something besides its region reaches the
 * file (an fd passed to the file layer, a mapping, an adopt).  A private
 * region's state must be where that finds it.  Drops the reference taken
 * if it cannot be. */
static int found(struct vfile *f, int fd)
{
	int r;

	/* The very descriptor the vfile borrows, from the one who lends it
	 * and keeps it open past every reference (the shim's own): no
	 * escape. */
	if (fd >= 0 && f->fd_kept && fd == f->fd)
		return 0;
	r = vfile_share(f);

	if (r < 0)
		vfile_put(f);
	return r;
}

struct vfile *vfile_find(dev_t dev, ino_t ino, int fd)
{
	struct vfile *f;

	pthread_mutex_lock(&registry_lock);
	f = lookup_locked(dev, ino);
	if (f)
		f->refs++;
	pthread_mutex_unlock(&registry_lock);
	if (f && found(f, fd) < 0)
		f = NULL;
	return f;
}

/* O(1) both ways: a process may hold 100,000 regions. */
static void registry_unlink(struct vfile *f)
{
	findex_del(f);
	if (f->prev)
		f->prev->next = f->next;
	else if (registry == f)
		registry = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->next = f->prev = NULL;
}

/*
 * Dormant orphans.  State belongs to the file (contract 1), and unmapping
 * a shared-file mapping leaves it as it was (contract 5) - yet we must
 * not keep a file alive that the application let go of.  Whether anybody
 * else can still reach a file cannot be read off the file: a memfd's own
 * descriptor (memfd_create) counts nowhere a lease could see, and another
 * process may hold it and pass it back.  So an orphan that may be
 * unreachable closes our descriptor and keeps its state without it,
 * watched through inotify: the kernel reports IN_IGNORED for the watch
 * when the file's last reference anywhere goes and the file dies - the
 * one moment its state can no longer be asked for.  Meanwhile the watch
 * pins the inode (its number cannot be reused); when a file with that
 * device and inode is met again, its birth time (or, without one, the
 * watch the kernel returns for it) tells whether it is the same file.
 */

/* Our inotify instance, or -1.  A number the application closed and
 * reused is not read (its link names no inotify instance).  Registry
 * lock held. */
static int watch_fd(bool create)
{
	char path[64], link[32] = "";
	ssize_t n;

	if (watch_ifd >= 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", watch_ifd);
		n = readlink(path, link, sizeof(link) - 1);
		/* Out of memory says nothing about the number: neither read
		 * it nor forget it (forgetting would leak it for good). */
		if (n < 0 && errno != ENOENT && errno != EBADF)
			return -1;
		if (n < 0 || strcmp(link, "anon_inode:inotify") != 0) {
			watch_ifd = -1; /* not ours any more: never close it */
			for (struct vfile *f = registry; f; f = f->next)
				f->wd = -1;
		}
	}
	if (watch_ifd < 0 && create)
		watch_ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	return watch_ifd;
}

/* The watch wd is gone: its file died (or we removed it).  Registry
 * lock held; a dormant vfile goes, its state with its file. */
static void watch_gone(int wd, struct vfile **dead)
{
	for (struct vfile *f = registry; f; f = f->next) {
		if (f->wd != wd)
			continue;
		f->wd = -1;
		if (f->dormant) {
			registry_unlink(f);
			f->next = *dead;
			*dead = f;
		}
		return;
	}
}

/* Read what the kernel reported: files that died.  Registry lock held. */
static void watch_drain(struct vfile **dead)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int ifd = watch_fd(false);
	ssize_t n;

	while (ifd >= 0 && (n = read(ifd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p + sizeof(struct inotify_event) <= buf + n;) {
			const struct inotify_event *e = (const void *)p;

			if (e->mask & IN_IGNORED)
				watch_gone(e->wd, dead);
			p += sizeof(*e) + e->len;
		}
	}
}

static void free_list(struct vfile *dead)
{
	for (struct vfile *f = dead, *next; f; f = next) {
		next = f->next;
		publish_del(&f->pub_slot);
		vfile_free(f);
	}
}

static bool birth_time(int fd, int64_t *sec, uint32_t *nsec)
{
	struct statx sx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_BTIME, &sx) < 0 ||
	    !(sx.stx_mask & STATX_BTIME))
		return false;
	*sec = sx.stx_btime.tv_sec;
	*nsec = sx.stx_btime.tv_nsec;
	return true;
}

/* Is the file behind fd the dormant f's file?  Registry lock held. */
static bool same_file(struct vfile *f, int fd)
{
	char path[64];
	int64_t sec;
	uint32_t nsec;
	int ifd = watch_fd(false), w;

	if (f->btime_sec || f->btime_nsec)
		return birth_time(fd, &sec, &nsec) && sec == f->btime_sec &&
		       nsec == f->btime_nsec;
	if (f->wd < 0 || ifd < 0)
		return false;
	/* One watch per inode and instance: the same file gets f's back. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	w = inotify_add_watch(ifd, path, IN_DELETE_SELF | IN_MASK_ADD);
	if (w >= 0 && w != f->wd)
		inotify_rm_watch(ifd, w);
	return w == f->wd;
}

/*
 * Close our descriptor of the orphan f and keep its state dormant, or
 * (no watch to be had) leave it as it is: never drop state of a file that
 * may still be reached.  Registry lock held, no references.
 */
static void go_dormant(struct vfile *f)
{
	char path[64];
	int ifd = watch_fd(true);

	if (ifd < 0 || f->fd < 0)
		return;
	if (f->wd < 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", f->fd);
		f->wd = inotify_add_watch(ifd, path, IN_DELETE_SELF);
		if (f->wd < 0)
			return;
	}
	if (!birth_time(f->fd, &f->btime_sec, &f->btime_nsec))
		f->btime_sec = f->btime_nsec = 0;
	room_drop(f);
	close(f->fd);
	f->fd = -1;
	f->sh.user_fd = -1; /* a moved state is found through it */
	f->dormant = true;
	publish_del(&f->pub_slot);
}

/*
 * The dormant state of the file behind fd (st), made live again with a
 * reference, or NULL.  A dormant vfile whose device and inode now name
 * another file was a dead file's: it goes to *dead.  Registry lock held.
 */
static struct vfile *revive(int fd, const struct stat *st, struct vfile **dead)
{
	struct vfile *f;
	int nfd;

	watch_drain(dead);
	f = findex_find(st->st_dev, st->st_ino, true);
	if (!f)
		return NULL;
	if (!same_file(f, fd)) {
		registry_unlink(f);
		f->next = *dead;
		*dead = f;
		return NULL;
	}
	nfd = own_descriptor(fd, &f->own_ofd);
	if (nfd < 0)
		return NULL;
	f->fd = nfd;
	f->sh.user_fd = nfd;
	f->dormant = false;
	f->refs = 1;
	room_take(f);
	if (f->shared) /* a fork child kept it without being a holder */
		vshared_add_self(f->fd, &f->sh, &f->tree);
	return f;
}

bool vfile_dormant_known(dev_t dev, ino_t ino)
{
	bool found = false;

	pthread_mutex_lock(&registry_lock);
	found = findex_find(dev, ino, true) != NULL;
	pthread_mutex_unlock(&registry_lock);
	return found;
}

int vfile_get(int fd, const struct stat *st, struct vfile **out)
{
	struct vfile *f, *dead = NULL;
	bool created = false, fresh = false;
	int r = 0;

	pthread_mutex_lock(&registry_lock);
	f = lookup_locked(st->st_dev, st->st_ino);
	if (f) {
		f->refs++;
	} else if ((f = revive(fd, st, &dead)) != NULL) {
		created = true;
	} else {
		r = vfile_new(fd, st, &f);
		if (r == 0) {
			registry_push(f);
			created = fresh = true;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	free_list(dead);
	if (created)
		vfile_publish(f);
	/* Found, or revived (a state that could not move before it went
	 * dormant): it must be where the caller's lookup finds it. */
	if (r == 0 && !fresh)
		r = found(f, fd);
	if (r == 0)
		*out = f;
	return r;
}

int vfile_get_slot(int fd, const struct stat *st, int pool_fd, uint64_t off,
		   uint64_t arena_bytes, uint64_t user_size, struct vfile **out)
{
	struct vfile *f;
	int r;

	pthread_mutex_lock(&registry_lock);
	f = lookup_locked(st->st_dev, st->st_ino);
	if (f)
		f->refs++;
	pthread_mutex_unlock(&registry_lock);
	if (f) {
		*out = f;
		return 0;
	}
	f = vfile_alloc(st);
	if (!f)
		return -ENOMEM;
	r = own_descriptor(fd, &f->own_ofd);
	if (r >= 0) {
		f->fd = r;
		r = vshared_attach_slot(&f->sh, &f->tree, f->fd, pool_fd, off,
					arena_bytes, user_size, st->st_dev, st->st_ino);
	}
	if (r < 0) {
		vfile_free(f);
		return r;
	}
	f->shared = true;
	registry_add(f);
	*out = f;
	return 0;
}

void vfile_note_app_mapped(struct vfile *f)
{
	pthread_mutex_lock(&registry_lock);
	f->app_mapped = true;
	pthread_mutex_unlock(&registry_lock);
}

/*
 * Can nobody but us reach the file any more, as far as the kernel shows?
 * It has no name, and a write lease - refused while any other open file
 * description of the file that the kernel counts is open - can be had on
 * our own.  The lease is let go at once; it has no owner to signal.  Any
 * doubt (a descriptor that is a dup, no lease rights) says "reachable".
 * A "yes" is not proof: a memfd's own descriptor is not counted.
 */
static bool file_unreachable(struct vfile *f)
{
	struct stat st;
	bool gone;

	if (!f->own_ofd || fstat(f->fd, &st) < 0 || st.st_nlink > 0)
		return false;
	gone = fcntl(f->fd, F_SETLEASE, F_WRLCK) == 0;
	if (gone)
		fcntl(f->fd, F_SETLEASE, F_UNLCK);
	return gone;
}

/*
 * Keep f, reference-less, for the state that belongs to its file?  A file
 * seen through an application mapping, or a library file whose state is
 * shared (a region destroyed after its descriptor went out: the
 * application may still map it, hold it, pass it on), with volatile or
 * purged ranges is kept: with our descriptor while it has volatile ranges
 * and can be reached (purges can still discard them, the stats count
 * them), else dormant - dropping it would make a later unmark of its
 * purged pages say VRANGE_INTACT over zeros.  Registry lock held.
 */
static bool keep_orphan(struct vfile *f, struct held_set *h)
{
	uint64_t vol = 1, purged = 1; /* a lock that cannot be had: keep */

	/* A private region's state: nobody else can ask for it, and the
	 * descriptor is not ours to keep (or is the destroyed lender's).  A
	 * borrowed descriptor is always a lazy vfile's (share() ends
	 * borrowing before laziness). */
	if (atomic_load(&f->lazy))
		return false;
	if (f->anon)
		return true;
	if (!f->app_mapped && !vfile_is_library(f))
		return false;
	if (vfile_lock(f) == 0) {
		vol = rt_volatile_pages(&f->tree);
		purged = rt_purged_pages(&f->tree);
		vfile_unlock(f);
	}
	if (vol + purged == 0)
		return false;
	/* A memfd's own descriptor, and its mappings, count nowhere a lease
	 * sees: what this process holds is asked directly.  While it holds
	 * the file our descriptor costs nothing, and the state stays
	 * purgeable and counted (issue 25, item 8). */
	if (!f->dormant && !held_here(h, f->dev, f->ino, f->fd) && (!vol || file_unreachable(f)))
		go_dormant(f);
	return true;
}

/* Drop a reference that is not the last one, without the registry lock
 * (the file layer takes and drops one per call); false: it may be the
 * last, which goes under the lock - there no lookup can take a new one
 * while the file's fate is decided.  References are only taken under the
 * lock, so one seen above 1 here cannot reach 0 but by a put. */
static bool drop_not_last(struct vfile *f)
{
	unsigned int n = atomic_load_explicit(&f->refs, memory_order_relaxed);

	while (n > 1)
		if (atomic_compare_exchange_weak(&f->refs, &n, n - 1))
			return true;
	return false;
}

void vfile_put(struct vfile *f)
{
	struct vfile *dead = NULL;
	struct held_set h = { 0 };
	bool keep;

	if (!f)
		return;
	if (drop_not_last(f))
		return;
	pthread_mutex_lock(&registry_lock);
	if (atomic_fetch_sub(&f->refs, 1) > 1) {
		pthread_mutex_unlock(&registry_lock);
		return;
	}
	keep = keep_orphan(f, &h);
	held_free(&h);
	if (keep) {
		if (f->dormant)
			watch_drain(&dead); /* it may have died at once */
		pthread_mutex_unlock(&registry_lock);
		free_list(dead);
		return;
	}
	registry_unlink(f);
	pthread_mutex_unlock(&registry_lock);
	publish_del(&f->pub_slot);
	vfile_free(f);
}

bool vfile_put_lender(struct vfile *f, int fd, int (*close_fd)(int))
{
	bool kept = false;

	/* No state (a shim area whose state could not be held): the lender's
	 * descriptor is still the lender's to close. */
	if (!f) {
		if (fd >= 0)
			close_fd(fd);
		return false;
	}
	pthread_mutex_lock(&f->lock);
	if (f->fd_borrowed && f->fd == fd) {
		f->fd_borrowed = false;
		kept = true;
	}
	pthread_mutex_unlock(&f->lock);
	/* Before the reference goes: the lender's descriptor is not one
	 * that holds the file for the application (held_here). */
	if (!kept)
		close_fd(fd);
	vfile_put(f);
	return kept;
}

void vfile_sweep_orphans(void)
{
	struct vfile *dead = NULL, *f, *next;
	struct held_set h = { 0 };

	pthread_mutex_lock(&registry_lock);
	watch_drain(&dead);
	for (f = registry; f; f = next) {
		next = f->next;
		if (atomic_load(&f->refs) == 0 && !keep_orphan(f, &h)) {
			registry_unlink(f);
			f->next = dead;
			dead = f;
		}
	}
	watch_drain(&dead);
	pthread_mutex_unlock(&registry_lock);
	held_free(&h);
	free_list(dead);
}

/* A foreign file's tree lock is never legitimately held this long. */
#define LOCAL_LOCK_TIMEOUT_MS 60000u

/*
 * The tree lock: a library file's shared lock (it serialises this process's
 * threads too), else the file's own tree_lock - the same futex lock, whose
 * uncontended path is one inline compare-and-swap.
 */
int vfile_lock(struct vfile *f)
{
	if (f->shared) {
		int r = vshared_lock(&f->sh, &f->tree);

		/* Another process may have grown a foreign file's arena. */
		if (r == 0 && (r = vshared_follow_check(&f->sh, &f->tree)) < 0)
			vshared_unlock(&f->sh);
		return r;
	}
	return shared_lock_acquire(&f->tree_lock, LOCAL_LOCK_TIMEOUT_MS) < 0 ? -EIO : 0;
}

void vfile_unlock(struct vfile *f)
{
	pw_plain_resume(&f->tree.pw);
	if (f->shared)
		vshared_unlock(&f->sh);
	else
		shared_lock_release(&f->tree_lock);
}

/* Both locks, for changing the mapping list.  A tree lock that cannot be
 * had (hostile metadata) still lets the list change under the local one. */
static bool lock_both(struct vfile *f)
{
	pthread_mutex_lock(&f->lock);
	return vfile_lock(f) == 0;
}

static void unlock_both(struct vfile *f, bool tree_held)
{
	if (tree_held)
		vfile_unlock(f);
	pthread_mutex_unlock(&f->lock);
}

/* The mark under the lock (kept out of line: the lock-free single page
 * then pays for no registers it does not use). */
static __attribute__((noinline)) int mark_locked(struct vfile *f, uint64_t start,
						 uint64_t end, int32_t prio,
						 uint64_t seq, uint32_t cost)
{
	int r = vfile_lock(f);

	if (r < 0)
		return r;
	if (f->shared)
		vshared_note_end(&f->sh, end);
	for (;;) {
		r = rt_mark_volatile_cost(&f->tree, start, end, prio,
					  seq ? seq : vr_next_seq(), cost, NULL);
		if (r != -ENOMEM)
			break;
		r = arena_grow(f);
		if (r < 0)
			break;
	}
	if (r == 0)
		r = keep_spare(f);
	vfile_unlock(f);
	/* After the mark: the monitor it wakes must see it. */
	pressure_note_mark();
	return r;
}

int vfile_mark_volatile_at(struct vfile *f, uint64_t start, uint64_t end,
			   int32_t prio, uint64_t seq, uint32_t cost)
{
	struct pw_hdr *h;
	uint32_t n;

	if (end - start == 1 && (h = vfile_fast_words(f, &n)) &&
	    pw_fast_mark_cost(h, n, start, prio, seq ? seq : vr_next_seq(),
			      cost) == 1) {
		pressure_note_mark();
		return 0;
	}
	return mark_locked(f, start, end, prio, seq, cost);
}

/* Clip the file bytes [*off, *off + *len) to what m maps; false if none. */
static bool map_clip(const struct vmap *m, size_t *off, size_t *len)
{
	size_t end = *off + *len;

	if (*off < m->first)
		*off = m->first;
	if (end > m->size)
		end = m->size;
	if (*off >= end)
		return false;
	*len = end - *off;
	return true;
}

struct unpoison_ctx {
	struct vfile *f;
};

/* A purged range: let every SIGBUS mapping fault fresh zero pages there. */
static int unpoison_range(const struct rt_range *rr, void *arg)
{
	struct unpoison_ctx *c = arg;
	size_t off = (size_t)rr->start << vr_page_shift;
	size_t len = (size_t)(rr->end - rr->start) << vr_page_shift;

	if (rr->state != RT_PURGED)
		return 0;
	if (c->f->anon)
		return anymap_unpoison(rr->start, rr->end);
	for (struct vmap *m = c->f->maps; m; m = m->next) {
		size_t o = off, l = len;
		int r;

		if (!m->sigbus || !map_clip(m, &o, &l))
			continue;
		/* Pages that could still raise SIGBUS stay purged: the caller
		 * gets the error and may ask again.  An application's mapping
		 * may have gone meanwhile: app_map_faults.h. */
		r = m->region ? uffd_after_nonvolatile(m, o, l) :
				appmap_unpoison(c->f, m, o, l);
		if (r < 0)
			return r;
	}
	return 0;
}

static bool has_sigbus_map(const struct vfile *f)
{
	for (const struct vmap *m = f->maps; m; m = m->next)
		if (m->sigbus)
			return true;
	return false;
}

/* The one reason a disk file stops being punched that goes away: an unmark
 * that takes runs out of the record makes room again. */
static const char record_full[] = "its record of punched ranges is full";

/* The unmark under the lock (out of line, as mark_locked).  keep_record:
 * vrange_fd_forget's clear - pages a disk file had punched stay in its
 * record (contract 9: still VRANGE_PURGED for a later unmark). */
static __attribute__((noinline)) int unmark_locked(struct vfile *f, uint64_t start,
						   uint64_t end, bool keep_record)
{
	uint64_t vol = 0, purged = 0;
	int r = vfile_lock(f);

	if (r < 0)
		return r;
	/* Nothing purged anywhere in the file (one counter): no walk. */
	if (rt_purged_pages(&f->tree) && (f->anon || has_sigbus_map(f))) {
		struct unpoison_ctx c = { f };

		r = rt_visit(&f->tree, start, end, unpoison_range, &c);
		if (r < 0)
			goto out;
	}
	for (;;) {
		r = rt_clear(&f->tree, start, end, &vol, &purged);
		if (r != -ENOMEM)
			break;
		r = arena_grow(f);
		if (r < 0)
			goto out;
	}
	/* Reported, so forgotten: the record follows the tree, under the
	 * same lock hold (a purge adding these pages again waits for it). */
	if (r == 0 && purged && f->disk && !keep_record) {
		if (disk_record_clear(f->fd, start, end) < 0)
			vr_debug("disk file %lu: its record kept pages an unmark reported",
				 (unsigned long)f->ino);
		else if (f->disk_refused == record_full)
			f->disk_refused = NULL;
	}
	if (r == 0)
		r = purged ? VRANGE_PURGED : VRANGE_INTACT;
out:
	vfile_unlock(f);
	return r;
}

int vfile_mark_nonvolatile(struct vfile *f, uint64_t start, uint64_t end)
{
	struct pw_hdr *h;
	uint32_t n;

	if (end - start == 1 && (h = vfile_fast_words(f, &n)) &&
	    pw_fast_clear(h, n, start) == 1)
		return VRANGE_INTACT;
	return unmark_locked(f, start, end, false);
}

int vfile_is_volatile(struct vfile *f, uint64_t start, uint64_t end)
{
	uint64_t vol = 0, purged = 0;
	int r = vfile_lock(f);

	if (r < 0)
		return r;
	r = rt_count(&f->tree, start, end, &vol, &purged);
	vfile_unlock(f);
	if (r < 0)
		return r;
	return (vol + purged) > 0;
}

int vfile_clear_all(struct vfile *f)
{
	return unmark_locked(f, 0, UINT64_MAX >> 1, true) < 0 ? -EIO : 0;
}

void vfile_add_map(struct vfile *f, struct vmap *m)
{
	bool held = lock_both(f);

	m->next = f->maps;
	f->maps = m;
	unlock_both(f, held);
	vfile_publish(f);
}

void vfile_del_map(struct vfile *f, struct vmap *m)
{
	bool held = lock_both(f);

	for (struct vmap **pp = &f->maps; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	}
	unlock_both(f, held);
	vfile_publish(f);
}

int vfile_peek_oldest(struct vfile *f, uint64_t max_seq, struct rt_range *out)
{
	int r;

	/* A disk file whose record cannot be kept has nothing to purge. */
	if (f->disk && f->disk_refused)
		return 0;
	r = vfile_lock(f);
	if (r < 0)
		return r;
	r = rt_oldest_before(&f->tree, max_seq, out);
	vfile_unlock(f);
	return r;
}

static uint64_t allocated_bytes(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

/* Undo uffd_before_discard on the SIGBUS mappings before stop. */
static void disarm_until(struct vfile *f, struct vmap *stop, size_t off, size_t len)
{
	for (struct vmap *m = f->maps; m != stop; m = m->next) {
		size_t o = off, l = len;

		if (!m->skip && map_clip(m, &o, &l))
			uffd_cancel_discard(m, o, l);
	}
}

/*
 * uffd_before_discard on every SIGBUS mapping, or on none: -EAGAIN.  An
 * application's mapping that failed may have been unmapped, or be one the
 * kernel never lets us arm: app_map_faults.h decides.
 */
static int arm_all(struct vfile *f, size_t off, size_t len)
{
	for (struct vmap *m = f->maps; m; m = m->next) {
		size_t o = off, l = len;
		int r;

		m->skip = !m->sigbus || !map_clip(m, &o, &l);
		if (m->skip)
			continue;
		r = m->region ? uffd_before_discard(m, o, l) : appmap_arm(f, m, o, l);
		if (r < 0) {
			m->skip = true;
			disarm_until(f, m, off, len);
			return -EAGAIN;
		}
	}
	return 0;
}

/* Does f->fd still name f's file?  Its allocated bytes, too (one fstat). */
static bool own_fd_is_file(const struct vfile *f, uint64_t *bytes)
{
	struct stat st;

	if (fstat(f->fd, &st) < 0 || st.st_dev != f->dev || st.st_ino != f->ino)
		return false;
	*bytes = (uint64_t)st.st_blocks * 512;
	return true;
}

/*
 * Pages [start, end) of a library or application file, already recorded
 * RT_PURGED: arm the SIGBUS-mode mappings, punch, poison and disarm them.
 * (When a system call fails: docs/design.md.)
 */
static void punch_hole(struct vfile *f, size_t off, size_t len)
{
	if (fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) < 0)
		vr_debug("punching %zu bytes at %zu failed: %s", len, off,
			 strerror(errno));
}

/* false: not punched (discard_batch puts the run back). */
static bool punch_run(struct vfile *f, uint64_t start, uint64_t end)
{
	size_t off = (size_t)start << vr_page_shift;
	size_t len = (size_t)(end - start) << vr_page_shift;

	/* A SIGBUS mapping that cannot be armed would read zeros: then
	 * nothing is punched, and the pages keep their data. */
	if (arm_all(f, off, len) < 0)
		return false;
	punch_hole(f, off, len);
	for (struct vmap *m = f->maps; m; m = m->next) {
		size_t o = off, l = len;

		if (m->skip || !map_clip(m, &o, &l))
			continue;
		if (m->region)
			uffd_after_discard(m, o, l);
		else
			appmap_after_discard(f, m, o, l);
	}
	return true;
}

/* May range r join a batch that must stay ahead of lim in purge order? */
static bool may_take(const struct rt_range *r, const struct purge_limit *lim)
{
	return r->seq <= lim->max_seq && (!lim->other || !vfile_older(&lim->other_oldest, r));
}

/* The ranges of one purge step, in the order they were taken. */
#define BATCH_RUNS 64u
struct batch {
	uint32_t n;
	uint64_t start[BATCH_RUNS], end[BATCH_RUNS];
	int32_t prio[BATCH_RUNS];  /* each run's place in the order, as taken */
	uint64_t seq[BATCH_RUNS];
	uint32_t cost[BATCH_RUNS]; /* and its cost */
};

/* Runs of pages: a batch's in address order, neighbours joined, as they
 * are punched; or those left unpunched. */
struct spans {
	uint32_t n;
	uint64_t start[BATCH_RUNS], end[BATCH_RUNS];
};

/* Is page pg in one of the runs (sorted, joined)?  *i: a cursor for
 * ascending pg. */
static bool in_runs(const struct spans *b, uint64_t pg, uint32_t *i)
{
	while (*i < b->n && b->end[*i] <= pg)
		(*i)++;
	return *i < b->n && b->start[*i] <= pg;
}

/* Largest span armed at once (its residency vector lives on the stack). */
#define SPAN_MAX_PAGES 4096u

/*
 * May the span of the batch's runs be armed once in every SIGBUS mapping
 * of f?  Each mapping must allow it (uffd_span_ok) and still map the file
 * all along the span (appmap_holds), and every page of the
 * span that the batch does not punch must be in the file's page cache
 * (mincore): while armed, a touch of a hole raises SIGBUS, and such a page
 * may be non-volatile.  A page in the cache stays there meanwhile: only a
 * purge removes data, and this one holds the file's lock.
 */
static bool span_armable(struct vfile *f, const struct spans *b)
{
	uint64_t s = b->start[0], e = b->end[b->n - 1];
	unsigned char vec[SPAN_MAX_PAGES];

	if (e - s > SPAN_MAX_PAGES)
		return false;
	for (struct vmap *m = f->maps; m; m = m->next) {
		size_t o = (size_t)s << vr_page_shift;
		size_t l = (size_t)(e - s) << vr_page_shift;
		uint64_t first;
		uint32_t i = 0;

		if (!m->sigbus || !map_clip(m, &o, &l))
			continue;
		/* A mapping that no longer maps the file all along the
		 * span (unmapped, a newcomer at its address) is judged run
		 * by run (punch_run). */
		if (!uffd_span_ok(m) || !appmap_holds(f, m, o, l) ||
		    mincore(m->base + o, l, vec) < 0)
			return false;
		first = o >> vr_page_shift;
		for (size_t k = 0; k < l >> vr_page_shift; k++)
			if (!in_runs(b, first + k, &i) && !(vec[k] & 1))
				return false;
	}
	return true;
}

/* The runs of b punched under one arming per SIGBUS mapping.  false,
 * nothing punched and nothing left armed, if a mapping refused. */
static bool punch_span(struct vfile *f, const struct spans *b)
{
	size_t off = (size_t)b->start[0] << vr_page_shift;
	size_t len = (size_t)(b->end[b->n - 1] - b->start[0]) << vr_page_shift;

	for (struct vmap *m = f->maps; m; m = m->next) {
		size_t o = off, l = len;

		if (!m->sigbus || !map_clip(m, &o, &l) ||
		    uffd_before_discard(m, o, l) == 0)
			continue;
		for (struct vmap *a = f->maps; a != m; a = a->next) {
			size_t ao = off, al = len;

			if (a->sigbus && map_clip(a, &ao, &al))
				uffd_disarm(a, ao, al);
		}
		return false;
	}
	for (uint32_t i = 0; i < b->n; i++)
		punch_hole(f, (size_t)b->start[i] << vr_page_shift,
			   (size_t)(b->end[i] - b->start[i]) << vr_page_shift);
	for (struct vmap *m = f->maps; m; m = m->next) {
		size_t o = off, l = len;

		if (!m->sigbus || !map_clip(m, &o, &l))
			continue;
		for (uint32_t i = 0; i < b->n; i++) {
			size_t ro = (size_t)b->start[i] << vr_page_shift;
			size_t rl = (size_t)(b->end[i] - b->start[i]) << vr_page_shift;

			if (map_clip(m, &ro, &rl))
				uffd_poison_armed(m, ro, rl);
		}
		uffd_disarm(m, o, l);
	}
	return true;
}

/* The batch's runs in address order, neighbours as one (b itself keeps
 * the order they were taken in, which settle_punched reads). */
static void sorted_runs(const struct batch *b, struct spans *r)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < b->n; i++) { /* insertion sort: n <= 64 */
		uint32_t j = i;

		for (; j > 0 && r->start[j - 1] > b->start[i]; j--) {
			r->start[j] = r->start[j - 1];
			r->end[j] = r->end[j - 1];
		}
		r->start[j] = b->start[i];
		r->end[j] = b->end[i];
	}
	for (uint32_t i = 0; i < b->n; n++) { /* join neighbours */
		uint64_t s = r->start[i], e = r->end[i];

		for (i++; i < b->n && r->start[i] == e; i++)
			e = r->end[i];
		r->start[n] = s;
		r->end[n] = e;
	}
	r->n = n;
}

/* Punch the batch's runs in address order, neighbours as one: a page
 * cache's pages, marked one by one, purge as one hole; scattered ones
 * under one arming where that is safe.  What could not be punched goes
 * to *left. */
static void punch_batch(struct vfile *f, const struct batch *b, struct spans *left)
{
	struct spans runs;

	sorted_runs(b, &runs);
	left->n = 0;
	if (runs.n > 1 && has_sigbus_map(f) && span_armable(f, &runs) &&
	    punch_span(f, &runs))
		return;
	for (uint32_t i = 0; i < runs.n; i++)
		if (!punch_run(f, runs.start[i], runs.end[i])) {
			left->start[left->n] = runs.start[i];
			left->end[left->n++] = runs.end[i];
		}
}

/*
 * A disk file's batch is recorded durably before anything is punched
 * (disk_file.h).  Where the record cannot take it, the runs go back to
 * volatile with their own ages (nothing was punched, nothing is reported
 * purged): -EOPNOTSUPP, this pass passes the file over.  Where the file
 * system lacks the space for it even after the room kept for records was
 * given back (disk_room.h), a later pass tries again; any other refusal is
 * for good: the file is never punched again, and the reason stays in
 * disk_refused for the stats.
 */
static int disk_record(struct vfile *f, struct batch *b, uint64_t *pages)
{
	int r = disk_record_add(f->fd, b->start, b->end, b->n);

	if (r == 0)
		return 0;
	for (uint32_t i = 0; i < b->n; i++) {
		if (rt_unpurge_cost(&f->tree, b->start[i], b->end[i], b->prio[i],
				    b->seq[i], b->cost[i], NULL) < 0)
			vr_debug("disk file %lu: pages left recorded purged",
				 (unsigned long)f->ino);
		*pages -= b->end[i] - b->start[i];
	}
	if (r == -ENOSPC || r == -EDQUOT) {
		vr_debug("disk file %lu: no space for its record yet", (unsigned long)f->ino);
		return -EOPNOTSUPP;
	}
	f->disk_refused = r == -E2BIG ? record_full :
			  r == -EIO ? "its record could not be made durable" :
				      "the file system refuses the record";
	vr_debug("disk file %lu is not punched: %s (%s)", (unsigned long)f->ino,
		 f->disk_refused, strerror(-r));
	return -EOPNOTSUPP;
}

/* Pages [s, e) of a batch's run go back to volatile with (prio, seq, cost). */
static int put_back(struct vfile *f, uint64_t s, uint64_t e, int32_t prio,
		    uint64_t seq, uint32_t cost, uint64_t *pages)
{
	int r;

	for (;;) {
		r = rt_unpurge_cost(&f->tree, s, e, prio, seq, cost, NULL);
		if (r != -ENOMEM)
			break;
		r = arena_grow(f);
		if (r < 0)
			return r;
	}
	if (r == 0)
		*pages -= e - s;
	return r;
}

/*
 * A memory pass over a disk file frees the memory its volatile pages hold
 * in the page cache - punching the rest would lose data on disk and give
 * no memory back.  So b keeps only the runs of pages in the page cache
 * (mincore on a mapping of the run); the others go back to volatile as
 * the most recently marked (as never-touched anonymous pages do: the pass
 * passes over them), and *cached gets the pages kept.  A run that cannot
 * be looked at is put back whole.  Lock held.
 */
static int only_cached(struct vfile *f, struct batch *b, uint64_t *pages,
		       uint64_t *cached)
{
	struct batch in = *b;
	unsigned char vec[4096];
	int r = 0;

	b->n = 0;
	for (uint32_t i = 0; i < in.n && r == 0; i++) {
		uint64_t s = in.start[i];

		while (s < in.end[i] && r == 0) {
			uint64_t e = in.end[i] - s > sizeof(vec) ? s + sizeof(vec) : in.end[i];
			size_t len = (size_t)(e - s) << vr_page_shift;
			void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, f->fd,
				       (off_t)(s << vr_page_shift));
			uint64_t k = 0;

			if (m == MAP_FAILED || mincore(m, len, vec) < 0) {
				memset(vec, 0, sizeof(vec));
			}
			if (m != MAP_FAILED)
				munmap(m, len);
			while (k < e - s && r == 0) {
				uint64_t j = k;
				bool res = vec[k] & 1;

				while (j < e - s && (bool)(vec[j] & 1) == res)
					j++;
				if (!res || b->n == BATCH_RUNS) {
					/* not in the cache: newest; no room: as it was */
					r = put_back(f, s + k, s + j, in.prio[i],
						     res ? in.seq[i] : vr_next_seq(),
						     in.cost[i], pages);
				} else {
					b->prio[b->n] = in.prio[i];
					b->seq[b->n] = in.seq[i];
					b->cost[b->n] = in.cost[i];
					b->start[b->n] = s + k;
					b->end[b->n++] = s + j;
					*cached += j - k;
				}
				k = j;
			}
			s = e;
		}
	}
	return r;
}

/*
 * After the punch: each run of b counts its punched pages times its cost; its pages in a span
 * left unpunched (a SIGBUS mapping that could not be armed: they keep
 * their data) go back to volatile as the most recently marked, so that
 * a later purge - one that can arm the mapping - takes them, instead of
 * staying recorded purged with their data, out of every purge's reach
 * (a false VRANGE_PURGED, and memory kept for good).  Back as the newest:
 * this pass (marks after its start are not its) does not try them again.
 * A tree that cannot take them back leaves them recorded purged: the
 * safe side.
 */
static void settle_punched(struct vfile *f, const struct batch *b,
			   const struct spans *left, uint64_t *pages)
{
	for (uint32_t i = 0; i < b->n; i++) {
		uint64_t kept = 0;

		for (uint32_t j = 0; j < left->n; j++) {
			uint64_t s = b->start[i] > left->start[j] ? b->start[i] : left->start[j];
			uint64_t e = b->end[i] < left->end[j] ? b->end[i] : left->end[j];

			if (s >= e)
				continue;
			kept += e - s;
			if (put_back(f, s, e, b->prio[i], vr_next_seq(), b->cost[i], pages) < 0)
				vr_debug("file %lu: pages left recorded purged",
					 (unsigned long)f->ino);
		}
		purge_note_cost((b->end[i] - b->start[i] - kept) * b->cost[i]);
	}
}

/*
 * Discard the file's oldest ranges, starting with *first, while they stay
 * ahead of lim, up to max_pages and one chunk: the one place where a
 * file's data goes away.  Caller holds the tree lock (see the comment at
 * the top).  Each range is recorded RT_PURGED before anything is punched:
 * a page that went unrecorded could later be reported INTACT; a tree that
 * refuses (-EIO) loses nothing.
 */
static int discard_batch(struct vfile *f, const struct rt_range *first,
			 uint64_t max_pages, const struct purge_limit *lim,
			 uint64_t *freed, uint64_t *pages)
{
	uint64_t left = (f->disk ? VFILE_DISK_CHUNK_BYTES : VFILE_CHUNK_BYTES) >> vr_page_shift;
	uint64_t before, after, n, cached = 0;
	struct rt_range rr = *first;
	struct batch b;
	struct spans unpunched;
	uint32_t taken;
	int r;

	if (left > max_pages)
		left = max_pages;
	b.n = 0;
	/* Our descriptor is a number the application could close behind our
	 * back (a double close) and reopen as another file: punch only the
	 * file it still names.  The pages are still recorded purged: nothing
	 * is reported INTACT that was not kept, and nothing else is touched. */
	if (!own_fd_is_file(f, &before)) {
		vr_debug("the descriptor of file %lu names another file now: not punched",
			 (unsigned long)f->ino);
		n = rr.end - rr.start < left ? rr.end - rr.start : left;
		r = rt_mark_purged(&f->tree, rr.start, rr.start + n, NULL);
		if (r == 0)
			*pages += n;
		return r;
	}
	for (uint32_t tries = 0; tries < 2 * BATCH_RUNS; tries++) {
		uint64_t stop;

		if (rr.end - rr.start > left)
			rr.end = rr.start + left;
		/* Only what is recorded is punched: a single page unmarked
		 * without the lock since the order named it keeps its data. */
		r = rt_purge_exact(&f->tree, &rr, &stop);
		if (r < 0)
			break;
		if (stop > rr.start) {
			b.prio[b.n] = rr.prio;
			b.seq[b.n] = rr.seq;
			b.cost[b.n] = rr.cost ? rr.cost : 1;
			b.start[b.n] = rr.start;
			b.end[b.n++] = stop;
			*pages += stop - rr.start;
			left -= stop - rr.start;
		}
		if (!left || b.n == BATCH_RUNS || keep_spare(f) < 0 ||
		    rt_oldest_before(&f->tree, lim->max_seq, &rr) != 1 ||
		    !may_take(&rr, lim))
			break;
	}
	taken = b.n;
	if (f->disk && lim->memory && b.n && (r = only_cached(f, &b, pages, &cached)) < 0)
		return r;
	if (f->disk && b.n && (r = disk_record(f, &b, pages)) < 0)
		return r;
	punch_batch(f, &b, &unpunched);
	if (f->disk_room)
		disk_room_refill(f->dev);
	settle_punched(f, &b, &unpunched, pages);
	after = allocated_bytes(f->fd);
	if (f->disk && lim->memory)
		*freed += cached << vr_page_shift;
	else
		*freed += before > after ? before - after : 0;
	return taken ? 0 : r;
}

/*
 * Locks are not fair: a purger that takes the lock again at once, on its
 * own CPU, can starve a thread waiting to mark for the whole purge.  When
 * somebody waited, step aside for a moment before the next chunk.
 */
static void yield_to_waiters(struct vfile *f)
{
	struct timespec pause = { 0, 50000 };

	if (f->shared && atomic_exchange_explicit(&f->sh.contended, false,
						  memory_order_relaxed))
		nanosleep(&pause, NULL);
}

int vfile_purge_oldest(struct vfile *f, uint64_t max_pages,
		       const struct purge_limit *lim, uint64_t *freed,
		       uint64_t *pages)
{
	uint64_t chunk = VFILE_CHUNK_BYTES >> vr_page_shift, n;
	struct rt_range rr, after;
	int r = vfile_lock(f);

	if (r < 0)
		return r;
	r = rt_oldest_before(&f->tree, lim->max_seq, &rr);
	if (r <= 0)
		goto out;
	if (f->anon) {
		n = rr.end - rr.start;
		if (n > chunk)
			n = chunk;
		if (n > max_pages)
			n = max_pages;
		/* An anonymous chunk may split into a range per resident run. */
		if (vfile_reserve(f, 2 * (uint32_t)chunk + SPARE_NODES) < 0) {
			r = -ENOMEM;
			goto out;
		}
		anymap_discard(f, rr.start, rr.start + n, freed);
		*pages += n;
		purge_note_cost(n * (rr.cost ? rr.cost : 1));
	} else {
		r = discard_batch(f, &rr, max_pages, lim, freed, pages);
		if (r == -EOPNOTSUPP && f->disk) { /* never punched: passed over */
			r = 0;
			goto out;
		}
		if (r < 0)
			goto out;
	}
	r = keep_spare(f) < 0 ? -ENOMEM : 1;
	/* Progress or stop: a tree that hands out the same oldest range after
	 * it was discarded is corrupt, and callers loop on this. */
	if (r == 1 && rt_oldest_before(&f->tree, lim->max_seq, &after) == 1 &&
	    after.start == rr.start && after.seq == rr.seq && after.prio == rr.prio)
		r = -EIO;
out:
	vfile_unlock(f);
	yield_to_waiters(f);
	return r;
}

/* Which files a pass takes: memory passes every file (disk == NULL; a
 * disk file for its page cache), a disk-space pass only the disk files of
 * *disk. */
static ssize_t oldest_where(struct purge_cand **out, bool skip_shared,
			    bool skip_disk, uint64_t max_seq, const dev_t *disk)
{
	struct purge_cand *v;
	size_t n = 0, cap = 0;
	struct rt_range rr;

	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next)
		cap++;
	v = malloc((cap ? cap : 1) * sizeof(*v));
	for (struct vfile *f = registry; v && f; f = f->next) {
		/* A dormant file has no descriptor to punch with; a fork
		 * child's inherited copy of process-local state may be stale. */
		if ((skip_shared && f->shared) || f->dormant || f->inherited ||
		    (disk && (!f->disk || f->dev != *disk)) || (skip_disk && f->disk) ||
		    vfile_peek_oldest(f, max_seq, &rr) <= 0)
			continue;
		f->refs++;
		v[n].f = f;
		v[n++].oldest = rr;
	}
	pthread_mutex_unlock(&registry_lock);
	if (!v)
		return -ENOMEM;
	*out = v;
	return (ssize_t)n;
}

ssize_t vfile_oldest_all(struct purge_cand **out, bool skip_shared,
			 uint64_t max_seq)
{
	return oldest_where(out, skip_shared, false, max_seq, NULL);
}

ssize_t vfile_oldest_no_disk(struct purge_cand **out, uint64_t max_seq)
{
	return oldest_where(out, false, true, max_seq, NULL);
}

ssize_t vfile_oldest_disk(struct purge_cand **out, dev_t dev, uint64_t max_seq)
{
	return oldest_where(out, false, false, max_seq, &dev);
}

size_t vfile_disk_fs(struct vfile_disk_fs *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next) {
		struct statfs sfs;
		uint64_t vol = 0;
		size_t i;

		if (!f->disk || f->dormant || f->inherited || f->disk_refused ||
		    vfile_lock(f) < 0)
			continue;
		vol = rt_volatile_pages(&f->tree);
		vfile_unlock(f);
		if (!vol)
			continue;
		for (i = 0; i < n && out[i].dev != f->dev; i++)
			;
		if (i < n) {
			out[i].vol_pages += vol;
			continue;
		}
		if (n == max || fstatfs(f->fd, &sfs) < 0)
			continue;
		out[n].dev = f->dev;
		out[n].vol_pages = vol;
		out[n].bavail_bytes = (uint64_t)sfs.f_bavail * (uint64_t)sfs.f_bsize;
		out[n++].total_bytes = (uint64_t)sfs.f_blocks * (uint64_t)sfs.f_bsize;
	}
	pthread_mutex_unlock(&registry_lock);
	return n;
}

void vfile_disk_totals(uint64_t *vol_pages, uint64_t *purged_pages,
		       uint64_t *refused, const char **why)
{
	*vol_pages = *purged_pages = *refused = 0;
	*why = "";
	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next) {
		const char *w = f->disk_refused;

		if (!f->disk || f->dormant)
			continue;
		if (w) {
			(*refused)++;
			*why = w;
		}
		if (vfile_lock(f) == 0) {
			*vol_pages += rt_volatile_pages(&f->tree);
			*purged_pages += rt_purged_pages(&f->tree);
			vfile_unlock(f);
		}
	}
	pthread_mutex_unlock(&registry_lock);
}

void vfile_totals(uint64_t *files, uint64_t *vol_pages, uint64_t *purged_pages,
		  uint64_t *resident_bytes)
{
	*files = *vol_pages = *purged_pages = *resident_bytes = 0;
	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next) {
		if (f->dormant) /* not published either: vrangectl agrees */
			continue;
		*files += f->fd_layer;
		if (vfile_lock(f) == 0) {
			*vol_pages += rt_volatile_pages(&f->tree);
			*purged_pages += rt_purged_pages(&f->tree);
			vfile_unlock(f);
		}
		/* A disk file's blocks are disk space, not memory. */
		if (!f->disk)
			*resident_bytes += allocated_bytes(f->fd);
	}
	pthread_mutex_unlock(&registry_lock);
}

uint64_t vfile_unshared_volatile_pages(void)
{
	uint64_t n = 0;

	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next) {
		if (!f->shared && !f->dormant && vfile_lock(f) == 0) {
			n += rt_volatile_pages(&f->tree);
			vfile_unlock(f);
		}
	}
	pthread_mutex_unlock(&registry_lock);
	return n;
}

int vfile_forget(dev_t dev, ino_t ino)
{
	struct vfile *f;
	int r = -ENOENT;

	pthread_mutex_lock(&registry_lock);
	f = lookup_locked(dev, ino);
	if (f && f->fd_layer) {
		f->fd_layer = false;
		r = 0;
	}
	pthread_mutex_unlock(&registry_lock);
	if (r == 0) {
		/* A library file's state is every process's: leave it be. */
		if (!f->shared)
			vfile_clear_all(f);
		vfile_publish(f);
		/* Threads may use f without a reference of their own while
		 * the file layer's lasts (fd_hint.h): not past this. */
		fd_hint_forgotten(f);
		vfile_put(f);
	}
	return r;
}

int vfile_attach_fd_layer(struct vfile *f)
{
	bool changed = false;

	/* Attached already (every call after the first): no lock.  A forget
	 * racing this call is ordered as it is with the lock: it may come
	 * after the lookup and before the mark either way. */
	if (atomic_load_explicit(&f->fd_layer, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&registry_lock);
	if (!f->fd_layer) {
		/* The file layer's own reference, dropped by vfile_forget(). */
		f->fd_layer = true;
		f->refs++;
		changed = true;
	}
	pthread_mutex_unlock(&registry_lock);
	if (changed)
		vfile_publish(f);
	return 0;
}

/*
 * What vrangectl needs to reach f: its identity, the process's descriptors
 * of it and of the memfd holding its tree, and how this process maps it.
 * Caller holds a reference and no lock of f.
 */
void vfile_publish(struct vfile *f)
{
	struct pub_file e = {
		.dev = (uint64_t)f->dev, .ino = (uint64_t)f->ino,
		.user_fd = f->fd, .state_fd = f->shared ? f->sh.meta_fd : f->arena_fd,
	};

	e.flags = (vfile_is_library(f) ? PUB_SHARED : 0) | (f->anon ? PUB_ANON : 0) |
		  (f->fd_layer ? PUB_FD_LAYER : 0) | (f->cache ? PUB_CACHE : 0) |
		  (f->shared && f->sh.foreign ? PUB_FOREIGN_SHARED : 0);
	e.user_size = vfile_is_library(f) ? f->sh.user_size : 0;
	pthread_mutex_lock(&f->lock);
	if (f->shared && f->sh.pooled) {
		/* The tree is a slot of the pool (state_pool.h). */
		e.flags |= PUB_POOL;
		e.state_fd = f->sh.slot.fd;
		e.state_off = f->sh.slot.off;
		e.state_bytes = f->sh.arena_bytes;
	}
	pthread_mutex_unlock(&f->lock);
	pthread_mutex_lock(&f->lock);
	for (struct vmap *m = f->maps; m; m = m->next) {
		e.regions += m->region != NULL;
		e.sigbus_regions += m->region && m->sigbus;
	}
	pthread_mutex_unlock(&f->lock);
	publish_set(&f->pub_slot, &e);
}

/*
 * A process-local arena in a memfd is mapped shared, so after fork parent
 * and child would write one tree.  While fork holds every lock, copy each
 * arena to private memory; the child then moves its copy into a memfd of
 * its own (or keeps it private if it cannot).
 */
static void fork_snapshot(struct vfile *f)
{
	void *p;

	f->fork_copy = NULL;
	if (f->shared || f->arena_fd < 0)
		return;
	p = mmap(NULL, f->arena_bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return;
	memcpy(p, f->arena, f->arena_bytes);
	f->fork_copy = p;
}

static bool write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static void child_own_arena(struct vfile *f)
{
	int fd;
	void *p = MAP_FAILED;

	if (f->shared || f->arena_fd < 0)
		return;
	fd = memfd_create("vrange-local", MFD_CLOEXEC);
	if (fd >= 0 && f->fork_copy && write_all(fd, f->fork_copy, f->arena_bytes))
		p = mmap(f->arena, f->arena_bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED && fd >= 0) {
		close(fd);
		fd = -1;
	}
	if (p == MAP_FAILED && f->fork_copy) {
		/* Keep the copy, privately, where the arena was. */
		p = mremap(f->fork_copy, f->arena_bytes, f->arena_bytes,
			   MREMAP_MAYMOVE | MREMAP_FIXED, f->arena);
		if (p != MAP_FAILED)
			f->fork_copy = NULL;
	}
	if (p == MAP_FAILED) {
		/* No copy at all: a private one now; the parent may be
		 * writing, so keep it only if it checks out. */
		p = mmap(NULL, f->arena_bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED) {
			memcpy(p, f->arena, f->arena_bytes);
			mremap(p, f->arena_bytes, f->arena_bytes,
			       MREMAP_MAYMOVE | MREMAP_FIXED, f->arena);
			if (rt_check(&f->tree) < 0)
				rt_format(&f->tree, f->arena, f->arena_bytes);
		}
	}
	close(f->arena_fd);
	f->arena_fd = fd;
}

static void unlock_all(bool child)
{
	for (struct vfile *f = registry; f; f = f->next) {
		if (!f->shared)
			shared_lock_release(&f->tree_lock);
		/* A shared lock lives in memory the child shares: the parent
		 * lets go of it for both. */
		else if (f->fork_held && !child)
			vfile_unlock(f);
		f->fork_held = false;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_unlock(&registry_lock);
}

/*
 * fork() copies locks as they are: a lock another thread held at that moment
 * would stay held forever in the child.  So fork waits (briefly: holders
 * never block inside) until it can hold the registry and every file lock.
 */
void vfile_fork_prepare(void)
{
	pthread_mutex_lock(&registry_lock);
	for (struct vfile *f = registry; f; f = f->next) {
		pthread_mutex_lock(&f->lock);
		if (!f->shared)
			shared_lock_acquire(&f->tree_lock, LOCAL_LOCK_TIMEOUT_MS);
		else if (f->sh.foreign) /* its arena mapping may move (growth):
					 * not while fork copies the address space */
			f->fork_held = vfile_lock(f) == 0;
		/* A state that could not move: the child shares its slot. */
		if (f->shared && f->sh.pooled)
			f->sh.slot.forked = true;
		fork_snapshot(f);
	}
	publish_fork_prepare();
}

/* The child maps the shared metadata too: name it as a holder, so the
 * state stays reachable after the parent is gone.  Its local arenas and
 * its publication become its own. */
void vfile_fork_child(void)
{
	publish_fork_child();
	/* The inotify instance is the parent's too: reading it here would
	 * steal its news.  Dormant files stay, told apart by birth time. */
	if (watch_ifd >= 0)
		close(watch_ifd);
	watch_ifd = -1;
	for (struct vfile *f = registry; f; f = f->next) {
		child_own_arena(f);
		if (f->fork_copy)
			munmap(f->fork_copy, f->arena_bytes);
		f->fork_copy = NULL;
		f->pub_slot = 0;
		f->wd = -1;
		/* A pool slot is the child's as much as the parent's: the
		 * pool's pages are shared (state_pool.h); no attribute. */
		if (f->shared && !f->dormant) {
			if (!f->sh.pooled)
				vshared_add_self(f->fd, &f->sh, &f->tree);
		} else if (!f->anon) {
			f->inherited = true;
		}
	}
	unlock_all(true);
	for (struct vfile *f = registry; f; f = f->next)
		if (!f->dormant)
			vfile_publish(f);
}

void vfile_fork_done(void)
{
	for (struct vfile *f = registry; f; f = f->next) {
		if (f->fork_copy)
			munmap(f->fork_copy, f->arena_bytes);
		f->fork_copy = NULL;
	}
	publish_fork_parent();
	unlock_all(false);
}
