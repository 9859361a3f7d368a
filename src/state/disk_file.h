/* SPDX-License-Identifier: MIT */
/*
 * disk_file.h - volatile ranges on files of real file systems (contract 9):
 * which files qualify, and the durable record of what was punched
 * (internal).
 *
 * A disk file's volatile state is kept exactly as a foreign shared-memory
 * file's (file_state.h, shared_file.h: a companion metadata memfd named by
 * the user.vrange attribute, shared by every process using the file, gone
 * with the last of them).  What a memfd never needed is the record: a
 * purge punches blocks that stay punched across crashes and remounts, so
 * before it punches it writes the pages into the file's own attribute
 * user.vrange.purged and makes that durable (fsync); a later
 * mark_nonvolatile in any process finds them there.  Whoever creates a
 * vfile for a disk file loads the record into the tree as RT_PURGED pages
 * (vfile_new), and an unmark that reports RT_PURGED pages takes them out of
 * the record again, under the file's tree lock.  docs/design.md, "Why
 * INTACT holds on disk", is the argument.
 */
#ifndef VRANGE_DISK_FILE_H
#define VRANGE_DISK_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "env.h"

/* Is fd's file on a file system other than tmpfs?  One fstatfs. */
bool disk_is_disk(int fd) VR_HIDDEN;

/*
 * Check fd (st from fstat) for the file layer on a disk file: 0 for a
 * regular file, open for writing, of a file system whose
 * fallocate(PUNCH_HOLE | KEEP_SIZE) works (probed once per file system);
 * -EBADF for a descriptor not open for writing; -EOPNOTSUPP for anything
 * else (directories, pipes, devices, /proc, file systems that do not
 * punch).
 */
int disk_check_fd(int fd, const struct stat *st) VR_HIDDEN;

/* The part of disk_check_fd a file already taken needs on every call:
 * 0, or -EBADF for a descriptor not open for writing.  One fcntl. */
int disk_check_writable(int fd) VR_HIDDEN;

/* The record holds at most this many ranges: with the header it stays
 * under 2 KiB, so it fits in ext4's one attribute block beside
 * user.vrange (168 bytes) and whatever the application keeps there. */
#define DISK_RECORD_MAX 120u

struct disk_run {
	uint64_t start, end; /* pages [start, end) */
};

/*
 * Read fd's record: the punched page ranges, sorted and disjoint, into
 * runs (room for DISK_RECORD_MAX).  The count (0: no record), or -errno
 * (-EIO: malformed; such a record is treated by callers as "everything
 * purged" where they must be safe).
 */
int disk_record_read(int fd, struct disk_run *runs) VR_HIDDEN;

/*
 * Add the n page ranges of start/end to fd's record and make it durable
 * (fsync) before returning 0.  -E2BIG when the record would exceed
 * DISK_RECORD_MAX ranges, -EOPNOTSUPP/-ENOSPC/-EPERM when the file system
 * refuses the attribute, -EIO when fsync fails: then nothing may be
 * punched.  The caller holds the file's tree lock.
 */
int disk_record_add(int fd, const uint64_t *start, const uint64_t *end,
		    uint32_t n) VR_HIDDEN;

/* Take [start, end) out of fd's record (caller holds the tree lock).  Not
 * synced: a power cut that brings a cleared entry back makes one later
 * unmark say VRANGE_PURGED over intact bytes - the safe side; the next
 * purge's fsync makes the clear durable too.  0 or -errno. */
int disk_record_clear(int fd, uint64_t start, uint64_t end) VR_HIDDEN;

/* An O_TMPFILE (read-write, close-on-exec) in the directory of disk file
 * fd, on its file system dev: a descriptor, or -1 if none can be made. */
int disk_tmpfile(int fd, dev_t dev) VR_HIDDEN;

/* Does fd carry a record?  (One fgetxattr of size 0.) */
bool disk_record_present(int fd) VR_HIDDEN;

/* fork(): the disk layer's locks (its probes, its journals, the records'
 * room) held across it, after every file lock (they are taken under
 * those), so that the child finds none held by a thread it lacks. */
void disk_fork_prepare(void) VR_HIDDEN;
void disk_fork_done(void) VR_HIDDEN;

/* Test hook (tests/test_disk.c): with VRANGE_TEST_KILL_AFTER_RECORD=1 in
 * the environment at start-up, the process kills itself with SIGKILL right
 * after the first record is durable and before the punch. */
void disk_test_after_record(void) VR_HIDDEN;

#endif
