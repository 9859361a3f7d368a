/* SPDX-License-Identifier: MIT */
/*
 * file_state.h - the volatile state of one shared-memory file (internal).
 *
 * A struct vfile exists once per file (device + inode) in this process.  It
 * owns the file's range tree, the lock that guards it, a descriptor of its
 * own for punching, and the list of this process's library mappings of the
 * file (so a purge can make them raise SIGBUS).  Regions and the file layer
 * hold references to it.
 *
 * Locking: the tree is guarded by the tree lock - for a file with shared
 * metadata (shared_file.h: every library file, and a foreign file where the
 * file system keeps the attribute) the lock in its metadata, else
 * f->tree_lock - and vfile_lock() takes it.  The mapping list
 * is read under the tree lock and changed under f->lock and the tree lock,
 * in that order.  Neither is ever held
 * while the library touches application memory, so a SIGBUS handler running
 * on a thread that faulted can always take it (the faulting thread cannot
 * hold it).  Lock order: registry lock, then one file lock.
 */
#ifndef VRANGE_FILE_STATE_H
#define VRANGE_FILE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "env.h"
#include "range_tree.h"
#include "shared_file.h"
#include "shared_lock.h"

struct stat;
struct vrange_region;

/* One mapping of a file in this process that a purge must arm for SIGBUS:
 * a region's, or an application mapping passed to vrange(). */
struct vmap {
	struct vmap *next;
	char *base;          /* where file offset 0 is (or would be) mapped */
	size_t first;        /* file offset where the mapping starts: 0 for a
			      * region, an application mapping's offset */
	size_t size;         /* file offset where the mapping ends */
	bool sigbus;         /* purged pages must raise SIGBUS here */
	_Atomic bool reg_stayed; /* not armed: a purge's registration around
				  * it may have stayed (uffd_purge.c) */
	bool skip;           /* this purge step left it alone: not there, or
			      * the kernel refused it (app_map_faults.h) */
	struct vrange_region *region;
	struct uffd_armed *armed; /* registered for good (uffd_purge.c); read
				   * under the file's lock */
	bool fallback;       /* SIGBUS asked for, refused by the kernel */
};

struct vfile {
	struct vfile *next;       /* registry list, under the registry lock */
	struct vfile *prev;
	struct vfile *hnext;      /* its chain in the index (file_index.h) */
	struct vfile *hprev;
	bool indexed;             /* in the index (not anonymous) */
	dev_t dev;
	ino_t ino;
	int fd;                   /* our own O_RDWR descriptor, for punching */
	bool own_ofd;             /* fd is an open file description of ours,
				   * not a dup of the application's */
	bool fd_borrowed;         /* fd is the region's own (a private region:
				   * nothing else holds the vfile) */
	_Atomic bool lazy;        /* a private region: fd borrowed and/or the
				   * state in our pool - vfile_share() ends it */
	_Atomic bool unreached;   /* a region no other mapping can reach yet:
				   * its purged pages are poisoned only when
				   * touched (uffd_purge.c); share() ends it.
				   * Changed and read under the tree lock */
	bool fd_kept;             /* the lender keeps the borrowed fd open until
				   * every reference is gone and uses it itself
				   * (the shim's private fd): that fd reaching
				   * the file layer is no escape */
	_Atomic unsigned int refs; /* regions, file layer, known mappings;
				   * reaching 0 under the registry lock */
	bool app_mapped;          /* seen through an application mapping */
	bool dormant;             /* an orphan kept without our descriptor:
				   * the file may be gone (see file_state.c) */
	int wd;                   /* its inotify watch (-1: none) */
	/* The file's birth time (statx): with device and inode, who it is
	 * when a dormant state is met again; 0/0 unknown. */
	int64_t btime_sec;
	uint32_t btime_nsec;
	_Atomic bool fd_layer;    /* the file layer holds a reference (set and
				   * cleared under the registry lock) */
	pthread_mutex_t lock;     /* the mapping list (with the tree lock) */
	struct shared_lock tree_lock; /* the tree of a foreign file */
	struct rt_tree tree;      /* guarded by vfile_lock() */
	void *arena;              /* process-local arena of the tree */
	size_t arena_bytes;
	int arena_fd;             /* the memfd behind it (-1: private memory):
				   * vrangectl reads the tree there (publish.h) */
	void *fork_copy;          /* the arena as fork() found it (atfork) */
	uint32_t pub_slot;        /* its entry in the publication (publish.h) */
	bool cache;               /* backs a purgeable cache: set it, then call
				   * vfile_publish() (vrangectl shows "cache") */
	bool shared;              /* state in shared metadata (shared_file.h):
				   * a library file, or a foreign one (sh.foreign) */
	bool fork_held;           /* its shared lock held across fork (atfork) */
	bool inherited;           /* process-local state copied by fork: the
				   * parent purges by its own copy, so this
				   * process never purges from this one */
	bool anon;                /* the process's anonymous memory: pages are
				   * virtual page numbers, no file (any_mapping.c) */
	struct vshared sh;        /* its metadata, when shared */
	struct vmap *maps;        /* guarded by lock */
	bool disk;                /* a file of a real file system (disk_file.h):
				   * punched only after a durable record */
	bool disk_room;           /* counted in disk_room_take (disk_room.h) */
	const char *_Atomic disk_refused; /* why such a file is never punched
				   * ("" or NULL: it is), set once */
};

