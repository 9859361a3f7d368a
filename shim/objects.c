/* SPDX-License-Identifier: MIT */
/*
 * objects.c - the shim's bookkeeping: which fds are ashmem fds, the areas
 * behind them, the mappings made through the shim, and the per-file state
 * kept in the backing file's xattr.
 *
 * Look-ups on the pass-through path are two relaxed-cost atomic loads
 * (shim_fd_entry); everything that changes the table, the area list or a
 * reference count takes shim_lock.  An area's meta is changed under its own
 * mutex plus a POSIX record lock on the file, which other processes sharing
 * the file (fork, SCM_RIGHTS, exec) also take: POSIX locks belong to the
 * process, so they exclude even processes that share one open file
 * description, which flock would not.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "file_state.h"
#include "shared_file.h"
#include "shim.h"
#include "vrange.h"

_Atomic(_Atomic(uintptr_t) *) shim_fdtab[SHIM_L1_SIZE];
_Atomic unsigned int shim_nmaps;

static pthread_mutex_t shim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ash_obj *areas;

struct shim_map {
	struct shim_map *next;
	uintptr_t start, end;
	uint64_t off;          /* file offset of start */
	unsigned int mask;     /* prot mask in force when it was mapped */
	bool file;             /* MAP_SHARED of the file (else private zeros) */
	struct ash_obj *o;
};
static struct shim_map *maps;

static uint64_t page_align(uint64_t v)
{
	return (v + shim_page - 1) & ~(uint64_t)(shim_page - 1);
}

/* ---- the fd table (shim_lock held for writes) ---- */

static int tab_set_locked(int fd, uintptr_t v)
{
	unsigned int hi = (unsigned int)fd >> SHIM_L2_BITS;
	_Atomic(uintptr_t) *chunk;

	if (fd < 0 || (unsigned int)fd >= SHIM_MAX_FD)
		return -EMFILE;
	chunk = atomic_load_explicit(&shim_fdtab[hi], memory_order_acquire);
	if (!chunk) {
		if (!v)
			return 0;
		chunk = calloc(1u << SHIM_L2_BITS, sizeof(*chunk));
		if (!chunk)
			return -ENOMEM;
		atomic_store_explicit(&shim_fdtab[hi], chunk, memory_order_release);
	}
	atomic_store_explicit(&chunk[fd & ((1 << SHIM_L2_BITS) - 1)], v,
			      memory_order_release);
	return 0;
}

static struct ash_obj *entry_obj(uintptr_t e)
{
	return (struct ash_obj *)(e & ~SHIM_FD_TAGS);
}

/* ---- areas ---- */

static struct ash_obj *find_locked(dev_t dev, ino_t ino)
{
	for (struct ash_obj *o = areas; o; o = o->next)
		if (o->dev == dev && o->ino == ino)
			return o;
	return NULL;
}

/* Drop a reference; true when it was the last (o is then unlinked). */
static bool unref_locked(struct ash_obj *o)
{
	if (--o->refs > 0)
		return false;
	for (struct ash_obj **pp = &areas; *pp; pp = &(*pp)->next) {
		if (*pp == o) {
			*pp = o->next;
			break;
		}
	}
	return true;
}

/*
 * This process lets go of the file's volatile state.  For a library file
 * the state is every holder's and stays with the file (vrange_fd_forget
 * leaves it be); only a file with process-local state loses its ranges,
 * and nobody else could have used those.
 */
static void layer_release(struct ash_obj *o)
{
	/* State left behind would outlive the area: a failure gets one
	 * more try (-ENOENT: there was none). */
	int r = vrange_fd_forget(o->pfd);

	if (r < 0 && r != -ENOENT)
		vrange_fd_forget(o->pfd);
}

/*
 * The state of an area only this process holds, mapped for the first
 * time: in the library's pool, on pfd (the area closes it only after it
 * dropped the state and the file layer's), unless the library knows the
 * file already or the area is too big for a pool slot.
 */
