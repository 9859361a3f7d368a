/* SPDX-License-Identifier: MIT */
/**
 * @file vrange.h
 * libvrange - volatile ranges for Linux programs, in userspace.
 *
 * Memory an application marks "volatile" may be discarded by the library when
 * memory runs short; marking it "non-volatile" again tells whether anything
 * was discarded meanwhile.  The manual is the contract: libvrange(7) for the
 * concepts and the conventions every function follows (-errno results, page
 * rounding, thread safety), and a page per function, named after it
 * (man/ in the source tree).  Comments here only say what each one is.
 */
#ifndef VRANGE_H
#define VRANGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** mark_nonvolatile result: non-volatile again, every byte as it was left. */
#define VRANGE_INTACT 0
/** mark_nonvolatile result: at least one page was discarded while volatile. */
#define VRANGE_PURGED 1

/** vrange() mode: mark volatile, as in the proposed syscall. */
#define VRANGE_VOLATILE 0
/** vrange() mode: mark non-volatile, as in the proposed syscall. */
#define VRANGE_NONVOLATILE 1

/** The library's version, "MAJOR.MINOR.PATCH".  See vrange_version(3). */
const char *vrange_version(void);

/* ------------------------------------------------------------------------ */
/** @defgroup file File layer: volatile ranges on a shared-memory file, or
 * on a regular file of a file system that punches holes (ext4, xfs, btrfs)
 * State belongs to the file, shared by every fd and mapping of it.
 * See vrange_fd_mark_volatile(3), vrange_purge_disk(3).
 * @{ */

/** Mark the whole pages inside [off, off + len) volatile.  See
 * vrange_fd_mark_volatile(3). */
int vrange_fd_mark_volatile(int fd, off_t off, off_t len);

/** Make [off, off + len) non-volatile: VRANGE_INTACT or VRANGE_PURGED.  See
 * vrange_fd_mark_nonvolatile(3). */
int vrange_fd_mark_nonvolatile(int fd, off_t off, off_t len);

/** 1 if any page touching [off, off + len) is volatile, else 0.  See
 * vrange_fd_is_volatile(3). */
int vrange_fd_is_volatile(int fd, off_t off, off_t len);

/** Drop all state this process keeps for the file.  See vrange_fd_forget(3). */
int vrange_fd_forget(int fd);

/** Free space to keep on @p path's file system while it holds volatile
 * disk ranges: 0 = the default (the smaller of 5% and 1 GiB), UINT64_MAX =
 * never punch for space.  0, -EINVAL (NULL path), -ENOENT and the other
 * errors of stat(2), -ENOMEM (more than 32 file systems).  Thread-safe.
 * See vrange_set_disk_reserve(3). */
int vrange_set_disk_reserve(const char *path, uint64_t bytes);

/** Punch volatile ranges of disk files on @p path's file system, oldest
 * first, until at least @p bytes of space were freed or none is left
 * (SIZE_MAX = all): the bytes of space freed (st_blocks), or -EINVAL (NULL
 * path) and the errors of stat(2).  Thread-safe.  See vrange_purge_disk(3). */