/* A file the library created (a region's, a shim area's): fixed size. */
static inline bool vfile_is_library(const struct vfile *f)
{
	return f->shared && !f->sh.foreign;
}

/* Bytes of the file the user sees: the user area of a library file, else
 * st_size (foreign files may grow, so the caller's fresh fstat counts). */
static inline uint64_t vfile_user_size(const struct vfile *f, const struct stat *st)
{
	return vfile_is_library(f) ? f->sh.user_size : (uint64_t)st->st_size;
}

/*
 * Find or create the vfile of the file behind fd (which the caller has
 * checked is a shared-memory file, st from fstat).  Takes a reference.
 * 0 or -errno (-EBADF when fd cannot be reopened for writing).
 */
int vfile_get(int fd, const struct stat *st, struct vfile **out) VR_HIDDEN;

/*
 * The state of a region this process just created on fd (a fresh memfd of
 * size bytes, st from fstat): kept in this process's pool, with the
 * region's fd borrowed, until vfile_share().  Takes a reference (the
 * region's).  0, -E2BIG (too big for the pool: format the file and use
 * vfile_get), -errno.
 */
int vfile_new_region(int fd, const struct stat *st, uint64_t size,
		     struct vfile **out) VR_HIDDEN;

/*
 * Let f's file be reached from elsewhere: a descriptor of our own, the
 * state in a metadata file named by the file's attribute (shared_file.h).
 * Called when the region's fd is handed out, when anything else takes a
 * reference to f; fork needs none of it (state_pool.h).  0 or -errno.
 */
int vfile_share(struct vfile *f) VR_HIDDEN;

/*
 * Before fork: every state still in the pool moves to a metadata file
 * (the descriptors stay borrowed: the child inherits the regions too), so
 * the child is a holder like any other.  A state that cannot move stays a
 * pool slot both processes share (state_pool.h).
 */
void vfile_share_all_states(void) VR_HIDDEN;

/* vrangectl: the state of a file another process keeps in its pool. */
int vfile_get_slot(int fd, const struct stat *st, int pool_fd, uint64_t off,
		   uint64_t arena_bytes, uint64_t user_size,
		   struct vfile **out) VR_HIDDEN;

/* The state of the process's private anonymous memory (one, permanent). */
struct vfile *vfile_new_anon(void) VR_HIDDEN;

/* Make sure n more nodes can be had without growing (caller holds lock). */
int vfile_reserve(struct vfile *f, uint32_t n) VR_HIDDEN;

/* Find an existing vfile without creating one; takes a reference. NULL if
 * none.  fd: the caller's descriptor of the file, or -1. */
struct vfile *vfile_find(dev_t dev, ino_t ino, int fd) VR_HIDDEN;

/*
 * Drop a reference.  The last one frees the vfile - unless the file was
 * seen through an application mapping and still holds state (volatile or
 * purged ranges): then it stays in the registry without references (an
 * orphan), so the state is the file's again when it is met next (contract
 * 1 and 5).  An orphan keeps our descriptor while it has volatile ranges
 * and the file can be reached (purges can discard them); otherwise it
 * goes dormant: our descriptor is closed (so we never keep the file's
 * memory alive), an inotify watch tells when the file is gone for good,
 * and only then is the state dropped.
 */
void vfile_put(struct vfile *f) VR_HIDDEN;

/*
 * vfile_put() for the one who lends f its descriptor fd (a private region,
 * a shim area).  A purge may still hold f and punch through f->fd: were
 * the lender to close fd now, the number could name another file before
 * that punch.  So if f still borrows fd, f keeps it and closes it with
 * its last reference: true.  Else (false) fd is closed with close_fd
 * here, before the reference goes - also when f is NULL (no state).
 */