static int private_state(struct ash_obj *o, const struct stat *st, struct vfile **f)
{
	uint64_t size = page_align(o->mapped_size);
	int r;

	*f = vfile_find(st->st_dev, st->st_ino, o->pfd);
	if (*f)
		return 0;
	/* Its state went dormant after it was shared: that state, revived. */
	if (vfile_dormant_known(st->st_dev, st->st_ino))
		return vfile_get(o->pfd, st, f);
	r = vfile_new_region(o->pfd, st, size, f);
	if (r == 0)
		(*f)->fd_kept = true;
	else if (r == -E2BIG && (r = vshared_format(o->pfd, size)) == 0)
		r = vfile_get(o->pfd, st, f);
	return r;
}

/*
 * A mapped area's volatile state lives as long as any fd holds the area,
 * as with the driver.  So this process, while it holds the area, holds a
 * reference to the library's state of the file: a purge here sees the
 * pages other processes unpinned, and the shared state keeps this process
 * as a holder until the area's last fd and mapping here are gone - never
 * only until the next ioctl's own reference is dropped.
 */
static void hold_state(struct ash_obj *o)
{
	struct vfile *f = NULL;
	struct stat st;
	bool have;

	bool fresh;

	pthread_mutex_lock(&o->lock);
	have = o->vf != NULL;
	fresh = o->fresh_private;
	o->fresh_private = false;
	pthread_mutex_unlock(&o->lock);
	if (have || o->pfd < 0)
		return;
	vr_init();
	/* pfd must still be the area's file (a raw close could free it).  A
	 * fresh private area's state starts in the pool, on pfd (which the
	 * area keeps until after it drops the state); if the library knows
	 * the file already, that state is the one. */
	if (shim_real.fstat(o->pfd, &st) < 0 || st.st_dev != o->dev ||
	    st.st_ino != o->ino ||
	    (fresh ? private_state(o, &st, &f) : vfile_get(o->pfd, &st, &f)) < 0) {
		shim_debug("cannot hold the state of ashmem area %lu",
			   (unsigned long)o->ino);
		return;
	}
	pthread_mutex_lock(&o->lock);
	if (!o->vf) {
		o->vf = f;
		f = NULL;
	}
	pthread_mutex_unlock(&o->lock);
	vfile_put(f);
}

static void obj_release(struct ash_obj *o)
{
	/* pfd stays marked ours until it is closed: the library looks at it. */
	if (o->layer && o->pfd >= 0)
		layer_release(o);
	if (o->pfd >= 0) {
		pthread_mutex_lock(&shim_lock);
		if (shim_fd_entry(o->pfd) == ((uintptr_t)o | SHIM_FD_PRIVATE))
			tab_set_locked(o->pfd, 0);
		pthread_mutex_unlock(&shim_lock);
		/* A purge may still punch through pfd: then the state keeps
		 * it and closes it last. */
		(void)vfile_put_lender(o->vf, o->pfd, shim_real.close);
	} else {
		vfile_put(o->vf);
	}
	pthread_mutex_destroy(&o->lock);
	free(o);
}

void ash_put(struct ash_obj *o)
{
	bool last;

	if (!o)
		return;
	pthread_mutex_lock(&shim_lock);
	last = unref_locked(o);
	pthread_mutex_unlock(&shim_lock);
	if (last)
		obj_release(o);
}

/* A descriptor of the file with its own open file description. */
static int reopen_private(int fd)
{
	char path[40];
	int nfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	nfd = shim_real.open(path, O_RDWR | O_CLOEXEC);
	if (nfd < 0)
		nfd = shim_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
	return nfd < 0 ? -errno : nfd;
}

static struct ash_obj *obj_new(int pfd, const struct stat *st, bool xattr)
{
	struct ash_obj *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->pfd = pfd;
	o->dev = st->st_dev;
	o->ino = st->st_ino;
	o->xattr = xattr;
	o->escaped = true; /* ash_create says otherwise for its own */
	pthread_mutex_init(&o->lock, NULL);
	return o;
}

/*
 * Register fd (and o's private fd when o is new) for o, or take o's
 * existing twin for the same file.  Returns the area with one reference
 * for fd and one for the caller, or NULL (then pfd is closed).
 */
