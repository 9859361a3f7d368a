/* SPDX-License-Identifier: MIT */
/**
 * @file vrange.h
 * libvrange - volatile ranges for Linux programs, in userspace.
 *
 * Memory an application marks "volatile" may be discarded by the library when
 * memory runs short; marking it "non-volatile" again tells whether anything
 * was discarded meanwhile.  The contract is ../shared/API.md; this header is
 * its C form and documents each function where it is declared.
 *
 * Conventions for every function below:
 * - int/ssize_t results are >= 0 on success and -errno on failure; errno is
 *   never the only report.  No function aborts or prints on bad input.
 * - Granularity is the page (sysconf(_SC_PAGESIZE)).  Marking volatile rounds
 *   inward (a partly covered page is never made volatile); marking
 *   non-volatile and querying round outward.
 * - len == 0 is a no-op that succeeds.  A range past the end of the region or
 *   file, or whose off + len overflows, is -EINVAL and changes nothing.
 * - All functions are thread-safe; calls on different regions or files do not
 *   share a lock on the mark/unmark path.
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

/**
 * The library's version.
 * @return "MAJOR.MINOR.PATCH", a static string.  Async-signal-safe.
 */
const char *vrange_version(void);

/* ------------------------------------------------------------------------ */
/** @defgroup file File layer: volatile ranges on a shared-memory file
 *
 * State belongs to the file (device + inode): every fd and every mapping of
 * the same memfd/tmpfs//dev/shm file, dup'd or reopened, sees the same
 * ranges.  Purging punches the file; every mapping of it then reads zeros
 * there (or raises SIGBUS through regions in SIGBUS mode).
 *
 * Files created by this library (regions, ashmem-shim fds) keep their state
 * inside the file, shared by every process that maps them.  Any other
 * shared-memory file keeps process-local state in the calling process.
 * @{ */

/**
 * Mark the whole pages inside [off, off + len) of the file behind @p fd
 * volatile (rounding inward).  Already-volatile pages become the most
 * recently marked; pages purged since they were marked stay purged.
 * Costs one fstat once the file is known (the first call on a file opens
 * its state and keeps a descriptor of it until vrange_fd_forget).
 * @return 0; -EBADF bad fd; -EOPNOTSUPP not a shared-memory file;
 *         -EINVAL negative off/len, overflow, or past the end of the file;
 *         -ENOMEM no memory for the state; -EIO corrupt shared state.
 */
int vrange_fd_mark_volatile(int fd, off_t off, off_t len);

/**
 * Make every page touching [off, off + len) non-volatile (rounding outward).
 * Once this returns VRANGE_INTACT no byte of the range is discarded,
 * whatever other threads or processes purge at the same time.
 * @return VRANGE_INTACT; VRANGE_PURGED if any page of the range was purged
 *         since it was marked volatile (and that is then forgotten);
 *         -EBADF, -EOPNOTSUPP, -EINVAL as for vrange_fd_mark_volatile.
 */
int vrange_fd_mark_nonvolatile(int fd, off_t off, off_t len);

/**
 * Ask whether any page touching [off, off + len) is volatile (purged pages
 * count: they are still volatile).
 * @return 1 if any page is volatile, 0 if none; -EBADF, -EOPNOTSUPP, -EINVAL.
 */
int vrange_fd_is_volatile(int fd, off_t off, off_t len);

/**
 * Drop all state this process keeps for the file behind @p fd (its pages
 * become non-volatile and are never purged by this process).
 * @return 0; -EBADF bad fd; -ENOENT the file has no state here.
 */