bool vfile_put_lender(struct vfile *f, int fd, int (*close_fd)(int)) VR_HIDDEN;

/* The file was met through an application mapping (any_mapping.c). */
void vfile_note_app_mapped(struct vfile *f) VR_HIDDEN;

/* Free the orphans that hold no state any more and the dormant ones whose
 * file is gone; put the others dormant when they may be unreachable. */
void vfile_sweep_orphans(void) VR_HIDDEN;

/* Is state kept for the file (dev, ino) while nothing refers to it? */
bool vfile_dormant_known(dev_t dev, ino_t ino) VR_HIDDEN;

/* Take the file's tree lock (0) - a library file's shared lock, else its
 * own - or report a lock that cannot be had (-EIO). */
int vfile_lock(struct vfile *f) VR_HIDDEN;
void vfile_unlock(struct vfile *f) VR_HIDDEN;

/* Marking, in pages.  Lock held by the function itself.  seq: the place
 * in the purge order, a stamp of vr_next_seq() taken earlier (the moment
 * the caller let the pages go; 0: now).  The tree and the page words take
 * any stamp; a purge pass already running may or may not take such a mark
 * (see cache_hold.c).  cost: the relative cost of re-creating a page (1 or
 * more; see "Purge order by cost" in docs/design.md). */
int vfile_mark_volatile_at(struct vfile *f, uint64_t start, uint64_t end,
			   int32_t prio, uint64_t seq, uint32_t cost) VR_HIDDEN;
/* Now, at cost 1. */
static inline int vfile_mark_volatile(struct vfile *f, uint64_t start,
				      uint64_t end, int32_t prio)
{
	return vfile_mark_volatile_at(f, start, end, prio, 0, 1);
}
/* VRANGE_INTACT / VRANGE_PURGED / -errno.  Async-signal-safe. */
int vfile_mark_nonvolatile(struct vfile *f, uint64_t start, uint64_t end) VR_HIDDEN;

/*
 * Page i alone, without the lock, where its word is all there is to it
 * (page_words.h): true, done (a mark now, with prio and cost; an unmark
 * that found the page intact); false, the caller takes the general way
 * (vfile_mark_volatile_at, vfile_mark_nonvolatile), which tries this once
 * more and then takes the lock.  Inline, for the library's entry points.
 * The header pointer is loaded once and the words found from it, so a
 * state that moves meanwhile (share()) is seen whole, old or new: the old
 * stays mapped while the vfile lives, and the move raised its fast_off
 * before copying.
 */
static inline struct pw_hdr *vfile_fast_words(struct vfile *f, uint32_t *n)
{
	*n = __atomic_load_n(&f->tree.pw.n, __ATOMIC_RELAXED);
	return *n ? __atomic_load_n(&f->tree.pw.h, __ATOMIC_ACQUIRE) : NULL;
}

static inline bool vfile_fast_mark(struct vfile *f, uint64_t i, int32_t prio,
				   uint32_t cost, uint64_t seq)
{
	uint32_t n;
	struct pw_hdr *h = vfile_fast_words(f, &n);

	return h && pw_fast_mark_cost(h, n, i, prio, seq, cost) == 1;
}

static inline bool vfile_fast_clear(struct vfile *f, uint64_t i)
{
	uint32_t n;
	struct pw_hdr *h = vfile_fast_words(f, &n);

	return h && pw_fast_clear(h, n, i) == 1;
}
/* 1 if any page of [start, end) is volatile (purged or not), 0, -errno. */
int vfile_is_volatile(struct vfile *f, uint64_t start, uint64_t end) VR_HIDDEN;
/* Forget every range (file layer's forget). */
int vfile_clear_all(struct vfile *f) VR_HIDDEN;

/* Add/remove a mapping of f (regions). */
void vfile_add_map(struct vfile *f, struct vmap *m) VR_HIDDEN;
void vfile_del_map(struct vfile *f, struct vmap *m) VR_HIDDEN;

/*
 * Purging.  vfile_peek_oldest reports f's first range in purge order
 * among those marked no later than max_seq (1), or 0 when there is none.
 * vfile_purge_oldest discards f's oldest ranges marked no later than
 * lim->max_seq - the first one, then the next ones while they stay ahead
 * of *lim in the purge order - up to max_pages and one chunk (so marking
 * is never blocked for long), adding the bytes freed (st_blocks) to *freed
 * and the pages discarded to *pages.  Returns 1 if it discarded something,
 * 0 if nothing volatile is left, -errno.  Ranges marked later are passed
 * over, not waited at: the ranges behind them in the order (of a higher
 * priority) were marked before and are this pass's.
 */