static struct ash_obj *install(int fd, struct ash_obj *fresh)
{
	struct ash_obj *o, *dead = NULL;
	bool drop_fresh = false;

	pthread_mutex_lock(&shim_lock);
	o = find_locked(fresh->dev, fresh->ino);
	if (o) {
		drop_fresh = true;
	} else if (tab_set_locked(fresh->pfd, (uintptr_t)fresh | SHIM_FD_PRIVATE) == 0) {
		o = fresh;
		o->next = areas;
		areas = o;
	} else {
		drop_fresh = true;
	}
	if (o) {
		uintptr_t old = shim_fd_entry(fd);

		if (old && !(old & SHIM_FD_TAGS)) {
			/* Another thread installed fd first. */
			struct ash_obj *prev = entry_obj(old);

			if (prev == o) {
				o->refs++;
				goto out;
			}
			tab_set_locked(fd, 0);
			if (unref_locked(prev))
				dead = prev;
		}
		if (tab_set_locked(fd, (uintptr_t)o) == 0) {
			o->refs += 2;
		} else {
			if (o == fresh) {
				/* Nobody else saw it: undo. */
				o->refs = 1;
				unref_locked(o);
				drop_fresh = true;
			}
			o = NULL;
		}
	}
out:
	pthread_mutex_unlock(&shim_lock);
	if (drop_fresh) {
		/* Its twin o (if any) owns the file's library state. */
		fresh->layer = false;
		obj_release(fresh);
	}
	if (dead)
		obj_release(dead);
	return o;
}

/* Set while the constructor looks at the fds inherited over exec. */
static bool scanning;

/*
 * An fd the table does not know: ours if its file carries our xattr and
 * this process has no area for that file yet.  A second, unknown fd of a
 * file we already know is not taken: the shim's copy of libvrange opens
 * such fds itself (its own descriptor, the holders of shared state) and
 * they must stay plain files.  After exec nothing of the library is open
 * yet, so there every inherited fd of the file is the application's.
 */
static struct ash_obj *adopt(int fd)
{
	struct ash_meta m;
	struct stat st;
	struct ash_obj *o;
	int pfd;

	if (shim_real.fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 0)
		return NULL;
	if (fgetxattr(fd, ASH_XATTR, &m, sizeof(m)) != (ssize_t)sizeof(m) ||
	    m.magic != ASH_MAGIC)
		return NULL;
	pthread_mutex_lock(&shim_lock);
	o = find_locked(st.st_dev, st.st_ino);
	if (o && scanning && shim_fd_entry(fd) == 0 &&
	    tab_set_locked(fd, (uintptr_t)o) == 0) {
		o->refs += 2;
		pthread_mutex_unlock(&shim_lock);
		return o;
	}
	pthread_mutex_unlock(&shim_lock);
	if (o)
		return ash_from_fd(fd, false);
	pfd = reopen_private(fd);
	if (pfd < 0)
		return NULL;
	o = obj_new(pfd, &st, true);
	if (!o) {
		shim_real.close(pfd);
		return NULL;
	}
	/* It may already hold state: a file mapped elsewhere has layer state. */
	o->layer = (m.flags & ASH_MAPPED) != 0;
	shim_debug("adopted ashmem fd %d (inode %lu)", fd, (unsigned long)st.st_ino);
	o = install(fd, o);
	if (o && (m.flags & ASH_MAPPED))
		hold_state(o);
	return o;
}

struct ash_obj *ash_from_fd(int fd, bool do_adopt)
{
	struct ash_obj *o = NULL;
	struct stat st;
	uintptr_t e = shim_fd_entry(fd);
	bool last = false;

