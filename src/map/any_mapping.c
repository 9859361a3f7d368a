/* SPDX-License-Identifier: MIT */
/*
 * any_mapping.c - vrange() on memory the library did not create.
 *
 * Private anonymous memory has one state for the whole address space: a
 * vfile whose "pages" are virtual page numbers, purged with MADV_DONTNEED.
 * MAP_SHARED mappings of shared-memory files map to that file's own state
 * (contract section 1), so a purge punches the file.
 *
 * The first vrange() on a mapping asks the kernel what it is (vma_query) and
 * remembers the answer in a table of known mappings; later calls on known
 * anonymous memory make no system call, later calls on a known file mapping
 * check (one PROCMAP_QUERY) that the address still maps that file.  The
 * kernel tells of every munmap of anonymous memory we registered
 * (unmap_events.h); until such an event is applied, calls take the slow
 * path, which applies it.  Before a purge discards anonymous memory it
 * checks that the address still holds the mapping that was marked: the
 * mapping is registered (write-protect mode, which traps nothing) with a
 * userfaultfd of ours when it is first seen, and that registration vanishes
 * with munmap, so a later mapping at the same address fails the check and
 * is never touched.  Where userfaultfd is unusable the check falls back to
 * "still private anonymous memory", which the design notes call out.
 *
 * The same userfaultfd gives SIGBUS mode: a resident page is discarded under
 * a MISSING registration with UFFD_FEATURE_SIGBUS (a touch meanwhile raises
 * SIGBUS), then poisoned (UFFDIO_POISON: SIGBUS on touch); the MISSING
 * registration stays until the page is taken back (anymap_unpoison).
 *
 * A purge runs on a thread that never named the memory it purges, so it
 * registers by address only with the munmap reader held (unmap_events.h,
 * the gate) and only memory it found registered with us under the gate:
 * whatever it checked cannot be unmapped and replaced by the thread that
 * owns it until the purge is done (see discard_resident).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "any_mapping.h"
#include "disk_file.h"
#include "disk_reserve.h"
#include "file_state.h"
#include "seqlock.h"
#include "shmem.h"
#include "sigbus_fixup.h"
#include "uffd_purge.h"
#include "unmap_events.h"
#include "vma_query.h"
#include "vrange.h"

/* Linux 6.6 uapi; our headers are 6.1. */
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#endif
#ifndef UFFDIO_POISON
struct uffdio_poison {
	struct uffdio_range range;
	__u64 mode;
	__s64 updated;
};
#define UFFDIO_POISON _IOWR(UFFDIO, 0x08, struct uffdio_poison)
#endif

/* A mapping classified once; entries never overlap, sorted by start. */
struct known {
	uintptr_t start, end;
	struct vfile *file;   /* shared file mapping: the file; NULL for anon */
	uint64_t dev, ino;    /* the file's, for checks on a copy: a copy holds
			       * no reference, and the entry it was taken from
			       * may be gone and its file freed meanwhile */
	uint64_t pgoff;       /* file page of start */
	bool wp;              /* anon: identity registration in place */
	uint64_t seen;        /* mark clock when it was learnt */
	struct vmap *map;     /* file: armed for SIGBUS by purges (in the
			       * file's mapping list); NULL if not */
};

/* The table is read without a lock on every vrange() call (seqlock.h);
 * writers hold known_write. */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic bool anon_ready; /* init_once has run */
static pthread_mutex_t known_write = PTHREAD_MUTEX_INITIALIZER;
static struct seqlock known_seq;
static struct seq_array *_Atomic ktab;
static struct vfile *anon_file;
static int anon_uffd = -1;
static bool events_on; /* munmap of registered memory is reported */
static bool strict_sweep; /* events were lost: trust registrations only */
static _Atomic uint32_t released_gen; /* registrations given back so far */
static _Atomic uint32_t marks_running; /* anymap_vrange() calls under way */

/* ---- the userfaultfd that gives identity and SIGBUS mode ---------------- */

static int uffd_open_with(__u64 features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };
	int fd;

	fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) /* unprivileged: only user-mode faults may be handled */
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* UFFD_USER_MODE_ONLY */);
	if (fd < 0)
		return -1;
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * With munmap events where a reader thread can be had (unmap_events.h),
 * else without: a registration whose munmap event nobody reads would block
 * that munmap for good.
 */
static int uffd_open(void)
{
	const __u64 base = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_POISON;
	int fd;

	if (!uffd_available())
		return -1;
	fd = uffd_open_with(base | UFFD_FEATURE_EVENT_UNMAP);
	if (fd >= 0 && unmap_events_start(fd) == 0) {
		events_on = true;
		return fd;
	}
	if (fd >= 0)
		close(fd);
	return uffd_open_with(base);
}

static int uffd_register(uintptr_t a, uintptr_t b, __u64 mode)
{
	struct uffdio_register reg = { .range = { a, b - a }, .mode = mode };

	return ioctl(anon_uffd, UFFDIO_REGISTER, &reg) < 0 ? -errno : 0;
}

/* Is [a, b) still registered with us, i.e. the mapping that was marked?
 * 1 yes, 0 no (-ENOENT: nothing of ours there), or -errno: cannot tell. */
static int identity_check(uintptr_t a, uintptr_t b)
{
	struct uffdio_writeprotect wp = { .range = { a, b - a }, .mode = 0 };

	if (ioctl(anon_uffd, UFFDIO_WRITEPROTECT, &wp) == 0)
		return 1;
	return errno == ENOENT || errno == EINVAL ? 0 : -errno;
}

static bool identity_holds(uintptr_t a, uintptr_t b)
{
	return identity_check(a, b) == 1;
}

/*
 * Set once a purge registered anonymous memory MISSING (discard_resident):
 * purged ranges keep that registration (touches raise SIGBUS through it
 * where no marker is): unpoisoning drops it.
 */
static _Atomic bool anon_armed;

static void anon_before_fork(void);
static void anon_child_after_fork(void);
static void drain_events(void);

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

static void init_once(void)
{
	anon_file = vfile_new_anon();
	anon_uffd = uffd_open();
	pthread_atfork(anon_before_fork, NULL, anon_child_after_fork);
}

/* A failed allocation at the first call must not fail every later one. */
static struct vfile *anon_file_retry(void)
{
	pthread_mutex_lock(&init_lock);
	if (!anon_file)
		anon_file = vfile_new_anon();
	pthread_mutex_unlock(&init_lock);
	return anon_file;
}

/* ---- the table of known mappings --------------------------------------- */

