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
/** @defgroup file File layer: volatile ranges on a shared-memory file
 * State belongs to the file, shared by every fd and mapping of it.
 * See vrange_fd_mark_volatile(3).
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

/** The region's memfd, owned by the region.  See vrange_region_fd(3). */
int vrange_region_fd(const vrange_region *r);

/** The access mode in force.  See vrange_region_access(3). */
unsigned int vrange_region_access(const vrange_region *r);

/** Purge priority of pages marked from now on (lower goes first).  See
 * vrange_region_set_priority(3). */
int vrange_region_set_priority(vrange_region *r, int priority);

/** Mark the whole pages inside [off, off + len) volatile.  See
 * vrange_mark_volatile(3). */
int vrange_mark_volatile(vrange_region *r, size_t off, size_t len);

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

/** Counters returned by vrange_get_stats(). */
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
};

/** Fill @p out with the library's counters.  See vrange_get_stats(3). */
int vrange_get_stats(struct vrange_stats *out);

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup cache Purgeable cache: key -> value on volatile memory
 *
 * Values are copied into pages of library regions (memfds the cache maps
 * itself) that are volatile whenever no value on them is held.  Small
 * values (up to half a page) are packed several to a page in size classes
 * of powers of two; a larger value has pages of its own.  A page is
 * volatile only while none of its values is held, so purging a page may
 * drop several entries.  The pages join the one purge order of the process
 * at the cache's priority, and count in vrange_get_stats() volatile_bytes
 * and purged_bytes, in the budget and for the monitor, but not in
 * `regions`.
 *
 * A held value (between a successful vrange_cache_get() and its
 * vrange_cache_release()) is never discarded and never moves.  get of a
 * key any byte of whose value was discarded drops the entry and misses:
 * the cache never returns a value with a lost byte.
 *
 * Released values become volatile lazily (see VRANGE_CACHE_EAGER): a value
 * got again soon after its release is held and released with one atomic
 * operation on its page's word each, and every purge in the process first
 * makes the deferred values volatile, so no purge of this process finds
 * released memory it could not take.
 *
 * All functions are thread-safe.  Keys are spread over 64 independently
 * locked shards, so lookups of different keys rarely share a lock; holds
 * and releases take no lock unless the page's state changes.  None of them
 * is async-signal-safe (they allocate and take locks).  After fork() a
 * child must not use a cache another thread of the parent was using.
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
};

/**
 * Cache flag: make a value's pages volatile at its last release, always.
 * By default up to 8 MiB of released values (and 4 MiB of freed pages) per
 * cache stay non-volatile for a while, so that a value used again soon is
 * held and released with one atomic operation each; every purge in the
 * process (vrange_purge(), the monitor, the budget) and vrange_get_stats()
 * first makes them volatile, so only another process's purge (vrangectl)
 * can find them not yet volatile.
 */
#define VRANGE_CACHE_EAGER (1u << 0)

/**
 * Create an empty cache.  No memory is mapped until the first value.
 * @param opts NULL for defaults (no name, no cap, priority 0).
 * @param out  receives the cache; untouched on failure.
 * @return 0; -EINVAL NULL out, opts->struct_size smaller than the first
 *         layout or unknown flags; -ENOMEM.
 */
int vrange_cache_create(const struct vrange_cache_opts *opts, vrange_cache **out);

/**
 * Destroy a cache: every entry, its regions and bookkeeping.  Must not race
 * with other calls on the same cache.
 * @return 0 (also for NULL); -EBUSY while a value is held or reserved (the
 *         cache is then left intact).
 */
int vrange_cache_destroy(vrange_cache *c);

/**
 * Copy @p vlen bytes from @p val into the cache under the key of @p klen
 * bytes, replacing any entry of that key.  The new entry starts released
 * (volatile, as after a release).  A held copy of a replaced value stays valid until released.
 * With max_bytes set, least recently used released entries are evicted
 * until the stored value bytes (held ones included) fit; the new entry is
 * never evicted by its own put, so when every other entry is held the
 * cache stays over the cap until a later put or release can evict.
 * @return 0; -EINVAL NULL cache, key or val, klen 0 or > 4096, vlen 0;
 *         -E2BIG vlen > max_bytes; -ENOMEM; another -errno from creating a
 *         region (memfd_create, mmap); -EIO the pages' state could not be
 *         read.  Nothing changed on failure.
 */