	if (e & SHIM_FD_TAGS)
		return NULL;
	if (!e)
		return do_adopt ? adopt(fd) : NULL;
	pthread_mutex_lock(&shim_lock);
	e = shim_fd_entry(fd);
	if (e && !(e & SHIM_FD_TAGS)) {
		o = entry_obj(e);
		o->refs++;
	}
	pthread_mutex_unlock(&shim_lock);
	if (!o)
		return NULL;
	if (shim_real.fstat(fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino)
		return o;
	/* Closed behind our back (fclose, a raw syscall) and the number reused. */
	pthread_mutex_lock(&shim_lock);
	if (shim_fd_entry(fd) == (uintptr_t)o) {
		tab_set_locked(fd, 0);
		last = unref_locked(o);
	}
	pthread_mutex_unlock(&shim_lock);
	if (last)
		obj_release(o);
	ash_put(o);
	return do_adopt ? adopt(fd) : NULL;
}

static int backing_create(int cloexec)
{
	const char *dirs[4];
	const char *env = secure_getenv("VRANGE_ASHMEM_DIR");
	unsigned int n = 0;
	int fd;

	if (env && *env)
		dirs[n++] = env;
	dirs[n++] = "/dev/shm";
	dirs[n++] = "/run/shm";
	dirs[n++] = "/tmp";
	for (unsigned int i = 0; i < n; i++) {
		struct statfs sfs;

		fd = shim_real.open(dirs[i], O_TMPFILE | O_RDWR | O_EXCL | cloexec, 0600);
		if (fd < 0)
			continue;
		/* Only shared memory can be punched under every mapping. */
		if (fstatfs(fd, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC)
			return fd;
		shim_real.close(fd);
	}
	/* Last resort: works, but libcutils will take it for a memfd. */
	fd = memfd_create("dev/ashmem", cloexec ? MFD_CLOEXEC : 0);
	if (fd < 0)
		return -errno;
	shim_debug("no tmpfs directory takes O_TMPFILE; ashmem fd %d is a memfd", fd);
	return fd;
}

int ash_create(int oflags)
{
	struct ash_meta m;
	struct ash_obj *o;
	struct stat st;
	int fd, pfd, r;

	fd = backing_create(oflags & O_CLOEXEC);
	if (fd < 0)
		return fd;
	memset(&m, 0, sizeof(m));
	m.magic = ASH_MAGIC;
	m.prot_mask = ASH_PROT_ALL;
	if (shim_real.fstat(fd, &st) < 0) {
		r = -errno;
		goto fail;
	}
	pfd = reopen_private(fd);
	if (pfd < 0) {
		r = pfd;
		goto fail;
	}
	/* Only a file that takes no xattr at all keeps the area's state in
	 * this process alone.  Any other failure (ENOSPC, ENOMEM, EIO) would
	 * make an area no other process can take for one (ENOTTY through a
	 * descriptor sent to it): the creation fails instead. */
	r = fsetxattr(fd, ASH_XATTR, &m, sizeof(m), XATTR_CREATE) == 0 ? 0 : -errno;
	if (r < 0 && r != -EOPNOTSUPP) {
		shim_real.close(pfd);
		goto fail;
	}
	o = obj_new(pfd, &st, r == 0);
	if (!o) {
		shim_real.close(pfd);
		r = -ENOMEM;
		goto fail;
	}
	if (!o->xattr) {
		o->local = m;
		shim_debug("backing file takes no xattr: area state stays in this process");
	}
	/* Nobody else holds this file yet (install() sees it is new). */
	o->escaped = false;
	o = install(fd, o);
	if (!o) {
		r = -EMFILE;
		goto fail;
	}
	ash_put(o); /* the caller's reference; the fd keeps its own */
	return fd;
fail:
	shim_real.close(fd);
	return r;
}

/* ---- fd life cycle ---- */

/* Move our private fd out of the application's way (it is closing it). */
static void relocate_locked(struct ash_obj *o, int fd, int min)
{
	int nfd = shim_real.fcntl(fd, F_DUPFD_CLOEXEC, min);

	tab_set_locked(fd, 0);
	if (nfd >= 0 && tab_set_locked(nfd, (uintptr_t)o | SHIM_FD_PRIVATE) == 0) {
		o->pfd = nfd;
		return;
	}
	if (nfd >= 0)
		shim_real.close(nfd);
	o->pfd = -1;
	shim_debug("lost the private descriptor of an ashmem area");
}

void shim_fd_closing(int fd)
{
	struct ash_obj *o = NULL;
	uintptr_t e;
	bool last = false;

	if (!shim_fd_entry(fd))
		return;
	pthread_mutex_lock(&shim_lock);
	e = shim_fd_entry(fd);
	if (e == SHIM_FD_LIBRARY) {
		tab_set_locked(fd, 0);
	} else if (e & SHIM_FD_PRIVATE) {
		relocate_locked(entry_obj(e), fd, 0);
	} else if (e) {
		o = entry_obj(e);
		tab_set_locked(fd, 0);
		last = unref_locked(o);
	}
	pthread_mutex_unlock(&shim_lock);
	if (last)
		obj_release(o);
}

void shim_fd_dup(int oldfd, int newfd)
{
	uintptr_t e;

	pthread_mutex_lock(&shim_lock);
	e = shim_fd_entry(oldfd);
	if (e && shim_fd_entry(newfd) == 0) {
		if (e & SHIM_FD_TAGS)
			/* A copy of one of our own descriptors stays ours. */
			tab_set_locked(newfd, SHIM_FD_LIBRARY);
		else if (tab_set_locked(newfd, e) == 0)
			entry_obj(e)->refs++;
	}
	pthread_mutex_unlock(&shim_lock);
}

void shim_fd_opened(const char *path, int fd)
{
	static const char pfx[] = "/proc/self/fd/";
	char *end;
	long n;

	if (fd < 0 || strncmp(path, pfx, sizeof(pfx) - 1) != 0)
		return;
	n = strtol(path + sizeof(pfx) - 1, &end, 10);
	if (*end || n < 0 || n > INT32_MAX || !(shim_fd_entry((int)n) & SHIM_FD_TAGS))
		return;
	pthread_mutex_lock(&shim_lock);
	if (shim_fd_entry((int)n) & SHIM_FD_TAGS)
		tab_set_locked(fd, SHIM_FD_LIBRARY);
	pthread_mutex_unlock(&shim_lock);
}

void shim_fd_range_closing(unsigned int first, unsigned int last)
{
	struct ash_obj *dead = NULL;

	if (first >= SHIM_MAX_FD)
		return;
	if (last >= SHIM_MAX_FD)
		last = SHIM_MAX_FD - 1;
	pthread_mutex_lock(&shim_lock);
	for (unsigned int fd = first; fd <= last; fd++) {
		uintptr_t e;

		if ((fd & ((1u << SHIM_L2_BITS) - 1)) == 0 &&
		    !atomic_load(&shim_fdtab[fd >> SHIM_L2_BITS])) {
			fd += (1u << SHIM_L2_BITS) - 1;
			continue;
		}
		e = shim_fd_entry((int)fd);
		if (!e)
			continue;
		if (e == SHIM_FD_LIBRARY) {
			tab_set_locked((int)fd, 0);
		} else if (e & SHIM_FD_PRIVATE) {
			relocate_locked(entry_obj(e), (int)fd,
					last + 1 < SHIM_MAX_FD ? (int)last + 1 : INT32_MAX);
		} else {
			struct ash_obj *o = entry_obj(e);

			tab_set_locked((int)fd, 0);
			if (unref_locked(o)) {
				o->next = dead;
				dead = o;
			}
		}
	}
	pthread_mutex_unlock(&shim_lock);
	while (dead) {
		struct ash_obj *n = dead->next;

		obj_release(dead);
		dead = n;
	}
}

/* After exec the fds survive but the table does not: find ours again. */
void shim_scan_inherited(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return;
	scanning = true;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || end == de->d_name || fd == dirfd(d) || fd < 0 || fd > INT32_MAX)
			continue;
		ash_put(ash_from_fd((int)fd, true));
	}
	scanning = false;
	closedir(d);
}