struct purge_limit {
	uint64_t max_seq;             /* nothing marked later than this */
	bool other;                   /* another file's range comes next: */
	struct rt_range other_oldest; /* nothing younger than it */
	bool memory;                  /* a memory pass: a disk file gives only
				       * what is in the page cache (the rest is
				       * put back as the most recently marked),
				       * and counts the memory freed */
};
int vfile_peek_oldest(struct vfile *f, uint64_t max_seq,
		      struct rt_range *out) VR_HIDDEN;
int vfile_purge_oldest(struct vfile *f, uint64_t max_pages,
		       const struct purge_limit *lim, uint64_t *freed,
		       uint64_t *pages) VR_HIDDEN;

/* Is a before b in the purge order: lower priority, then the lower key
 * (the mark time raised by the cost, page_words.h: pw_key; both keys of
 * one unit), then marked earlier? */
static inline bool vfile_older(const struct rt_range *a, const struct rt_range *b)
{
	if (a->prio != b->prio)
		return a->prio < b->prio;
	if (a->key != b->key)
		return a->key < b->key;
	return a->seq < b->seq;
}

/* A file with something volatile, and its oldest range then. */
struct purge_cand {
	struct vfile *f; /* a reference taken */
	struct rt_range oldest;
};

/* Every file with something volatile marked no later than max_seq
 * (library files passed over when skip_shared), each with a reference
 * taken: the count (and *out, to free), or -ENOMEM. */
ssize_t vfile_oldest_all(struct purge_cand **out, bool skip_shared,
			 uint64_t max_seq) VR_HIDDEN;
/* The same without disk files (the budget: it counts library files). */
ssize_t vfile_oldest_no_disk(struct purge_cand **out, uint64_t max_seq) VR_HIDDEN;
/* The same for one purge of disk space: only disk files of file system dev.
 * (vfile_oldest_all takes disk files too, for the memory they hold.) */
ssize_t vfile_oldest_disk(struct purge_cand **out, dev_t dev,
			  uint64_t max_seq) VR_HIDDEN;

/* A file system holding volatile disk ranges (the reserve worker). */
struct vfile_disk_fs {
	dev_t dev;
	uint64_t vol_pages;       /* volatile pages of this process there */
	uint64_t bavail_bytes;    /* free space an unprivileged writer can use */
	uint64_t total_bytes;     /* the file system's size */
};
/* Up to max file systems where this process holds volatile disk pages,
 * with their free space (fstatfs of one of its files).  The count. */
size_t vfile_disk_fs(struct vfile_disk_fs *out, size_t max) VR_HIDDEN;
/* Totals of disk files: volatile and purged pages, files never punched
 * (and the reason of the last one seen, or ""). */
void vfile_disk_totals(uint64_t *vol_pages, uint64_t *purged_pages,
		       uint64_t *refused, const char **why) VR_HIDDEN;

/* RT_VOLATILE pages of the files that are not library files (+ anonymous). */
uint64_t vfile_unshared_volatile_pages(void) VR_HIDDEN;

/* The file layer starts keeping state for f: it takes its own reference. */
int vfile_attach_fd_layer(struct vfile *f) VR_HIDDEN;
/* vrange_fd_forget: clear the file's ranges, drop the layer's reference. */
int vfile_forget(dev_t dev, ino_t ino) VR_HIDDEN;

/* Totals for stats: files with file-layer state, pages volatile/purged. */
void vfile_totals(uint64_t *files, uint64_t *vol_pages, uint64_t *purged_pages,
		  uint64_t *resident_bytes) VR_HIDDEN;

/* Rewrite f's entry in this process's publication (publish.h). */
void vfile_publish(struct vfile *f) VR_HIDDEN;

/* pthread_atfork handlers: hold every lock of this module across fork. */
void vfile_fork_prepare(void) VR_HIDDEN;
void vfile_fork_done(void) VR_HIDDEN;
void vfile_fork_child(void) VR_HIDDEN;

/* Largest number of pages one purge step discards while holding the lock. */
#define VFILE_CHUNK_BYTES (2u << 20)
/* The same for a disk file: each step makes its record durable first (a
 * journal commit, disk_file.h), which costs the same for 2 MiB or 64 MiB;
 * the punch itself frees extents, not pages. */
#define VFILE_DISK_CHUNK_BYTES (64u << 20)

#endif