int vrange_fd_forget(int fd);

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup region Region layer: memfd regions the library maps
 * @{ */

/** Opaque handle of a region: a memfd mapped shared, read-write. */
typedef struct vrange_region vrange_region;

/** Purged volatile pages read as zeros (ashmem's behaviour). */
#define VRANGE_ACCESS_ZERO (1u << 0)
/** Touching a purged volatile page raises SIGBUS with si_addr inside it. */
#define VRANGE_ACCESS_SIGBUS (1u << 1)
/* neither flag: SIGBUS where userfaultfd is usable here, else ZERO */

/**
 * Create a region: a memfd of @p size bytes (rounded up to pages) mapped
 * shared and read-write.  Nothing is made resident.  Its volatile state is
 * shared with every process that adopts the memfd.  The first region in
 * SIGBUS mode installs the library's SIGBUS handler, which chains to the
 * handler installed before it (see docs/design.md).
 * @param name  memfd name for /proc (may be NULL; truncated if too long).
 * @param size  bytes, > 0.
 * @param flags 0, VRANGE_ACCESS_ZERO or VRANGE_ACCESS_SIGBUS.
 * @param out   receives the region; untouched on failure.
 * @return 0; -EINVAL size 0, NULL out, unknown or both access flags;
 *         -EOPNOTSUPP SIGBUS asked where userfaultfd is unusable (the reason
 *         is in vrange_stats.access_fallback); -ENOMEM; other -errno from
 *         memfd_create/ftruncate/mmap.
 */
int vrange_region_create(const char *name, size_t size, unsigned int flags,
			 vrange_region **out);

/**
 * Map an existing shared-memory fd as a region (size from fstat).  The
 * region keeps its own dup of @p fd and shares file-layer state with every
 * other user of the file.
 * @return 0; -EBADF; -EOPNOTSUPP not a shared-memory file or SIGBUS
 *         unavailable; -EINVAL empty file, NULL out or bad flags; -ENOMEM.
 */
int vrange_region_adopt(int fd, unsigned int flags, vrange_region **out);

/**
 * Unmap the region, close its fd and forget its place in the purge order.
 * Not async-signal-safe.  Must not race with other calls on the same region.
 * @return 0 (also for NULL).
 */
int vrange_region_destroy(vrange_region *r);

/**
 * @return the region's mapping, or NULL for a NULL region.
 */
void *vrange_region_base(const vrange_region *r);

/**
 * @return the region's size in bytes (page-rounded), or 0 for NULL.
 */
size_t vrange_region_size(const vrange_region *r);

/**
 * @return the region's memfd (owned by the region), or -EINVAL for NULL.
 */
int vrange_region_fd(const vrange_region *r);

/**
 * @return VRANGE_ACCESS_ZERO or VRANGE_ACCESS_SIGBUS, the mode in force; 0
 *         for a NULL region.
 */
unsigned int vrange_region_access(const vrange_region *r);

/**
 * Set the purge priority of pages this region marks from now on: lower
 * priorities are purged first.  The default is 0.
 * @return 0; -EINVAL NULL region.
 */
int vrange_region_set_priority(vrange_region *r, int priority);

/**
 * Mark the whole pages inside [off, off + len) of the region volatile
 * (rounding inward).  No system call, no allocation on the fast path.
 * @return 0; -EINVAL NULL region, overflow or past the end; -ENOMEM; -EIO.
 */
int vrange_mark_volatile(vrange_region *r, size_t off, size_t len);

/**
 * Make every page touching [off, off + len) non-volatile (rounding
 * outward).  Async-signal-safe: may be called from a SIGBUS handler on the
 * page that faulted (no malloc, no lock the interrupted thread can hold);
 * after it the page faults in as a fresh zero page with no signal.
 * @return VRANGE_INTACT, VRANGE_PURGED, or -EINVAL/-EIO as above.
 */
int vrange_mark_nonvolatile(vrange_region *r, size_t off, size_t len);

/**
 * Ask whether any page touching [off, off + len) is volatile.
 * @return 1 any page volatile, 0 none; -EINVAL.
 */
int vrange_is_volatile(vrange_region *r, size_t off, size_t len);

/**
 * The address form, as in the proposed vrange() syscall: mark [addr, addr +
 * len) volatile (mode VRANGE_VOLATILE) or non-volatile (VRANGE_NONVOLATILE;
 * then *purged, if not NULL, is set to 0 or 1).  Accepts addresses inside a
 * region, and (section 5 of the contract) private anonymous memory and
 * MAP_SHARED mappings of shared-memory files.  The NONVOLATILE form is
 * async-signal-safe on memory the library already knows.
 *
 * Anonymous memory that is unmapped while volatile is forgotten: the library
 * checks before discarding that the address still holds the mapping that was
 * marked, so a later mapping at that address is never touched.  After fork()
 * the child's copy of anonymous memory is ordinary memory with no state.
 * @return 0; -EINVAL bad mode; -ENOENT range not wholly mapped (or NULL,
 *         wrapping, or partly inside a region); -EOPNOTSUPP a kind of mapping
 *         that cannot be volatile (private file mapping, other file system,
 *         device memory, [vdso]); -ENOMEM; -EIO.
 */
int vrange(void *addr, size_t len, int mode, int *purged);

/**
 * Refill callback: fill @p buf (@p len bytes, one page or more) with the
 * contents of the region at @p off.  Return 0 to install them, < 0 to give
 * the faulting thread SIGBUS.  Runs on the library's fault thread; it must
 * not destroy its own region.
 */
typedef int (*vrange_refill_fn)(vrange_region *r, size_t off, void *buf,
				size_t len, void *arg);

/**
 * Set (or with fn NULL, remove) the refill callback of a region: a thread
 * touching a purged page of a still-volatile range blocks while @p fn
 * regenerates it; the bytes are installed atomically and the page counts as
 * refilled, no longer purged.
 * @return 0; -EINVAL NULL region; -EOPNOTSUPP userfaultfd unusable here.
 */
int vrange_region_set_refill(vrange_region *r, vrange_refill_fn fn, void *arg);

/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup purge Purging, memory pressure, budget
 * @{ */

/**
 * Discard volatile pages, lowest priority first, then least recently
 * marked first, across all regions, files and mappings of the process,
 * until at least @p bytes are freed or nothing volatile is left.
 * @param bytes SIZE_MAX for everything; 0 does nothing.
 * @return bytes discarded (>= 0), or -errno.
 */
ssize_t vrange_purge(size_t bytes);

/**
 * Discard every volatile page of one region.
 * @return bytes discarded; -EINVAL NULL region.
 */
ssize_t vrange_region_purge(vrange_region *r);

/** Options for vrange_monitor_start(); later versions append fields. */
struct vrange_monitor_opts {
	size_t struct_size;         /**< sizeof(struct vrange_monitor_opts) */
	unsigned int psi_stall_us;  /**< PSI "some" stall per window; default 100000 */
	unsigned int psi_window_us; /**< default 1000000; raised to what the kernel takes */
	unsigned int purge_percent; /**< share of volatile bytes freed per event; default 25 */
	unsigned int flags;         /**< VRANGE_MONITOR_NO_PSI, VRANGE_MONITOR_NO_CGROUP */
};

/** Do not arm PSI triggers. */
#define VRANGE_MONITOR_NO_PSI (1u << 0)
/** Do not watch cgroup limits or events. */
#define VRANGE_MONITOR_NO_CGROUP (1u << 1)

/**
 * Start the pressure monitor thread (it also starts by itself with the
 * first region or file-layer call unless VRANGE_MONITOR=0).  It listens to
 * PSI, cgroup v1/v2 limits and events, and falls back to polling
 * /proc/meminfo; vrange_stats.pressure_source names what it uses ("psi",
 * "psi-cgroup", "memcg-v1", "memcg-v2", "meminfo", "none").  After fork()
 * the child has no monitor until it starts one.
 * @param opts NULL for defaults; zero fields take their defaults.
 * @return 0; -EALREADY running; -EINVAL struct_size too small or unknown
 *         flags; -errno from thread creation.
 */
int vrange_monitor_start(const struct vrange_monitor_opts *opts);

/**
 * Stop the monitor thread and wait for it.
 * @return 0, whether or not it was running.
 */
int vrange_monitor_stop(void);

/**
 * Cap the resident bytes of all library files (regions and file-layer files,
 * as st_blocks shows them).  Over budget the monitor purges volatile pages,
 * oldest first, until under it or nothing volatile is left, within a second
 * (the monitor enforces it: with VRANGE_MONITOR=0, from vrange_monitor_start
 * on).  Returns at once.  Also settable with VRANGE_BUDGET=<bytes[K|M|G]>.
 * @param bytes the cap; 0 removes it.
 * @return 0.
 */
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
	char pressure_source[32];     /**< "psi", "psi-cgroup", "memcg-v1", "meminfo", "none" */
	char access_fallback[32];     /**< "" or why SIGBUS mode is unavailable */
};

/**
 * Fill @p out with the library's counters.
 * @return 0; -EINVAL NULL out.
 */
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
