/* SPDX-License-Identifier: MIT */
/*
 * shared_file.h - files this library creates keep their volatile state
 * where every process that holds the file can reach it, and nobody else
 * (internal).
 *
 * The state (the range tree's arena and a process-shared lock that survives a dead holder) lives
 * in a companion memfd, the metadata file.  The user's file keeps exactly
 * its size (the contract: a region's memfd is `size` bytes); it carries an
 * extended attribute, user.vrange, that names the metadata file's identity
 * and the processes holding it open ("holders": pid and fd).  A process
 * given only the user's file reads the attribute (which needs the file) and
 * opens the metadata through /proc/<holder>/fd/<n> (which needs the
 * holder's ptrace-read permission: same user or root), checking its device
 * and inode.  There is no name in /dev/shm or /tmp to pre-create, replace
 * or link.  Everything read - attribute, header, tree - is validated: what
 * does not check out is -EIO, never a crash or a hang.
 *
 * Layout of the metadata file: [arena: arena_bytes][header page].
 *
 * Foreign files (shared-memory files the application made: its own memfd,
 * a /dev/shm file) get the same kind of metadata the first time the library
 * keeps state for them (vshared_open_foreign), so that every process using
 * the file sees one state (contract 1).  Their size can change under the
 * library, so their metadata is laid out the other way round - [header
 * page][arena] - and the arena grows: the process that needs more room
 * extends the file and says so in the header, and every other process
 * follows (maps the larger arena) the next time it takes the lock.  The
 * attribute of a foreign file says user_size 0: "the file's own size".
 *
 * A region nobody else can reach yet keeps the same arena and header in a
 * slot of this process's pool instead (state_pool.h): no metadata file, no
 * attribute.  When its file becomes reachable (vfile_share()), the state
 * moves into a metadata file of its own and the slot's header says so
 * ("moved"): whoever takes the slot's lock afterwards - a thread of this
 * process, or a fork child sharing the slot - sees it and follows the
 * attribute to the new metadata.
 */
#ifndef VRANGE_SHARED_FILE_H
#define VRANGE_SHARED_FILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "env.h"
#include "range_tree.h"
#include "shared_lock.h"
#include "state_pool.h"

struct vshared_hdr {
	char magic[16];
	uint32_t version;
	uint32_t page_size;
	uint64_t user_size;
	uint64_t arena_bytes;
	struct shared_lock lock; /* robust against death and scribbles */
	_Atomic uint32_t ready;  /* set last, after everything else */
	/* Foreign files only (under the lock): the arena's size now
	 * (arena_bytes is its size at creation), and the page every range
	 * ends at or before, so that a reset after a death covers them all. */
	uint64_t cur_arena_bytes;
	uint64_t max_page;
	_Atomic uint32_t moved;  /* a pool slot whose state now lives in a
				  * metadata file named by the attribute
				  * (ignored in a metadata file) */
	uint64_t dev, ino;       /* the user's file (checked on a pool slot) */
};

/* This process's view of one file's shared state (a library file's
 * metadata, a pool slot, or a foreign file's metadata). */
struct vshared {
	int meta_fd;             /* our descriptor of the metadata file, or -1 */
	void *map;               /* the metadata file, mapped shared */
	size_t map_bytes;
	struct vshared_hdr *hdr; /* inside map: after the arena (a library
				  * file, a pool slot), or map itself (a
				  * foreign file) */
	struct shared_lock *_Atomic lock; /* in hdr; stored last when the
				  * state moves (readers check it after locking) */
	int user_fd;             /* the user's file: where a moved state is */
	bool pooled;             /* the state is a slot of our pool */
	bool in_slot;            /* the state is a pool slot (ours, or another
				  * process's that vrangectl attached): it may
				  * move */
	struct pool_slot slot;   /* held (slot.pool set) until close, also
				  * after the state moved: a thread may be
				  * waiting on the lock in it */
	void *old_map;           /* a mapped slot the state moved out of */
	size_t old_map_bytes;
	uint64_t user_size;      /* bytes of user data (not page-rounded) */
	uint64_t user_pages;     /* pages the tree may hold */
	uint64_t arena_bytes;    /* local copy: never trust the header's */
	_Atomic bool wedged;     /* its lock timed out: wait only briefly
	                          * until a call gets it again */
	_Atomic bool contended;  /* someone waited at the last unlock */
	void *arena;             /* the tree's arena: inside map for a library
				  * file, a mapping of its own for a foreign one */
	bool foreign;            /* a foreign file's metadata: the arena grows */
	volatile uint64_t *shared_arena_bytes; /* in hdr: the arena's size now */
	volatile uint64_t *max_page; /* in hdr: no page at or past it was ever
				      * marked (foreign: recovery covers below) */
};

/*
 * Make fd - a tmpfs/memfd file the library created, empty - a library file
 * for user_size bytes: size it to exactly that, create and format its
 * metadata file and name it in the attribute.  0 or -errno (-EOPNOTSUPP
 * where the file system keeps no user xattrs: the file then stays a foreign
 * file with process-local state).
 */
int vshared_format(int fd, uint64_t user_size) VR_HIDDEN;
/* vshared_format succeeded but no vfile took the file up (its creation
 * failed): close the metadata descriptor format left open for it. */
void vshared_unformat(int fd) VR_HIDDEN;

/* fork(): the table of descriptors format left for the taking is held
 * across it (a leaf lock, after the disk layer's). */
void vshared_fork_prepare(void) VR_HIDDEN;
void vshared_fork_done(void) VR_HIDDEN;

