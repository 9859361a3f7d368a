/* SPDX-License-Identifier: MIT */
/**
 * @file vrange-sqlite.h
 * SQLite's page cache on libvrange regions.
 *
 * Call vrange_sqlite_pcache_install() before sqlite3_initialize() (before
 * the first sqlite3_open*, which initialises SQLite implicitly).  From then
 * on every connection's page cache lives in libvrange regions
 * (sqlite3_config(SQLITE_CONFIG_PCACHE2)):
 *
 * - A page SQLite holds (between xFetch and xUnpin: "pinned") is
 *   non-volatile; a page it has unpinned stays cached but is volatile, so
 *   the library may discard it under memory pressure, by budget, or by an
 *   explicit vrange_purge().  Fetching it again marks it non-volatile; if it
 *   was discarded meanwhile, the fetch is a clean miss: with createFlag 0
 *   xFetch returns NULL, otherwise it hands back the same slot with its
 *   szExtra bytes zeroed, exactly as a fresh page, and SQLite re-reads the
 *   page from the database file.  SQLite only unpins clean pages (dirty
 *   pages stay pinned by the pager until written), so nothing unwritten can
 *   be lost.  Each fetch of an unpinned page costs one mark pair: one
 *   vrange_mark_volatile at xUnpin, one vrange_mark_nonvolatile at xFetch.
 *   A page fetched while already pinned costs nothing.
 * - szExtra: the extra bytes SQLite keeps per page (its page header, with
 *   pointers) are ordinary malloc'd memory beside the slot, never volatile:
 *   they keep their content for as long as the entry is cached, pinned or
 *   not.  On every miss (new entry, recycled slot, or a slot found purged)
 *   they are zeroed, which is what SQLite takes as "a new page".
 * - cache_size (xCachesize): the number of entries kept.  Beyond it an
 *   unpinned page is recycled, least recently unpinned first; createFlag 1
 *   returns NULL when every entry is pinned, createFlag 2 grows past it.  It
 *   bounds address space and bookkeeping, not resident memory: unpinned
 *   pages are volatile and given back whenever memory runs short, so a
 *   cache_size larger than the memory available is safe here (with SQLite's
 *   default cache it is an OOM kill waiting to happen).  Resident memory is
 *   the pinned pages plus the unpinned ones nothing has purged yet, plus
 *   about 64 + szExtra bytes of bookkeeping per entry ever used.
 * - Non-purgeable caches (bPurgeable 0: in-memory and temporary databases,
 *   which no file can refill) are never marked volatile: their pages live
 *   in regions too, but only an explicit discard (xUnpin with discard,
 *   xTruncate) frees an entry.
 * - xShrink purges every volatile page of that cache now (entries stay and
 *   miss on their next fetch).  xTruncate drops entries with key >= the
 *   limit (pinned ones included, as SQLite's contract says).  xRekey moves
 *   an entry to a new key, dropping whatever entry held that key.  xUnpin
 *   with discard drops the entry at once.  A dropped entry's slot is marked
 *   volatile (in a purgeable cache) and reused by the next miss.
 * - Slots are one system page (or szPage, if larger), so a database with
 *   pages smaller than the system page uses a system page per page.
 * - Memory: the first region holds cache_size slots (rounded up to a power
 *   of two, 64 to 16384), each further one twice the last, up to 16384
 *   slots: a cache of the default size is one region (one memfd).
 *   Regions use VRANGE_ACCESS_ZERO (no userfaultfd: SQLite never touches an
 *   unpinned page, and a miss refills the whole page by reading the file).
 *
 * fork(): page buffers are MAP_SHARED memory (a memfd), not copy-on-write
 * as malloc'd memory is, and their volatile state belongs to the file: a
 * child must not use its parent's connections (SQLite's own rule), or both
 * processes would write the same page buffers.  Connections the child
 * opens itself get caches of their own.
 *
 * Thread safety: as SQLite requires, methods on different caches may run
 * concurrently; SQLite serialises calls on one cache (by the connection's or
 * the shared cache's mutex).  The counters below are atomic.
 */
#ifndef VRANGE_SQLITE_H
#define VRANGE_SQLITE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Register the libvrange page cache with SQLite
 * (sqlite3_config(SQLITE_CONFIG_PCACHE2)).  Call it before
 * sqlite3_initialize() (or after sqlite3_shutdown()), from one thread.
 * @return SQLITE_OK (0), or SQLite's error code from sqlite3_config
 *         (SQLITE_MISUSE when SQLite is already initialised).
 */
int vrange_sqlite_pcache_install(void);

/** Counters of every cache since install; see vrange_sqlite_pcache_stats. */
struct vrange_sqlite_stats {
	uint64_t caches;       /**< caches now open (xCreate - xDestroy) */
	uint64_t pages;        /**< entries now cached, all caches */
	uint64_t fetches;      /**< xFetch calls */
	uint64_t hits;         /**< fetches that found the page intact */
	uint64_t rereads;      /**< fetches that found the page purged: a miss
	                            SQLite refills by reading the file */
	uint64_t marks;        /**< vrange_mark_volatile calls */
	uint64_t unmarks;      /**< vrange_mark_nonvolatile calls */
	uint64_t shrinks;      /**< xShrink calls */
	uint64_t shrunk_bytes; /**< bytes xShrink purged */
};

/**
 * Copy the counters into @p out.
 * @return 0; -EINVAL for NULL.
 */
int vrange_sqlite_pcache_stats(struct vrange_sqlite_stats *out);

#ifdef __cplusplus
}
#endif

#endif