int vrange_cache_put(vrange_cache *c, const void *key, size_t klen,
		     const void *val, size_t vlen);

/**
 * Look a key up and hold its value: *val and *vlen receive the value, which
 * stays in place and intact until vrange_cache_release(c, *val).  Several
 * holders of one value may coexist; each releases once.  A value any byte
 * of which was discarded is dropped (counted in purged_entries) and the call
 * misses.  A hit makes the entry the most recently used.
 * @return 0 hit; -ENOENT miss (counted in misses); -EINVAL NULL cache, key,
 *         val or vlen, klen 0 or > 4096; -ENOMEM/-EIO from the page's state
 *         (the entry is left as it was).  *val, *vlen untouched on failure.
 */
int vrange_cache_get(vrange_cache *c, const void *key, size_t klen,
		     const void **val, size_t *vlen);

/**
 * Release one hold of a value obtained from vrange_cache_get().  After the
 * last release of the last held value on a page, the page is volatile (at
 * once with VRANGE_CACHE_EAGER; else before the next purge, see above).
 * Releasing a value concurrently with its own last release (a release too
 * many racing with the last one) is undefined.
 * With max_bytes set, a release also evicts released entries over the cap.
 * @param val exactly the pointer get returned.
 * @return 0; -EINVAL NULL cache, a pointer not obtained from get on this
 *         cache (interior pointers included), or one release more than
 *         gets.
 */
int vrange_cache_release(vrange_cache *c, const void *val);

/**
 * Remove a key.  A held value stays valid until released (later gets
 * miss; destroy is -EBUSY until then).
 * @return 0; -ENOENT no such key (or its value was found discarded now);
 *         -EINVAL NULL cache or key, klen 0 or > 4096.
 */
int vrange_cache_remove(vrange_cache *c, const void *key, size_t klen);

/**
 * Fill in place: reserve @p vlen bytes for the key and get in *buf a
 * writable buffer inside the cache's memory, for a decoder to write the
 * value straight into (no copy).  The buffer is held (non-volatile) and
 * invisible to get until vrange_cache_commit(); vrange_cache_abort() drops
 * it.  Its contents start undefined.  A reservation counts as held for
 * destroy (-EBUSY) and is not a value for release (-EINVAL).
 * @return 0; -EINVAL NULL cache, key or buf, klen 0 or > 4096, vlen 0;
 *         -E2BIG vlen > max_bytes; -ENOMEM, -EIO or a region's -errno as
 *         for put.  *buf untouched on failure.
 */
int vrange_cache_reserve(vrange_cache *c, const void *key, size_t klen,
			 size_t vlen, void **buf);

/**
 * Publish a reserved buffer as the key's value, exactly as vrange_cache_put
 * would with those bytes (replaces, starts released, enforces max_bytes).
 * The buffer must not be touched afterwards unless held through get.
 * @param buf exactly the pointer reserve returned.
 * @return 0; -EINVAL NULL cache or a pointer that is not an open
 *         reservation of this cache; -ENOMEM no memory for the key's table
 *         (the reservation stays open: commit again or abort).
 */
int vrange_cache_commit(vrange_cache *c, void *buf);

/**
 * Drop a reservation without publishing it; the key's current entry, if
 * any, is unchanged.
 * @return 0; -EINVAL NULL cache or not an open reservation of this cache.
 */
int vrange_cache_abort(vrange_cache *c, void *buf);

/** Counters returned by vrange_cache_get_stats(); later versions append. */
struct vrange_cache_stats {
	size_t struct_size;       /**< set by the caller: sizeof(struct vrange_cache_stats) */
	uint64_t entries;         /**< entries not yet found purged */
	uint64_t value_bytes;     /**< sum of their vlen */
	uint64_t resident_bytes;  /**< pages given to values plus bookkeeping */
	uint64_t hits;            /**< gets that returned a value */
	uint64_t misses;          /**< gets that returned -ENOENT */
	uint64_t purged_entries;  /**< entries found purged (by get or the cache) */
	uint64_t evictions;       /**< entries evicted to keep under max_bytes */
};

/**
 * Read a cache's counters.  Reads out->struct_size first and fills only
 * the fields that fit in it.
 * @return 0; -EINVAL NULL cache or out, struct_size smaller than the first
 *         layout.
 */
int vrange_cache_get_stats(vrange_cache *c, struct vrange_cache_stats *out);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* VRANGE_H */