/*
 * Does fd carry shared metadata?  1 and *user_size filled (0 for a foreign
 * file: its size is its own), 0 if not, -EIO if its attribute is
 * malformed.  One fgetxattr.
 */
int vshared_probe(int fd, uint64_t *user_size) VR_HIDDEN;

/*
 * Attach to the metadata of fd: 1 and s, tree filled; 0 for a file without
 * it (or whose metadata cannot be reached nor made afresh); -EIO for
 * metadata that does not check out; -errno.  Metadata no live process
 * holds any more is made afresh (its state is gone).  Registers this
 * process as a holder.
 */
int vshared_open(int fd, struct vshared *s, struct rt_tree *tree) VR_HIDDEN;
void vshared_close(struct vshared *s) VR_HIDDEN;

/*
 * A foreign file (no attribute yet) gets shared metadata: under the OFD
 * lock on the attribute, attach to what another process named meanwhile,
 * else create it and name it in the attribute.  1 and s, tree filled (as
 * vshared_open); 0 where the file system or the file refuses the attribute
 * (the state then stays process-local; the reason is in *why); -errno.
 */
int vshared_open_foreign(int fd, struct vshared *s, struct rt_tree *tree,
			 const char **why) VR_HIDDEN;

/* A foreign file's arena is full: double it (lock held).  0 or -ENOMEM. */
int vshared_grow(struct vshared *s, struct rt_tree *tree) VR_HIDDEN;

/* Another process grew the arena: map it at its new size (lock held).
 * 0, or -EIO for a header that does not check out. */
int vshared_follow(struct vshared *s, struct rt_tree *tree) VR_HIDDEN;

/* After taking the lock of a foreign file's metadata: one load. */
static inline int vshared_follow_check(struct vshared *s, struct rt_tree *tree)
{
	if (!s->foreign || *s->shared_arena_bytes == s->arena_bytes)
		return 0;
	return vshared_follow(s, tree);
}

/* Before marking pages up to end (lock held): recovery must cover them. */
static inline void vshared_note_end(struct vshared *s, uint64_t end)
{
	if (s->foreign && *s->max_page < end)
		*s->max_page = end;
}

/*
 * The process-shared lock (shared_lock.h).  A holder that died (reaped or
 * still a zombie) is recovered from: the tree is checked, and if the death
 * left it inconsistent it is reset to one conservative state (every page
 * "purged": nothing is ever reported INTACT that might not be, and nothing
 * is discarded).  A lock that cannot be had within two seconds (a hostile
 * or stopped holder) is -EIO; later calls on the file in this process wait
 * for it only briefly (-EIO again while that lasts), and the first one that
 * gets it ends the wedge.
 */
int vshared_lock_slow(struct vshared *s, struct rt_tree *tree) VR_HIDDEN;

/* The header a lock lives in. */
static inline struct vshared_hdr *vshared_hdr_of(struct shared_lock *l)
{
	return (struct vshared_hdr *)((char *)l - offsetof(struct vshared_hdr, lock));
}

/* Inline: marking takes this lock twice per mark/unmark pair.  A lock in a
 * header whose state moved is not the state's lock any more: the slow path
 * follows the move. */
static inline int vshared_lock(struct vshared *s, struct rt_tree *tree)
{
	uint64_t cur = 0, me = shared_lock_me;
	struct shared_lock *l = atomic_load_explicit(&s->lock, memory_order_acquire);

	if (me && !atomic_load_explicit(&s->wedged, memory_order_relaxed) &&
	    atomic_compare_exchange_strong_explicit(&l->word, &cur, me,
						    memory_order_acquire,
						    memory_order_relaxed)) {
		if (!atomic_load_explicit(&vshared_hdr_of(l)->moved, memory_order_relaxed))
			return 0;
		shared_lock_release(l);
	}
	return vshared_lock_slow(s, tree);
}

static inline void vshared_unlock(struct vshared *s)
{
	if (shared_lock_release(atomic_load_explicit(&s->lock, memory_order_relaxed)))
		atomic_store_explicit(&s->contended, true, memory_order_relaxed);
}

/*
 * A region's state in a slot of this process's pool, for user_size bytes
 * of the file user_fd (dev, ino): nothing volatile.  0, -E2BIG (too big
 * for a slot: format the file instead), -errno.
 */
int vshared_pool_format(struct vshared *s, struct rt_tree *tree, int user_fd,
			uint64_t user_size, uint64_t dev, uint64_t ino) VR_HIDDEN;

/*
 * Move a pool slot's state into a metadata file of its own and name it in
 * the attribute of s->user_fd (this process its holder): from then on
 * every process that holds the file shares it.  The caller holds the
 * slot's lock; on success the state's lock is the new one and *old is the
 * slot's, still held, for the caller to release.  0 or -errno (the state
 * stays where it was).
 */
int vshared_move(struct vshared *s, struct rt_tree *tree,
		 struct shared_lock **old) VR_HIDDEN;

/*
 * Attach to another process's pool slot (vrangectl): pool_fd at off,
 * arena_bytes of arena, for the file user_fd (user_size bytes, dev, ino).
 * 1 and s, tree filled, or -EIO.
 */
int vshared_attach_slot(struct vshared *s, struct rt_tree *tree, int user_fd,
			int pool_fd, uint64_t off, uint64_t arena_bytes,
			uint64_t user_size, uint64_t dev, uint64_t ino) VR_HIDDEN;

/* After fork: the child holds the metadata too; say so in the attribute. */
void vshared_add_self(int fd, struct vshared *s, struct rt_tree *tree) VR_HIDDEN;

#endif