/* Index of the entry of e[0, n) containing addr, or of the first above it. */
static size_t known_search(const struct known *e, size_t n, uintptr_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (e[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Copy of the entry containing addr; false if none.  Takes no lock:
 * signal-safe. */
static bool known_get(uintptr_t addr, struct known *out)
{
	const struct known *e;
	struct seq_array *t;
	bool found;
	uint32_t v;
	size_t i, n;

	do {
		v = seq_read_begin(&known_seq);
		found = false;
		t = atomic_load_explicit(&ktab, memory_order_acquire);
		if (!t)
			break;
		e = SEQ_ARRAY_AT(t, struct known);
		n = t->n < t->cap ? t->n : t->cap; /* torn: the retry catches it */
		i = known_search(e, n, addr);
		if (i < n && e[i].start <= addr) {
			*out = e[i];
			found = true;
		}
	} while (seq_read_retry(&known_seq, v));
	return found;
}

struct vfile *anymap_file_at(const void *addr, uint64_t *page)
{
	struct known k;
	uintptr_t a = (uintptr_t)addr;

	if (!known_get(a, &k) || !k.file || a >= k.end)
		return NULL;
	*page = k.pgoff + ((a - k.start) >> vr_page_shift);
	return k.file;
}

/* Copy of the first entry of the kind (files or anonymous) that ends
 * above addr; false if none.  Takes no lock. */
static bool known_next(uintptr_t addr, bool files, struct known *out)
{
	const struct known *e;
	struct seq_array *t;
	bool found;
	uint32_t v;
	size_t i, n;

	do {
		v = seq_read_begin(&known_seq);
		found = false;
		t = atomic_load_explicit(&ktab, memory_order_acquire);
		if (!t)
			break;
		e = SEQ_ARRAY_AT(t, struct known);
		n = t->n < t->cap ? t->n : t->cap;
		for (i = known_search(e, n, addr); i < n && !found; i++) {
			if (!e[i].file == !files) {
				*out = e[i];
				found = true;
			}
		}
	} while (seq_read_retry(&known_seq, v));
	return found;
}

/* Take an entry's mapping out of its file's list. */
static void drop_map(struct vfile *f, struct vmap *m)
{
	if (!m)
		return;
	/* Out of the list before it is disarmed, as a region's (destroy). */
	vfile_del_map(f, m);
	uffd_forget_map(f, m);
	free(m);
}

/*
 * Clip [*a, *b), which contains addr, to the gap between the known entries
 * around addr; false if an entry contains addr.  known_write held.
 */
static bool gap_around(uintptr_t addr, uintptr_t *a, uintptr_t *b)
{
	struct seq_array *t = atomic_load(&ktab);
	const struct known *e = t ? SEQ_ARRAY_AT(t, struct known) : NULL;
	size_t n = t ? t->n : 0, i = t ? known_search(e, n, addr) : 0;

	if (i < n && e[i].start <= addr)
		return false;
	if (i < n && e[i].start < *b)
		*b = e[i].start;
	if (i > 0 && e[i - 1].end > *a)
		*a = e[i - 1].end;
	return true;
}

/* The gap around addr inside the mapping [*a, *b); false if known. */
static bool known_gap(uintptr_t addr, uintptr_t *a, uintptr_t *b)
{
	bool r;

	pthread_mutex_lock(&known_write);
	r = gap_around(addr, a, b);
	pthread_mutex_unlock(&known_write);
	return r;
}

/*
 * Add k, clipped to the gap around addr (an older entry may lie inside the
 * same mapping on either side: a mapping that grew over the address of a
 * smaller one); takes over k->file and k->map.
 */
static int known_add(struct known *k, uintptr_t addr)
{
	uintptr_t start = k->start;
	struct seq_array *t;
	size_t i = 0;
	int r = 0;

	pthread_mutex_lock(&known_write);
	k->seen = vr_next_seq();
	if (!gap_around(addr, &k->start, &k->end))
		goto drop; /* raced with another thread: it is known now */
	k->pgoff += (k->start - start) >> vr_page_shift;
	if (k->map) {
		k->map->first += k->start - start;
		k->map->size = k->map->first + (k->end - k->start);
	}
	t = atomic_load(&ktab);
	if (t)
		i = known_search(SEQ_ARRAY_AT(t, struct known), t->n, k->start);
	r = seq_array_insert(&ktab, &known_seq, i, k, sizeof(*k));
	if (r < 0)
		goto drop;
	pthread_mutex_unlock(&known_write);
	return 0;
drop:
	pthread_mutex_unlock(&known_write);
	drop_map(k->file, k->map);
	vfile_put(k->file);
	return r;
}

/*
 * Cut [a, b) out of the known entries of one kind (file mappings when
 * files, else anonymous ones), splitting an anonymous entry that runs past
 * either end.  A file entry that overlaps goes whole, giving back its
 * reference to the file and its armed mapping (after the table's mutex is
 * let go: those take the registry and file locks); the mapping is learnt
 * again when vrange() meets it.  Entries learnt at or after older_than
 * (mark clock) are left alone.
 */
static void known_trim(uintptr_t a, uintptr_t b, bool files, uint64_t older_than)
{
	bool again = true;

	while (again) {
		struct vfile *put = NULL;
		struct vmap *put_map = NULL;
		struct seq_array *t;
		struct known *e, tail;
		size_t i;

		again = false;
		pthread_mutex_lock(&known_write);
		t = atomic_load(&ktab);
		e = t ? SEQ_ARRAY_AT(t, struct known) : NULL;
		for (i = t ? known_search(e, t->n, a) : 0; t && i < t->n && e[i].start < b; i++) {
			if (!e[i].file != !files || e[i].seen >= older_than)
				continue;
			again = true; /* the array changes: look again from a */
			/* A file entry goes whole: it is learnt again if need be. */
			if (e[i].file || (a <= e[i].start && e[i].end <= b)) {
				put = e[i].file;
				put_map = e[i].map;
				seq_array_remove(t, &known_seq, i, sizeof(*e));
				break;
			}
			tail = e[i];
			seq_write_begin(&known_seq);
			if (e[i].start < a) {
				e[i].end = a;
			} else {
				e[i].pgoff += (b - e[i].start) >> vr_page_shift;
				e[i].start = b;
			}
			seq_write_end(&known_seq);
			if (tail.start < a && b < tail.end) { /* a hole in the middle */
				tail.pgoff += (b - tail.start) >> vr_page_shift;
				tail.start = b;
				/* (anonymous only: no file, no map) */
				seq_array_insert(&ktab, &known_seq, i + 1, &tail, sizeof(tail));
			}
			break;
		}
		pthread_mutex_unlock(&known_write);
		drop_map(put, put_map);
		vfile_put(put);
	}
}

/*
 * Forget the file entry k - a copy taken before its mapping was checked -
 * if that very entry is still in the table.  A cut by address would not
 * do: between the check and the cut another thread may have cut the
 * stale entry itself and learnt the mapping there now (vrange() on it),
 * which is armed for SIGBUS and maybe poisoned by a purge; cut with it,
 * its mapping leaves the file's list, and an unmark no longer clears its
 * markers (the model soak: "raises SIGBUS though just made non-volatile",
 * the monitor's sweep preempted in that window).
 */
static void known_forget(const struct known *k)
{
	struct vfile *put = NULL;
	struct vmap *put_map = NULL;
	struct seq_array *t;
	struct known *e;
	size_t i;

	pthread_mutex_lock(&known_write);
	t = atomic_load(&ktab);
	e = t ? SEQ_ARRAY_AT(t, struct known) : NULL;
	for (i = t ? known_search(e, t->n, k->start) : 0;
	     t && i < t->n && e[i].start < k->end; i++) {
		if (e[i].start == k->start && e[i].end == k->end &&
		    e[i].file == k->file && e[i].map == k->map &&
		    e[i].pgoff == k->pgoff && e[i].seen == k->seen) {
			put = e[i].file;
			put_map = e[i].map;
			seq_array_remove(t, &known_seq, i, sizeof(*e));
			break;
		}
	}
	pthread_mutex_unlock(&known_write);
	drop_map(put, put_map);
	vfile_put(put);
}

/* ---- classifying a mapping the first time -------------------------------- */

static bool is_special(const struct vma *v)
{
	/* [vdso], [vvar], [vvar_vclock], [vsyscall]: the kernel's own. */
	return v->name[0] == '[' && v->name[1] == 'v';
}

/*
 * The library's own memfds (range trees, vrangectl's publication): never
 * the application's memory, so never marked (an address that lands there
 * is a stale pointer; marking would let a purge punch the library's state).
 */
static bool is_library_internal(const struct vma *v)
{
	static const char *const own[] = { "/memfd:vrange-local", "/memfd:vrange-state",
					   "/memfd:vrange-pub", "/memfd:vrange-pool" };

	for (size_t i = 0; v->shared && i < sizeof(own) / sizeof(own[0]); i++)
		if (!strncmp(v->name, own[i], strlen(own[i])) &&
		    (v->name[strlen(own[i])] == ' ' || !v->name[strlen(own[i])]))
			return true;
	return false;
}

/* A descriptor for the file behind a shared mapping, or -errno. */
static int open_mapped_file(const struct vma *v)
{
	char path[64];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
		 (unsigned long)v->start, (unsigned long)v->end);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	/* map_files needs CAP_SYS_ADMIN; a path that still names it will do. */
	if (v->name[0] != '/')
		return -EOPNOTSUPP;
	fd = open(v->name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -EOPNOTSUPP;
	if (fstat(fd, &st) < 0 || st.st_ino != v->inode || st.st_dev != v->dev) {
		close(fd);
		return -EOPNOTSUPP;
	}
	return fd;
}

/*
 * In SIGBUS mode this mapping signals where any process purged the file
 * (contract 5: every application mapping passed to vrange()).  Where it
 * cannot be registered (a read-only descriptor's mapping: EPERM; the
 * application's own userfaultfd: EBUSY) the purge goes on and the mapping
 * reads zeros; the stats count it (uffd_arm).
 */
static struct vmap *arm_map(struct vfile *f, const struct vma *v,
			    const struct known *k)
{
	struct vmap *m;

	if (!uffd_available() || !(m = calloc(1, sizeof(*m))))
		return NULL;
	m->base = (char *)(v->start - (uintptr_t)v->offset);
	m->first = (size_t)v->offset + (k->start - v->start);
	m->size = m->first + (k->end - k->start);
	m->sigbus = true;
	sigbus_fixup_install(); /* stale markers another process left */
	vfile_add_map(f, m);
	uffd_arm(f, m, false);
	return m;
}

static int classify_shared(const struct vma *v, struct known *k)
{
	struct stat st;
	struct vfile *f = vfile_find(v->dev, (ino_t)v->inode, -1);
	int fd, r;

	if (!f) {
		fd = open_mapped_file(v);
		if (fd < 0)
			return fd;
		r = shmem_check_fd(fd, &st);
		/* A regular file of a file system that punches (contract 9). */
		if (r == -EOPNOTSUPP && S_ISREG(st.st_mode))
			r = disk_check_fd(fd, &st);
		if (r == 0)
			r = vfile_get(fd, &st, &f);
		close(fd);
		if (r < 0)
			return r == -EBADF ? -EOPNOTSUPP : r;
	}
	vfile_note_app_mapped(f);
	k->file = f;
	k->dev = (uint64_t)f->dev;
	k->ino = (uint64_t)f->ino;
	k->pgoff = (v->offset + (k->start - v->start)) >> vr_page_shift;
	/* userfaultfd cannot watch a disk file's pages: such a mapping reads
	 * zeros where a range was punched (contract 9), and is no fallback. */
	k->map = f->disk ? NULL : arm_map(f, v, k);
	return 0;
}

/*
 * Does [a, b), inside the known file entry k, still map k's file at k's
 * offsets?  The application may have unmapped it and mapped another file
 * (or anonymous memory) at the same address since: the address alone
 * proves nothing.  One PROCMAP_QUERY ioctl per mapping the range spans.  A
 * mapping of the same file at the same offset passes, and rightly: the
 * state is the file's.
 */
static bool file_map_holds(const struct known *k, uintptr_t a, uintptr_t b)
{
	struct vma v = { 0 }; /* filled by an ioctl valgrind does not know */

	while (a < b) {
		int q = vma_query(a, &v);

		if (q < 0) /* gone; or cannot tell now: keep it */
			return q != -ENOENT;
		if (!v.shared || (uint64_t)v.dev != k->dev || (uint64_t)v.inode != k->ino ||
		    v.offset + (a - v.start) !=
			    (k->pgoff << vr_page_shift) + (a - k->start))
			return false;
		a = v.end; /* mprotect may have split it: each piece must agree */
	}
	return true;
}

/*
 * State the anonymous tree holds for [a, b) when no known mapping covers it
 * belongs to memory that is gone: an entry is forgotten only when its
 * mapping was unmapped or replaced, and anymap_discard clears only the
 * piece it was purging.  Left there, a newcomer at that address would
 * inherit its PURGED pages and report VRANGE_PURGED for data that was never
 * touched.  Called before the newcomer is registered; the table is checked
 * under the anonymous tree's lock, so a thread that adds the entry first
 * can only mark after this clear, never before it.
 */
static void clear_stale(uintptr_t a, uintptr_t b)
{
	const struct known *e;
	struct seq_array *t;
	size_t i;

	if (vfile_lock(anon_file) < 0)
		return;
	drain_events();
	if (events_on && !strict_sweep) {
		/* What munmap events left there was given to the memory there
		 * now, after the old memory went. */
		vfile_unlock(anon_file);
		return;
	}
	pthread_mutex_lock(&known_write);
	t = atomic_load(&ktab);
	e = t ? SEQ_ARRAY_AT(t, struct known) : NULL;
	i = t ? known_search(e, t->n, a) : 0;
	if (t && i < t->n && e[i].start <= a)
		b = a; /* known after all: its state is live */
	else if (t && i < t->n && e[i].start < b)
		b = e[i].start;
	pthread_mutex_unlock(&known_write);
	if (a < b && vfile_reserve(anon_file, 2) == 0)
		rt_clear(&anon_file->tree, a >> vr_page_shift, b >> vr_page_shift,
			 NULL, NULL);
	vfile_unlock(anon_file);
}

/* Learn the mapping at addr; 0 (now known), -ENOENT, -EOPNOTSUPP, -errno. */
static int classify(uintptr_t addr)
{
	struct known k = { 0 };
	struct vma v = { 0 }; /* the kernel fills the name behind valgrind's back */
	int r = vma_query(addr, &v);

	if (r < 0)
		return r;
	if (is_special(&v))
		return -EOPNOTSUPP;
	if (is_library_internal(&v))
		return -ENOENT;
	/*
	 * Only the gap around addr: the mapping may have grown over the
	 * address of an older, smaller one whose entry is still there (it is
	 * checked when a call reaches it, and learnt anew if it went).
	 */
	k.start = v.start;
	k.end = v.end;
	if (!known_gap(addr, &k.start, &k.end))
		return 0; /* another thread learnt it meanwhile */
	if (v.shared) {
		r = classify_shared(&v, &k);
		if (r < 0)
			return r;
	} else if (v.inode != 0) {
		return -EOPNOTSUPP; /* a private file mapping */
	} else {
		/* Still registered with us: a mapping we knew, whose entry a
		 * purge dropped; its state is live.  Else it is new to us.
		 * A check that cannot be made fails the call: state forgotten
		 * on purged memory that is still ours would leave its SIGBUS
		 * registration under pages later said to be intact. */
		r = anon_uffd < 0 ? 0 : identity_check(k.start, k.end);
		if (r < 0)
			return r;
		if (r == 0)
			clear_stale(k.start, k.end);
		if (anon_uffd >= 0)
			k.wp = uffd_register(k.start, k.end,
					     UFFDIO_REGISTER_MODE_WP) == 0;
	}
	return known_add(&k, addr);
}

/* ---- vrange() ------------------------------------------------------------ */

/*
 * An munmap returned whose event is not applied yet: apply it before this
 * call looks at the table, so the entry of the memory that went is gone
 * and new memory at its address is learnt - and registered, so that its
 * own munmap will be told - before anything is marked on it.
 */
static void settle_events(void)
{
	if (!events_on || !unmap_events_unsettled() || vfile_lock(anon_file) < 0)
		return;
	drain_events();
	vfile_unlock(anon_file);
}

/*
 * Check that every page of [a, b) is mapped and of an accepted kind,
 * learning unknown mappings on the way.  -ENOENT wins over -EOPNOTSUPP.
 */
static int validate(uintptr_t a, uintptr_t b)
{
	int refused = 0;

	while (a < b) {
		struct known k;
		struct vma v = { 0 }; /* filled by an ioctl valgrind does not know */

		if (known_get(a, &k) && k.file &&
		    !file_map_holds(&k, a, b < k.end ? b : k.end)) {
			/* Another mapping lives there now: forget this one. */
			known_forget(&k);
			continue;
		}
		if (!known_get(a, &k)) {
			int r = classify(a);

			if (r == -EOPNOTSUPP) {
				refused = r;
				if (vma_query(a, &v) < 0)
					return -ENOENT;
				a = v.end;
				continue;
			}
			if (r < 0)
				return r;
			if (!known_get(a, &k))
				return -ENOENT;
		}
		if (k.file && vfile_is_library(k.file) &&
		    k.pgoff + ((b < k.end ? b : k.end) - k.start) / vr_page_size >
			    k.file->sh.user_pages)
			return -EINVAL; /* reaches into a library file's metadata */
		a = k.end;
	}
	return refused;
}

/*
 * Does any page of [a, b) still hold anonymous memory registered with us
 * (or may it: a check that cannot be made says yes)?
 * Holes are stepped over a page at a time: this runs only when purged
 * pages were found under an entry whose identity no longer holds.
 * Async-signal-safe (open, ioctl, close).
 */
static bool any_piece_ours(uintptr_t a, uintptr_t b)
{
	while (a < b) {
		struct vma v = { 0 }; /* filled by an ioctl valgrind does not know */
		uintptr_t e;

		if (vma_query(a, &v) < 0) {
			a += vr_page_size;
			continue;
		}
		e = v.end < b ? v.end : b;
		/* Cannot tell: it may be (the safe answer here). */
		if (!v.shared && v.inode == 0 && identity_check(a, e) != 0)
			return true;
		a = e;
	}
	return false;
}

/* Apply a mark to [a, e), which lies inside the known mapping k. */
static int apply_one(const struct known *k, uintptr_t a, uintptr_t e, int mode,
		     bool *was_purged)
{
	uint64_t ps = a >> vr_page_shift, pe = e >> vr_page_shift;
	int r;

	if (k->file) {
		ps = k->pgoff + ((a - k->start) >> vr_page_shift);
		pe = ps + ((e - a) >> vr_page_shift);
	}
	if (mode == VRANGE_VOLATILE) {
		r = vfile_mark_volatile(k->file ? k->file : anon_file, ps, pe, 0);
		if (r == 0 && k->file && k->file->disk && !k->file->disk_refused)
			disk_reserve_kick(); /* contract 9: the reserve watches */
		return r;
	}
	r = vfile_mark_nonvolatile(k->file ? k->file : anon_file, ps, pe);
	/*
	 * The table entry may be stale: the memory that was marked and
	 * purged was unmapped, and this is a newcomer at its address, which
	 * no purge ever touches.  Its data is intact.  Where any piece is
	 * still ours, purged pages may be there: PURGED.
	 */
	if (r == VRANGE_PURGED && !k->file && k->wp &&
	    identity_check(a, e) == 0 && !any_piece_ours(a, e))
		r = VRANGE_INTACT;
	*was_purged |= r == VRANGE_PURGED;
	return r < 0 ? r : 0;
}

/* Apply a mark to the known memory [a, b); pages already validated. */
static int apply(uintptr_t a, uintptr_t b, int mode, bool *was_purged)
{
	while (a < b) {
		struct known k;
		uintptr_t e;
		int r;

		if (!known_get(a, &k))
			return -ENOENT;
		e = b < k.end ? b : k.end;
		r = apply_one(&k, a, e, mode, was_purged);
		if (r < 0)
			return r;
		a = e;
	}
	return 0;
}

/* Learn (and register) whatever of [a, b) is not known, keeping its
 * state.  The mark is made: memory gone meanwhile is no error of its. */
static void relearn(uintptr_t a, uintptr_t b)
{
	settle_events();
	(void)validate(a, b);
}

static int vrange_any(void *addr, size_t len, int mode, int *purged)
{
	uintptr_t mask = vr_page_size - 1, a = (uintptr_t)addr;
	uintptr_t oa = a & ~mask, ob = (a + len + mask) & ~mask;
	uintptr_t ia = (a + mask) & ~mask, ib = (a + len) & ~mask;
	bool was_purged = false;
	struct known k;
	uint32_t gen;
	int r;

	vr_init();
	/* A fork child's copies of application mappings signal again from
	 * the first call that passes one to vrange() (libvrange(7), Fork):
	 * armed here, before any lock, not only at the child's first purge.
	 * One atomic load unless a fork left some to arm. */
	uffd_rearm();
	if (!atomic_load_explicit(&anon_ready, memory_order_acquire)) {
		pthread_once(&once, init_once);
		atomic_store_explicit(&anon_ready, true, memory_order_release);
	}
	if (!anon_file && !anon_file_retry())
		return -ENOMEM;
	if (ob < oa)
		return -ENOENT; /* wraps around the top of the address space */
	/* Volatile rounds inward: a partly covered page may hold bytes
	 * still needed.  Non-volatile rounds outward. */
	if (mode == VRANGE_NONVOLATILE) {
		ia = oa;
		ib = ob;
	}
	/*
	 * The common case, one known anonymous mapping: one table look-up,
	 * no system call.  A file mapping goes the long way: validate()
	 * checks that the address still maps that file (and, for a library
	 * file, refuses its metadata pages).
	 */
	gen = atomic_load_explicit(&released_gen, memory_order_acquire);
	/* Events first, then the table: an event still being applied may
	 * not have cut its entry yet (unmap_events_done comes after). */
	if (!(events_on && unmap_events_unsettled()) && known_get(oa, &k) &&
	    ob <= k.end && !k.file) {
		r = ia < ib ? apply_one(&k, ia, ib, mode, &was_purged) : 0;
	} else {
		settle_events();
		r = validate(oa, ob);
		if (r < 0)
			return r;
		r = ia < ib ? apply(ia, ib, mode, &was_purged) : 0;
	}
	/*
	 * An idle entry was given back meanwhile (release_if_idle), perhaps
	 * the one this mark went through: learn and register the memory
	 * again, so that the state just made there is told of its munmap.
	 */
	if (r == 0 && mode == VRANGE_VOLATILE && ia < ib &&
	    atomic_load_explicit(&released_gen, memory_order_acquire) != gen)
		relearn(ia, ib);
	if (r == 0 && purged && mode == VRANGE_NONVOLATILE)
		*purged = was_purged;
	return r;
}

/* Counted while it runs: a purge leaves alone state on memory it finds
 * unregistered while a call may be about to register it (adopt). */
int anymap_vrange(void *addr, size_t len, int mode, int *purged)
{
	int r;

	atomic_fetch_add(&marks_running, 1);
	r = vrange_any(addr, len, mode, purged);
	atomic_fetch_sub(&marks_running, 1);
	return r;
}

/* ---- purging ------------------------------------------------------------- */

/* Is [a, b) private anonymous memory, every page resident? */
static bool still_resident_anon(uintptr_t a, uintptr_t b)
{
	unsigned char vec[VFILE_CHUNK_BYTES / 4096];
	size_t n = (b - a) >> vr_page_shift;
	struct vma v = { 0 }; /* filled by an ioctl valgrind does not know */
	int q;

	/*
	 * A file's page counts resident in mincore when it is cached.  Not
	 * through stdio (kernels without PROCMAP_QUERY: mincore alone): its
	 * malloc could wait for a thread that waits at our gate (a free()
	 * that shrinks an arena by mmap(MAP_FIXED) under the arena's lock).
	 */
	q = vma_query_no_stdio(a, &v);
	if ((q < 0 && q != -ENOTTY) || (q == 0 && (v.shared || v.inode != 0 || v.end < b)))
		return false;
	if (n > sizeof(vec) || mincore((void *)a, b - a, vec) < 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(vec[i] & 1))
			return false;
	return true;
}

enum discarded { DISCARDED, KEPT, FORGOTTEN };

/*
 * Discard the resident pages [a, b) of a mapping whose identity held when
 * the caller shut the event gate (walk_pieces).  KEPT if nothing was
 * discarded (SIGBUS mode could not be armed), FORGOTTEN if the memory
 * there is not what was checked.
 *
 * UFFDIO_REGISTER takes whatever is mapped at the address, so the MISSING
 * registration is made by address only while the gate is shut: the
 * memory checked can then be unmapped, but no munmap of it returns, and
 * the only newcomer its thread can have made is one an mmap(MAP_FIXED)
 * put in its place in the same call - which waits at the gate, so nobody
 * touched it: the pages mincore found resident are not resident there (or
 * it is not private anonymous memory).  That is checked after the
 * registration, before the discard.
 *
 * The registration stays (MISSING and write-protect) until the pages are
 * taken back (anymap_unpoison, on the thread whose call names them) or
 * unmapped: going back to write-protect alone would mean an unregistration
 * first (the kernel keeps a registration that has every mode asked for),
 * and in that window an munmap is neither told nor kept waiting - its
 * thread could map something new there, which the next registration would
 * take.
 */
static enum discarded discard_resident(struct vfile *f, uintptr_t a, uintptr_t b,
				       bool sigbus)
{
	const __u64 missing = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP;
	struct uffdio_poison po = { .range = { a, b - a } };
	struct uffdio_range ur = { a, b - a };

	/* From the registration on a touch raises SIGBUS: without it the
	 * pages would read zeros, so then they are not purged. */
	if (sigbus) {
		if (uffd_register(a, b, missing) < 0)
			return KEPT;
		atomic_store(&anon_armed, true);
		if (!still_resident_anon(a, b)) {
			/* Not the memory that was checked (or it lost pages
			 * meanwhile): nothing is discarded, and its state goes
			 * with the registration - state is never left on memory
			 * whose munmap we would not be told of. */
			ioctl(anon_uffd, UFFDIO_UNREGISTER, &ur);
			rt_clear(&f->tree, a >> vr_page_shift, b >> vr_page_shift, NULL, NULL);
			return FORGOTTEN;
		}
	}
	rt_mark_purged(&f->tree, a >> vr_page_shift, b >> vr_page_shift, NULL);
	madvise((void *)a, b - a, MADV_DONTNEED);
	/* Markers; where that fails the MISSING registration raises SIGBUS
	 * instead. */
	if (sigbus)
		ioctl(anon_uffd, UFFDIO_POISON, &po);
	return DISCARDED;
}

/* Split [a, b) by residency: discard what holds data, re-queue the rest. */
static void discard_piece(struct vfile *f, uintptr_t a, uintptr_t b, bool sigbus,
			  uint64_t *freed)
{
	unsigned char vec[VFILE_CHUNK_BYTES / 4096];
	size_t n = (b - a) >> vr_page_shift;

	if (n > sizeof(vec) || mincore((void *)a, b - a, vec) < 0)
		memset(vec, 1, n < sizeof(vec) ? n : sizeof(vec));
	for (size_t i = 0; i < n;) {
		size_t j = i;
		bool resident = vec[i] & 1;
		enum discarded d = KEPT;

		while (j < n && (vec[j] & 1) == resident)
			j++;
		uintptr_t ra = a + (i << vr_page_shift), rb = a + (j << vr_page_shift);
		if (resident)
			d = discard_resident(f, ra, rb, sigbus);
		if (d == DISCARDED) {
			*freed += rb - ra;
		} else if (d == KEPT) {
			/* Held no data (nothing to free, nothing to signal),
			 * or could not be purged: queued again. */
			rt_mark_volatile(&f->tree, ra >> vr_page_shift,
					 rb >> vr_page_shift, 0, vr_next_seq(), NULL);
		}
		i = j;
	}
}

/* [a, b) no longer holds what was marked: its state is forgotten
 * (contract 5).  Caller holds the anonymous tree's lock. */
static void forget_span(uintptr_t a, uintptr_t b)
{
	rt_clear(&anon_file->tree, a >> vr_page_shift, b >> vr_page_shift, NULL, NULL);
	known_trim(a, b, false, UINT64_MAX);
}

/* ---- munmap events -------------------------------------------------------- */

struct stale_find {
	uint64_t before;      /* mark clock of the munmap */
	struct rt_range found;
};

/* The first range the munmap took away: purged ones (a newcomer is never
 * purged before its munmap event is applied), or volatile ones marked
 * before it. */
static int find_stale(const struct rt_range *rr, void *arg)
{
	struct stale_find *c = arg;

	if (rr->state == RT_PURGED || rr->seq < c->before) {
		c->found = *rr;
		return 1;
	}
	return 0;
}

/* Does the anonymous tree hold state in [a, b)?  Anonymous lock held. */
static bool holds_state(uintptr_t a, uintptr_t b)
{
	uint64_t vol = 0, purged = 0;

	return rt_count(&anon_file->tree, a >> vr_page_shift, b >> vr_page_shift,
			&vol, &purged) != 0 || vol + purged != 0;
}

/*
 * The entry around addr holds no state: give its registration back and
 * forget it.  It may be what is left of a mapping the kernel had merged
 * with the one that was unmapped - a neighbour never passed to vrange(),
 * which must not stay registered (contract 5).  If it is memory the
 * application uses, the next vrange() there learns it again; a mark that
 * raced through a copy of the entry sees released_gen move and does so
 * at once (anymap_vrange).  Anonymous lock held.
 */
static void release_if_idle(uintptr_t addr)
{
	struct uffdio_range ur;
	struct known k;

	if (!known_get(addr, &k) || k.file || !k.wp || holds_state(k.start, k.end))
		return;
	known_trim(k.start, k.end, false, UINT64_MAX);
	ur = (struct uffdio_range){ k.start, k.end - k.start };
	/* Only while still ours, with the gate shut: an address that holds
	 * something else now may be memory another call registered. */
	unmap_events_hold();
	if (identity_holds(k.start, k.end))
		ioctl(anon_uffd, UFFDIO_UNREGISTER, &ur);
	unmap_events_release();
	/* After the entry is gone: a marker that sees this cannot find it. */
	atomic_fetch_add(&released_gen, 1);
}

/* The memory [a, b) was unmapped at mark clock seq: forget what was
 * marked there before, and the entries learnt before; keep what a newer
 * mapping at that address was given since.  Anonymous lock held. */
static void apply_unmap(uintptr_t a, uintptr_t b, uint64_t seq)
{
	struct stale_find c = { .before = seq };
	uint64_t ps = a >> vr_page_shift, pe = b >> vr_page_shift;
	struct known lo, hi;
	bool cut_lo, cut_hi;

	while (ps < pe && rt_visit(&anon_file->tree, ps, pe, find_stale, &c) == 1) {
		rt_clear(&anon_file->tree, c.found.start, c.found.end, NULL, NULL);
		ps = c.found.end;
	}
	/* An entry the hole cuts keeps what was one mapping with the memory
	 * that went: a neighbour the kernel had merged into it, perhaps. */
	cut_lo = a && known_get(a - 1, &lo) && !lo.file && lo.end > a && lo.seen < seq;
	cut_hi = known_get(b, &hi) && !hi.file && hi.start < b && hi.seen < seq;
	known_trim(a, b, false, seq);
	if (cut_lo)
		release_if_idle(a - 1);
	if (cut_hi)
		release_if_idle(b);
}

/* Apply the munmap events read so far.  Anonymous lock held. */
static void drain_events(void)
{
	struct unmap_event ev[32];
	size_t n;
	bool lost;

	if (!events_on)
		return;
	do {
		n = unmap_events_take(ev, 32, &lost);
		for (size_t i = 0; i < n; i++)
			apply_unmap(ev[i].start, ev[i].end, ev[i].seq);
		/* Only now: a mark on the fast path that saw no event
		 * unsettled finds the entries these events cut gone. */
		unmap_events_done(n);
		if (lost)
			strict_sweep = true;
	} while (n == 32);
}

enum piece { NOT_OURS, OURS, UNSURE };

/*
 * The piece [a, e) is not registered with us but holds state.  A purge
 * never registers it by address: the memory there may be a newcomer whose
 * predecessor's munmap went untold (it was not registered either), and a
 * registration would take it.  Such state comes from a mark that went
 * through an entry release_if_idle had just given back; the marking call
 * learns and registers the memory again before it returns (relearn).  So
 * while a vrange() call runs the piece is UNSURE (left for a later pass);
 * otherwise the state is of memory that is gone, or that we can no longer
 * watch: forgotten (never discarded).  Caller holds the anonymous lock;
 * events read so far are applied (walk_pieces).
 */
static enum piece adopt(uintptr_t a, uintptr_t e)
{
	if (!events_on || strict_sweep || !holds_state(a, e))
		return NOT_OURS;
	return atomic_load(&marks_running) ? UNSURE : NOT_OURS;
}

/*
 * Is the piece [a, e) of mapping v the anonymous memory that was marked?
 * Registered with our userfaultfd: yes (munmap removes the registration, a
 * new mapping never has it).  Known but never registered (no userfaultfd,
 * or the registration was refused): private anonymous memory inside the
 * extent of its entry is taken for it - the weak check the design notes
 * call out (a VMA split by mprotect passes it, and so does a new mapping
 * inside the old extent); *e is clipped to the entry.  Unregistered memory
 * holding state is left for later or forgotten (adopt, above).
 */
static enum piece piece_ours(const struct vma *v, uintptr_t a, uintptr_t *e, bool *wp)
{
	struct known k;

	*wp = false;
	if (v->shared || v->inode != 0 || is_special(v))
		return NOT_OURS;
	if (anon_uffd >= 0) {
		int id = identity_check(a, *e);

		if (id == 1) {
			*wp = true;
			return OURS;
		}
		if (id < 0)
			return UNSURE; /* never forgotten on a failed check */
	}
	/* Known but never registered (refused): the weak check. */
	if (known_get(a, &k) && !k.file && !k.wp) {
		if (*e > k.end)
			*e = k.end;
		return OURS;
	}
	/* Not registered (any more): unmapped since, or a newcomer. */
	return anon_uffd >= 0 ? adopt(a, *e) : NOT_OURS;
}

/*
 * Apply every munmap event there is: an munmap under way (its event
 * queued, not read) is let finish first, so the walk judges no piece by
 * state its old memory left.  The reader reads at once; the wait is
 * bounded all the same.  Anonymous lock held, gate open.
 */
static void settle_now(void)
{
	for (int i = 0; i < 1000 && events_on && unmap_events_pending(); i++)
		sched_yield();
	drain_events();
}

/*
 * Walk [a, b) mapping by mapping: pieces that are still ours go to fn,
 * holes and memory that is not ours are forgotten, unsure pieces are left
 * as they are.  Caller holds the anonymous tree's lock.
 */
static void walk_pieces(uintptr_t a, uintptr_t b,
			void (*fn)(uintptr_t a, uintptr_t e, bool wp, void *arg),
			void *arg, bool requeue_unsure)
{
	while (a < b) {
		struct vma v = { 0 }; /* filled by an ioctl valgrind does not know */
		enum piece p;
		uintptr_t e;
		bool wp;
		int q;

		settle_now();
		q = vma_query_next(a, &v);

		if (q < 0 && q != -ENOENT) {
			/* Cannot tell now: keep the state, try at a later pass. */
			if (requeue_unsure)
				rt_mark_volatile(&anon_file->tree, a >> vr_page_shift,
						 b >> vr_page_shift, 0, vr_next_seq(), NULL);
			return;
		}
		if (q < 0 || v.start >= b) {
			forget_span(a, b); /* unmapped to the end */
			return;
		}
		if (v.start > a) { /* a hole, then a mapping */
			forget_span(a, v.start);
			a = v.start;
		}
		e = v.end < b ? v.end : b;
		/*
		 * The identity check and whatever fn does by address happen
		 * with the gate shut: memory found registered cannot be
		 * unmapped and replaced by its thread meanwhile (its munmap
		 * waits for the reader).
		 */
		if (events_on)
			unmap_events_hold();
		p = piece_ours(&v, a, &e, &wp);
		if (p == OURS)
			fn(a, e, wp, arg);
		if (events_on)
			unmap_events_release();
		switch (p) {
		case OURS:
			break;
		case NOT_OURS:
			forget_span(a, e);
			break;
		case UNSURE: /* decided at a later pass */
			if (requeue_unsure)
				rt_mark_volatile(&anon_file->tree, a >> vr_page_shift,
						 e >> vr_page_shift, 0, vr_next_seq(), NULL);
			break;
		}
		a = e;
	}
}

struct discard_ctx {
	struct vfile *f;
	uint64_t *freed;
};

static int first_volatile(const struct rt_range *rr, void *arg)
{
	if (rr->state != RT_VOLATILE)
		return 0;
	*(struct rt_range *)arg = *rr;
	return 1;
}

/*
 * Discard what is still volatile in [a, e): the chunk was chosen before
 * munmap events were applied, which may have forgotten part of it (the
 * old memory's marks) - that part is a newcomer's data now.
 */
static void discard_cb(uintptr_t a, uintptr_t e, bool wp, void *arg)
{
	struct discard_ctx *c = arg;
	uint64_t p = a >> vr_page_shift, pe = e >> vr_page_shift;
	struct rt_range rr;

	while (p < pe && rt_visit(&c->f->tree, p, pe, first_volatile, &rr) == 1) {
		discard_piece(c->f, (uintptr_t)rr.start << vr_page_shift,
			      (uintptr_t)rr.end << vr_page_shift, wp, c->freed);
		p = rr.end;
	}
}

void anymap_discard(struct vfile *f, uint64_t start, uint64_t end, uint64_t *freed)
{
	struct discard_ctx c = { f, freed };

	walk_pieces((uintptr_t)start << vr_page_shift, (uintptr_t)end << vr_page_shift,
		    discard_cb, &c, true);
}

int anymap_unpoison(uint64_t start, uint64_t end)
{
	uintptr_t a = (uintptr_t)start << vr_page_shift;
	uintptr_t b = (uintptr_t)end << vr_page_shift;
	struct uffdio_range ur = { a, b - a };
	struct known k;
	int r;

	/* Only memory that is provably still ours: never zap a newcomer.
	 * A check that could not be made fails the call (the pages stay
	 * purged, the caller may ask again): markers left behind would
	 * raise SIGBUS on memory the caller was told is its own again. */
	if (anon_uffd < 0 || !known_get(a, &k) || b > k.end)
		return 0;
	/* Our registration, not the table's wp flag, is the proof: a purge
	 * may have adopted memory whose first registration failed. */
	r = identity_check(a, b);
	if (r <= 0)
		return r;
	/* A purge's MISSING registration stays (discard_resident): dropped
	 * here, on the thread whose call names the memory. */
	if (atomic_load(&anon_armed) &&
	    (ioctl(anon_uffd, UFFDIO_UNREGISTER, &ur) < 0 ||
	     uffd_register(a, b, UFFDIO_REGISTER_MODE_WP) < 0)) {
		r = -errno;
		uffd_register(a, b, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP);
		return r;
	}
	return madvise((void *)a, b - a, MADV_DONTNEED) < 0 ? -errno : 0;
}

/* ---- noticing what the application unmapped ------------------------------ */

static void keep_cb(uintptr_t a, uintptr_t e, bool wp, void *arg)
{
	(void)a;
	(void)e;
	(void)wp;
	(void)arg;
}

/*
 * Forget the state of anonymous memory that is no longer there (unmapped,
 * or replaced by a new mapping).  Only entries that hold state are asked
 * about: one PROCMAP_QUERY and one userfaultfd ioctl per mapping.
 */
static int first_range(const struct rt_range *rr, void *arg)
{
	*(struct rt_range *)arg = *rr;
	return 1;
}

static void sweep_anon(void)
{
	uint64_t vol, purged;
	struct rt_range rr;
	uintptr_t a = 0;
	struct known k;

	if (!anon_file || vfile_lock(anon_file) < 0)
		return;
	drain_events();
	if (strict_sweep) {
		/* Events were lost: every range is checked, registrations only. */
		uint64_t p = 0;

		while (rt_visit(&anon_file->tree, p, UINT64_MAX >> 1, first_range, &rr) == 1) {
			walk_pieces(rr.start << vr_page_shift, rr.end << vr_page_shift,
				    keep_cb, NULL, false);
			p = rr.end;
		}
		strict_sweep = false;
	}
	while (known_next(a, false, &k)) {
		vol = purged = 0;
		if (rt_count(&anon_file->tree, k.start >> vr_page_shift,
			     k.end >> vr_page_shift, &vol, &purged) == 0 && vol + purged)
			walk_pieces(k.start, k.end, keep_cb, NULL, false);
		a = k.end;
	}
	vfile_unlock(anon_file);
}

/* Forget file entries whose address holds something else now (their
 * reference to the file goes with them). */
static void sweep_files(void)
{
	uintptr_t a = 0;
	struct known k;

	while (known_next(a, true, &k)) {
		if (!file_map_holds(&k, k.start, k.end))
			known_forget(&k);
		a = k.end;
	}
}

void anymap_sweep(void)
{
	/* Orphans come without this layer too: a region destroyed after
	 * its descriptor went out, a file the file layer forgot.  A process
	 * that never passed memory to vrange() kept every such file open
	 * (our descriptor and its state's) after the application let go. */
	if (atomic_load_explicit(&anon_ready, memory_order_acquire)) {
		sweep_files();
		sweep_anon();
	}
	vfile_sweep_orphans();
}

/* The monitor may run many passes in a burst: once per 100 ms is enough
 * to notice what went, and discards check for themselves. */
void anymap_sweep_for_purge(void)
{
	static _Atomic uint64_t last;
	uint64_t now = vr_next_seq(), prev = atomic_load(&last);

	if (now - prev < 100000000u || !atomic_compare_exchange_strong(&last, &prev, now))
		return;
	anymap_sweep();
}

/* ---- fork ---------------------------------------------------------------- */

/*
 * Before fork: the child zaps the anonymous ranges recorded purged (their
 * poison markers), so they must be the memory that was purged, not a new
 * mapping at its address.  Checked here, in the parent, where the
 * registrations still tell; the child has none.  Runs before the
 * library's own prepare handler takes its locks.
 */
static void anon_before_fork(void)
{
	if (anon_file && anon_uffd >= 0 && rt_purged_pages(&anon_file->tree))
		sweep_anon();
}

static int child_clear_purged(const struct rt_range *rr, void *arg)
{
	(void)arg;
	/* The child inherited the poison markers; its copy is plain memory. */
	if (rr->state == RT_PURGED)
		madvise((void *)(uintptr_t)(rr->start << vr_page_shift),
			(size_t)(rr->end - rr->start) << vr_page_shift, MADV_DONTNEED);
	return 0;
}

/*
 * The child's copy of private anonymous memory is ordinary memory with no
 * library state (contract 5): pages the parent had purged read zeros and
 * never signal; its userfaultfd registrations did not survive fork.  Its
 * MAP_SHARED mappings are the parent's, of the same files: those entries
 * stay, with their references, so the child's purges and stats reach the
 * files it knows only through a mapping.
 */
static void anon_child_after_fork(void)
{
	struct seq_array *t = atomic_load(&ktab);
	uint32_t seq = atomic_load(&known_seq.seq);
	struct known *e = t ? SEQ_ARRAY_AT(t, struct known) : NULL;
	size_t i, j;

	/* A writer of the parent may have been mid-change: the prepare
	 * handler does not hold known_write, so a fresh lock and an even
	 * sequence are right (the child is single-threaded). */
	pthread_mutex_init(&known_write, NULL);
	atomic_store(&known_seq.seq, (seq + 1) & ~1u);
	vma_query_forget();
	unmap_events_forget();
	events_on = false;
	strict_sweep = false;
	if (!anon_file)
		return;
	/* Poison markers exist only where a userfaultfd of ours put them. */
	if (anon_uffd >= 0)
		rt_visit(&anon_file->tree, 0, UINT64_MAX >> 1, child_clear_purged, NULL);
	rt_clear(&anon_file->tree, 0, UINT64_MAX >> 1, NULL, NULL);
	for (i = j = 0; t && i < t->n; i++)
		if (e[i].file)
			e[j++] = e[i];
	if (t)
		t->n = j;
	if (anon_uffd >= 0)
		close(anon_uffd);
	anon_uffd = -1;
}
