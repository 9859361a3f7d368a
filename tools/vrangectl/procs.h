/* SPDX-License-Identifier: MIT */
/*
 * procs.h - what vrangectl reads from other processes: their publication
 * (src/purge/publish.h) and, through it, the range trees of their files.
 *
 * Everything comes through /proc/<pid>/fd/<n>, which the kernel opens only
 * for a caller with ptrace-read permission on the process: processes of
 * other users (for a caller that is not root) are invisible here because
 * the kernel says so.  Everything read is checked; nothing read can make
 * the tool crash or wait (regular files read with pread, no locks taken).
 */
#ifndef VRANGECTL_PROCS_H
#define VRANGECTL_PROCS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "env.h"
#include "publish.h"

enum vc_kind { VC_REGION, VC_FILE, VC_CACHE, VC_ANON };

struct vc_range {
	uint64_t start, end;    /* bytes: file offsets, or addresses (anon) */
	bool purged;
	int32_t prio;
	uint32_t cost;          /* re-creation cost per page (volatile only) */
	uint64_t seq;
};

struct vc_object {
	enum vc_kind kind;
	char name[256];
	struct pub_file pf;
	bool readable;          /* its tree could be read */
	uint64_t size;
	uint64_t vol_pages, purged_pages; /* RT_VOLATILE, RT_PURGED */
	uint64_t resident_bytes;
	uint64_t nranges;
	int64_t oldest_age_ms;  /* -1: nothing volatile */
	struct vc_range *ranges; /* with detail */
	size_t nr;
};

struct vc_proc {
	pid_t pid;
	char comm[64];
	struct pub_hdr hdr;
	struct vc_object *obj;
	size_t nobj;
	uint64_t regions, files, caches, sigbus_regions;
	uint64_t volatile_bytes, purged_bytes, resident_bytes;
};

/* How much vc_read_proc reads. */
enum vc_depth {
	VC_TOTALS,   /* counts from the trees' headers (list) */
	VC_OBJECTS,  /* + ages and range counts (show) */
	VC_RANGES,   /* + every range (show --ranges) */
};

/*
 * Read one process.  0; -ESRCH when it does not exist, does not use the
 * library or may not be inspected (one answer for all three); -EIO for a
 * publication that does not check out or keeps changing.
 */
int vc_read_proc(pid_t pid, enum vc_depth depth, struct vc_proc *out);
void vc_proc_free(struct vc_proc *p);

/* Every process the caller can read that uses the library, by pid. */
int vc_read_all(enum vc_depth depth, struct vc_proc **out, size_t *n);
void vc_procs_free(struct vc_proc *p, size_t n);

/*
 * Open /proc/<pid>/fd/<fd> as a new open file description of the same
 * file, only if it is a regular file (never a FIFO or a device), with
 * flags (O_RDONLY / O_RDWR); st gets its fstat.  With need_write, the
 * process itself must hold it open for writing.  The descriptor or -errno.
 */
int vc_open_proc_fd(pid_t pid, int fd, int flags, bool need_write, struct stat *st);

extern const char *const vc_kind_names[];

/* Pages to bytes, saturating (counts read from outside may be anything). */
static inline uint64_t vc_bytes(uint64_t pages)
{
	return pages > (UINT64_MAX >> vr_page_shift) ? UINT64_MAX : pages << vr_page_shift;
}

#endif