void shim_adopt_unknown(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || end == de->d_name || fd == dirfd(d) || fd < 0 ||
		    fd > INT32_MAX || shim_fd_entry((int)fd))
			continue;
		ash_put(ash_from_fd((int)fd, true));
	}
	closedir(d);
}

/* ---- the area's state ---- */

static int meta_get(struct ash_obj *o, struct ash_meta *m)
{
	ssize_t n;

	if (!o->xattr) {
		*m = o->local;
		return 0;
	}
	if (o->pfd < 0)
		return -EBADF;
	n = fgetxattr(o->pfd, ASH_XATTR, m, sizeof(*m));
	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(*m) || m->magic != ASH_MAGIC)
		return -EIO;
	m->name[ASH_NAME_LEN - 1] = '\0';
	return 0;
}

static int file_lock(struct ash_obj *o, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	int r;

	if (!o->xattr)
		return 0;
	if (o->pfd < 0)
		return -EBADF;
	do
		r = shim_real.fcntl(o->pfd, F_SETLKW, &fl);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

int ash_meta_read(struct ash_obj *o, struct ash_meta *m)
{
	int r;

	pthread_mutex_lock(&o->lock);
	r = meta_get(o, m);
	pthread_mutex_unlock(&o->lock);
	return r;
}

int ash_meta_lock(struct ash_obj *o, struct ash_meta *m)
{
	int r;

	pthread_mutex_lock(&o->lock);
	r = file_lock(o, F_WRLCK);
	if (r == 0) {
		r = meta_get(o, m);
		if (r < 0)
			file_lock(o, F_UNLCK);
	}
	if (r < 0)
		pthread_mutex_unlock(&o->lock);
	return r;
}

int ash_meta_unlock(struct ash_obj *o, struct ash_meta *m, bool write)
{
	int r = 0;

	if (write) {
		if (!o->xattr)
			o->local = *m;
		else if (fsetxattr(o->pfd, ASH_XATTR, m, sizeof(*m), XATTR_REPLACE) < 0)
			r = -errno;
	}
	file_lock(o, F_UNLCK);
	pthread_mutex_unlock(&o->lock);
	return r;
}

uint64_t ash_mapped_size(struct ash_obj *o)
{
	struct ash_meta m;

	if (atomic_load_explicit(&o->mapped, memory_order_acquire))
		return o->mapped_size;
	if (ash_meta_read(o, &m) < 0 || !(m.flags & ASH_MAPPED))
		return 0;
	pthread_mutex_lock(&o->lock);
	o->mapped_size = m.size;
	atomic_store_explicit(&o->mapped, true, memory_order_release);
	pthread_mutex_unlock(&o->lock);
	/* Mapped by another process since this one took the area on. */
	hold_state(o);
	return m.size;
}

int ash_fix_size(struct ash_obj *o, uint64_t *size)
{
	struct ash_meta m;
	int r = ash_meta_lock(o, &m);
	bool write = false;

	if (r < 0)
		return r;
	if (m.size == 0) {
		r = -EINVAL;
	} else if (!(m.flags & ASH_MAPPED)) {
		bool priv;

		pthread_mutex_lock(&shim_lock);
		priv = !o->escaped;
		pthread_mutex_unlock(&shim_lock);
		/* Page-rounded: pin ranges reach the page-aligned size.  An
		 * area only this process holds keeps its state private until
		 * it is sent or a fork comes (no metadata file, no attribute,
		 * no descriptor more). */
		if (priv && ftruncate(o->pfd, (off_t)page_align(m.size)) == 0) {
			o->fresh_private = !o->vf; /* o->lock is held */
		} else {
			r = vshared_format(o->pfd, page_align(m.size));
		}
		if (r == 0) {
			m.flags |= ASH_MAPPED;
			write = true;
		}
	}
	if (r == 0) {
		o->mapped_size = m.size;
		atomic_store_explicit(&o->mapped, true, memory_order_release);
		*size = m.size;
	}
	if (ash_meta_unlock(o, &m, write) < 0 && r == 0) {
		r = -EIO;
		/* Not recorded as mapped: the next mmap formats afresh. */
		if (write)
			vshared_unformat(o->pfd);
	}
	if (r == 0)
		hold_state(o);
	return r;
}

void ash_note_layer(struct ash_obj *o)
{
	pthread_mutex_lock(&o->lock);
	o->layer = true;
	pthread_mutex_unlock(&o->lock);
}

/* ---- mappings ---- */

int shim_map_add(struct ash_obj *o, void *addr, size_t len, uint64_t off,
		 unsigned int prot_mask, bool file)
{
	struct shim_map *m = malloc(sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->start = (uintptr_t)addr;
	m->end = m->start + len;
	m->off = off;
	m->mask = prot_mask & ASH_PROT_ALL;
	m->file = file;
	m->o = o;
	pthread_mutex_lock(&shim_lock);
	o->refs++;
	m->next = maps;
	maps = m;
	atomic_fetch_add(&shim_nmaps, 1);
	pthread_mutex_unlock(&shim_lock);
	return 0;
}

void shim_map_forget(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, b = a + page_align(len);
	struct ash_obj *dead = NULL;
	struct shim_map **pp, *m;

	pthread_mutex_lock(&shim_lock);
	for (pp = &maps; (m = *pp);) {
		if (m->end <= a || m->start >= b) {
			pp = &m->next;
			continue;
		}
		if (m->start >= a && m->end <= b) {
			*pp = m->next;
			atomic_fetch_sub(&shim_nmaps, 1);
			if (unref_locked(m->o)) {
				m->o->next = dead;
				dead = m->o;
			}
			free(m);
			continue;
		}
		if (m->start < a && m->end > b) {
			struct shim_map *tail = malloc(sizeof(*tail));

			if (tail) {
				*tail = *m;
				tail->off += b - m->start;
				tail->start = b;
				tail->next = m->next;
				m->next = tail;
				m->o->refs++;
				atomic_fetch_add(&shim_nmaps, 1);
			}
			m->end = a;
		} else if (m->start < a) {
			m->end = a;
		} else {
			m->off += b - m->start;
			m->start = b;
		}
		pp = &m->next;
	}
	pthread_mutex_unlock(&shim_lock);
	while (dead) {
		struct ash_obj *n = dead->next;

		obj_release(dead);
		dead = n;
	}
}

int shim_map_check_prot(void *addr, size_t len, int prot)
{
	uintptr_t a = (uintptr_t)addr, b = a + len;
	int r = 0;

	pthread_mutex_lock(&shim_lock);
	for (struct shim_map *m = maps; m; m = m->next)
		if (m->start < b && m->end > a && ((unsigned int)prot & ~m->mask & ASH_PROT_ALL))
			r = -EACCES;
	pthread_mutex_unlock(&shim_lock);
	return r;
}

int shim_map_lookup(void *addr, size_t old, size_t new_len, struct ash_obj **out,
		    struct shim_map_info *info)
{
	uintptr_t a = (uintptr_t)addr;
	int r = 0;

	*out = NULL;
	pthread_mutex_lock(&shim_lock);
	for (struct shim_map *m = maps; m; m = m->next) {
		if (a < m->start || a >= m->end)
			continue;
		info->off = m->off + (a - m->start);
		info->mask = m->mask;
		info->file = m->file;
		/* A shared mapping must not grow over what follows the area. */
		if (m->file && new_len > old &&
		    info->off + page_align(new_len) > page_align(m->o->mapped_size)) {
			r = -EINVAL;
			break;
		}
		m->o->refs++;
		*out = m->o;
		break;
	}
	pthread_mutex_unlock(&shim_lock);
	return r;
}

void ash_escape_fd(int fd)
{
	struct ash_obj *o = ash_from_fd(fd, false);
	struct vfile *f = NULL;

	if (!o)
		return;
	pthread_mutex_lock(&shim_lock);
	o->escaped = true;
	pthread_mutex_unlock(&shim_lock);
	pthread_mutex_lock(&o->lock);
	f = o->vf;
	pthread_mutex_unlock(&o->lock);
	if (f && vfile_share(f) < 0)
		shim_debug("ashmem area %lu sent before its state could be shared",
			   (unsigned long)o->ino);
	ash_put(o);
}

/* fork with another thread inside the shim must not leave locks held.
 * The child holds every area too: none is private any more (their
 * states moved in the library's own prepare handler). */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&shim_lock);
	for (struct ash_obj *o = areas; o; o = o->next)
		o->escaped = true;
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&shim_lock);
}

__attribute__((constructor)) static void objects_init(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_parent);
}