ssize_t vrange_purge_disk(const char *path, size_t bytes);

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup region Region layer: memfd regions the library maps
 * See vrange_region_create(3), vrange_mark_volatile(3), vrange(3).
 * @{ */

/** Opaque handle of a region: a memfd mapped shared, read-write. */
typedef struct vrange_region vrange_region;

/** Purged volatile pages read as zeros (ashmem's behaviour). */
#define VRANGE_ACCESS_ZERO (1u << 0)
/** Touching a purged volatile page raises SIGBUS with si_addr inside it. */
#define VRANGE_ACCESS_SIGBUS (1u << 1)
/* neither flag: SIGBUS where userfaultfd is usable here, else ZERO */

/** Create a region: a memfd of @p size bytes, mapped shared.  See
 * vrange_region_create(3). */
int vrange_region_create(const char *name, size_t size, unsigned int flags,
			 vrange_region **out);

/** Map a shared-memory fd as a region.  See vrange_region_adopt(3). */
int vrange_region_adopt(int fd, unsigned int flags, vrange_region **out);

/** Unmap and close a region; NULL is a no-op.  See vrange_region_destroy(3). */
int vrange_region_destroy(vrange_region *r);

/** The region's mapping.  See vrange_region_base(3). */
void *vrange_region_base(const vrange_region *r);

/** The region's size in bytes.  See vrange_region_size(3). */
size_t vrange_region_size(const vrange_region *r);

/** The region's memfd, owned by the region; its first call makes the
 * region's state shareable (-errno if it cannot: -ENOSPC when the file
 * system has no room for the attribute naming that state; the region
 * keeps working and a later call tries again).  See vrange_region_fd(3). */
int vrange_region_fd(const vrange_region *r);

/** The access mode in force.  See vrange_region_access(3). */
unsigned int vrange_region_access(const vrange_region *r);

/** Purge priority of pages marked from now on (lower goes first).  See
 * vrange_region_set_priority(3). */
int vrange_region_set_priority(vrange_region *r, int priority);

/** Mark the whole pages inside [off, off + len) volatile, at the region's
 * cost (vrange_region_set_cost(), default 1).  See vrange_mark_volatile(3). */
int vrange_mark_volatile(vrange_region *r, size_t off, size_t len);

/** The same with @p cost, the relative cost of re-creating one page (1 =
 * the default; 0 is -EINVAL).  Within a priority a dearer range outlives
 * cheaper ones marked at the same time, but not forever.  See
 * vrange_mark_volatile(3). */
int vrange_mark_volatile_cost(vrange_region *r, size_t off, size_t len,
			      uint32_t cost);

/** The cost of the region's later plain marks (vrange_mark_volatile(),
 * vrange() on it); 0 is -EINVAL.  See vrange_region_set_cost(3). */
int vrange_region_set_cost(vrange_region *r, uint32_t cost);

/** Make [off, off + len) non-volatile: VRANGE_INTACT or VRANGE_PURGED.  See
 * vrange_mark_nonvolatile(3). */
int vrange_mark_nonvolatile(vrange_region *r, size_t off, size_t len);

/** 1 if any page touching [off, off + len) is volatile, else 0.  See
 * vrange_is_volatile(3). */
int vrange_is_volatile(vrange_region *r, size_t off, size_t len);

/** The address form, on regions and on memory the library did not create.
 * See vrange(3). */
int vrange(void *addr, size_t len, int mode, int *purged);

/** Refill callback: fill @p buf with the region's contents at @p off.  See
 * vrange_region_set_refill(3). */
typedef int (*vrange_refill_fn)(vrange_region *r, size_t off, void *buf,
				size_t len, void *arg);

/** Set (or, fn NULL, remove) the refill callback.  See
 * vrange_region_set_refill(3). */
int vrange_region_set_refill(vrange_region *r, vrange_refill_fn fn, void *arg);

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup purge Purging, memory pressure, budget
 * See vrange_purge(3), vrange_monitor_start(3), vrange_get_stats(3).
 * @{ */

/** Discard volatile pages, oldest first, until @p bytes are freed.  See
 * vrange_purge(3). */
ssize_t vrange_purge(size_t bytes);

/** Discard every volatile page of one region.  See vrange_region_purge(3). */
ssize_t vrange_region_purge(vrange_region *r);

/** Options for vrange_monitor_start(); later versions append fields. */
struct vrange_monitor_opts {
	size_t struct_size;         /**< sizeof(struct vrange_monitor_opts) */
	unsigned int psi_stall_us;  /**< PSI "some" stall per window, us */
	unsigned int psi_window_us; /**< PSI window, us */
	unsigned int purge_percent; /**< share of volatile bytes freed per event */
	unsigned int flags;         /**< VRANGE_MONITOR_NO_* */
};

/** Do not arm PSI triggers. */
#define VRANGE_MONITOR_NO_PSI (1u << 0)
/** Do not watch cgroup limits or events. */
#define VRANGE_MONITOR_NO_CGROUP (1u << 1)

/** Start the pressure monitor thread.  See vrange_monitor_start(3). */
int vrange_monitor_start(const struct vrange_monitor_opts *opts);

/** Stop the monitor thread and wait for it.  See vrange_monitor_stop(3). */
int vrange_monitor_stop(void);

/** Cap the resident bytes of the library's files; 0 = none.  See
 * vrange_set_budget(3). */
int vrange_set_budget(size_t bytes);

/** Counters returned by vrange_get_stats(); later versions append fields
 * at the end only.  The library learns the caller's size from
 * vrange_get_stats_sized(), so a program built against an older header
 * gets the fields it knows and nothing past them. */
struct vrange_stats {
	uint64_t regions;             /**< live regions */
	uint64_t files;               /**< files with file-layer state */
	uint64_t volatile_bytes;      /**< now marked volatile */
	uint64_t purged_bytes;        /**< of those, now discarded */
	uint64_t purges;              /**< purge passes run */
	uint64_t purged_total;        /**< bytes discarded since start */
	uint64_t pressure_events;     /**< pressure notifications acted on */
	uint64_t refills;             /**< pages restored by refill callbacks */
	char pressure_source[32];     /**< the monitor's source, "none" if none */
	char access_fallback[32];     /**< "" or why SIGBUS mode is unavailable */
	uint64_t sigbus_fallbacks;    /**< SIGBUS-mode mappings known now that
				       *   the kernel would not arm: purged pages
				       *   read zeros there (read-only fd, the
				       *   application's own userfaultfd) */
	char sigbus_fallback[32];     /**< "" or why the last of them fell back */
	/* Contract 9, disk files (also counted in volatile_bytes/purged_bytes): */
	uint64_t disk_volatile_bytes; /**< of volatile_bytes, on disk files */
	uint64_t disk_purged_bytes;   /**< of those, now punched */
	uint64_t disk_purges;         /**< passes run for disk space */
	uint64_t disk_freed_total;    /**< disk space they gave back (st_blocks) */
	uint64_t disk_unpunchable;    /**< disk files that are never punched */
	char disk_unpunchable_why[64];/**< "" or why the last of them is not */
	/* Contract 10, issue 27 (appended after the disk fields): */
	uint64_t purged_cost;         /**< pages discarded since start, each
				       *   times its cost (vrange_mark_volatile_cost) */
};

/** Fill the first @p size bytes of @p out (sizeof(struct vrange_stats) of
 * the caller's header) with the library's counters.  See
 * vrange_get_stats(3). */
int vrange_get_stats_sized(struct vrange_stats *out, size_t size);

/* The library defines the 0.1 entry point of this name itself (src/vrange.c),
 * so it must not see the inline. */
#ifndef VRANGE_BUILDING_LIBRARY
/** Fill @p out with the library's counters: vrange_get_stats_sized() with
 * the size of this header's struct.  See vrange_get_stats(3). */
static inline int vrange_get_stats(struct vrange_stats *out)
{
	return vrange_get_stats_sized(out, sizeof(*out));
}
#endif

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup cache Purgeable cache: key -> value on volatile memory
 * See vrange_cache_create(3), vrange_cache_get(3), vrange_cache_reserve(3).
 * @{ */

/** Opaque handle of a cache. */
typedef struct vrange_cache vrange_cache;

/** Options for vrange_cache_create(); later versions append fields. */
struct vrange_cache_opts {
	size_t struct_size;  /**< sizeof(struct vrange_cache_opts) */
	const char *name;    /**< names its memfds ("vrange-cache:<name>"), shown by
	                          vrangectl and in /proc; may be NULL */
	size_t max_bytes;    /**< cap on value bytes stored; 0 = none; over it the
	                          least recently used released entries are evicted */
	int priority;        /**< purge priority of its memory, as regions (default 0) */
	unsigned flags;      /**< 0 or VRANGE_CACHE_EAGER */
	uint32_t cost;       /**< re-creation cost of a page of its values, as
	                          vrange_mark_volatile_cost(); 0 = the default, 1
	                          (appended: a struct_size that ends before it
	                          means 1) */
};

/** Cache flag: volatile at the last release, not lazily; see vrange_cache_create(3). */
#define VRANGE_CACHE_EAGER (1u << 0)

/** Create an empty cache; opts NULL for the defaults.  See
 * vrange_cache_create(3). */
int vrange_cache_create(const struct vrange_cache_opts *opts, vrange_cache **out);

/** Free a cache and every entry; -EBUSY while a value is held or reserved.
 * See vrange_cache_destroy(3). */
int vrange_cache_destroy(vrange_cache *c);

/** Copy a value in under a key, replacing its entry; starts released.  See
 * vrange_cache_put(3). */
int vrange_cache_put(vrange_cache *c, const void *key, size_t klen,
		     const void *val, size_t vlen);

/** vrange_cache_put() with the value's own re-creation cost (0 is
 * -EINVAL; values sharing a page are purged at the dearest cost put on
 * it).  See vrange_cache_put(3). */
int vrange_cache_put_cost(vrange_cache *c, const void *key, size_t klen,
			  const void *val, size_t vlen, uint32_t cost);

/** Look a key up and hold its value until released; -ENOENT on a miss.
 * See vrange_cache_get(3). */
int vrange_cache_get(vrange_cache *c, const void *key, size_t klen,
		     const void **val, size_t *vlen);

/** End one hold of a value vrange_cache_get() returned.  See
 * vrange_cache_release(3). */
int vrange_cache_release(vrange_cache *c, const void *val);

/** Remove a key's entry; a held value stays valid until released.  See
 * vrange_cache_remove(3). */
int vrange_cache_remove(vrange_cache *c, const void *key, size_t klen);

/** Reserve a held buffer in the cache to fill a value in place.  See
 * vrange_cache_reserve(3). */
int vrange_cache_reserve(vrange_cache *c, const void *key, size_t klen,
			 size_t vlen, void **buf);

/** Publish a reserved buffer as its key's value, as put would.  See
 * vrange_cache_commit(3). */
int vrange_cache_commit(vrange_cache *c, void *buf);

/** Drop a reservation unpublished.  See vrange_cache_abort(3). */
int vrange_cache_abort(vrange_cache *c, void *buf);

/** Counters returned by vrange_cache_get_stats(); later versions append. */
struct vrange_cache_stats {
	size_t struct_size;       /**< set by the caller: sizeof(struct vrange_cache_stats) */
	uint64_t entries;         /**< entries not yet found purged */
	uint64_t value_bytes;     /**< sum of their vlen */
	uint64_t resident_bytes;  /**< what the cache holds in memory now: its
				       pages in memory (values, free pages
				       kept) plus bookkeeping; a purge lowers it */
	uint64_t hits;            /**< gets that returned a value */
	uint64_t misses;          /**< gets that returned -ENOENT */
	uint64_t purged_entries;  /**< entries found purged (by get or the cache) */
	uint64_t evictions;       /**< entries evicted to keep under max_bytes */
	/* Since 0.2 (a smaller struct_size gets the fields above only): */
	uint64_t allocated_bytes; /**< pages given to entries' values, purged or
				       not, plus bookkeeping */
};

/** Read a cache's counters, as many as out->struct_size holds.  See
 * vrange_cache_get_stats(3). */
int vrange_cache_get_stats(vrange_cache *c, struct vrange_cache_stats *out);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* VRANGE_H */
