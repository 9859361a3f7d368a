/* SPDX-License-Identifier: MIT */
/*
 * vma_query.c - ask the kernel what is mapped at an address.  Only the slow
 * paths use it: classifying memory vrange() sees for the first time, and
 * checking, just before a purge discards anonymous memory, that the address
 * still holds what was marked.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "vma_query.h"

/* Linux 6.11 uapi (linux/fs.h); our headers are older. */
struct vr_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset;
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	uint32_t vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define VR_PROCMAP_QUERY _IOWR('f', 17, struct vr_procmap_query)
#define VR_PMQ_READABLE 0x01u
#define VR_PMQ_WRITABLE 0x02u
#define VR_PMQ_SHARED 0x08u
#define VR_PMQ_COVERING_OR_NEXT 0x10u

static _Atomic int no_ioctl; /* the kernel lacks PROCMAP_QUERY */

/*
 * /proc/self/maps, opened once: the per-call check of application
 * shared-file mappings asks on every vrange(), and open + close would cost
 * more than the question.  The descriptor names the address space of the
 * process that opened it, so a fork child drops it (vma_query_forget).
 * -1: not open.
 */
static _Atomic int maps_fd = -1;

static int query_ioctl(int fd, uintptr_t addr, bool next, bool named,
		       struct vma *out)
{
	struct vr_procmap_query q = {
		.size = sizeof(q),
		.query_flags = next ? VR_PMQ_COVERING_OR_NEXT : 0,
		.query_addr = addr,
		.vma_name_addr = named ? (uintptr_t)out->name : 0,
		.vma_name_size = named ? sizeof(out->name) : 0,
	};

	if (ioctl(fd, VR_PROCMAP_QUERY, &q) < 0)
		return -errno;
	if (q.vma_name_size == 0)
		out->name[0] = '\0';
	out->start = q.vma_start;
	out->end = q.vma_end;
	out->offset = q.vma_offset;
	out->inode = q.inode;
	out->dev = makedev(q.dev_major, q.dev_minor);
	out->shared = q.vma_flags & VR_PMQ_SHARED;
	out->readable = q.vma_flags & VR_PMQ_READABLE;
	out->writable = q.vma_flags & VR_PMQ_WRITABLE;
	return 0;
}

static int parse_line(const char *line, uintptr_t addr, bool next, struct vma *out)
{
	unsigned long long start, end, off, ino;
	unsigned int maj, min;
	char perms[8];
	int name_at = 0;

	if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms,
		   &off, &maj, &min, &ino, &name_at) < 7)
		return -EIO;
	if (addr >= end || (addr < start && !next))
		return -ENOENT;
	out->start = start;
	out->end = end;
	out->offset = off;
	out->inode = ino;
	out->dev = makedev(maj, min);
	out->readable = perms[0] == 'r';
	out->writable = perms[1] == 'w';
	out->shared = perms[3] == 's';
	snprintf(out->name, sizeof(out->name), "%s", name_at ? line + name_at : "");
	out->name[strcspn(out->name, "\n")] = '\0';
	return 0;
}

/* Without the ioctl: a fresh read of the text (a cached descriptor would
 * need seeking back, and two threads would share its offset). */
static int query_parse(uintptr_t addr, bool next, struct vma *out)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (r == -ENOENT && fgets(line, sizeof(line), f))
		r = parse_line(line, addr, next, out);
	fclose(f);
	return r == -EIO ? -ENOENT : r;
}

static int cached_maps_fd(void)
{
	int fd = atomic_load(&maps_fd), nfd, expect = -1;

	if (fd >= 0)
		return fd;
	nfd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (nfd < 0)
		return -errno;
	if (atomic_compare_exchange_strong(&maps_fd, &expect, nfd))
		return nfd;
	close(nfd); /* another thread was first */
	return expect;
}

/*
 * The ioctl on the cached descriptor.  The application may have closed
 * that number, or closed and reused it for a file of its own: an answer
 * other than "nothing there" is asked again once on a fresh descriptor,
 * which then replaces the cached one (the old number is not ours to close).
 */
static int query_cached(uintptr_t addr, bool next, bool named, struct vma *out)
{
	int fd = cached_maps_fd(), r, nfd;

	if (fd < 0)
		return fd;
	r = query_ioctl(fd, addr, next, named, out);
	/* Out of memory or interrupted says nothing about the descriptor:
	 * reopening would leave the cached one behind for good. */
	if (r == 0 || r == -ENOENT || r == -ENAMETOOLONG || r == -ENOMEM ||
	    r == -EINTR || r == -EAGAIN)
		return r;
	nfd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (nfd < 0)
		return -errno;
	r = query_ioctl(nfd, addr, next, named, out);
	if (r == -ENOTTY || !atomic_compare_exchange_strong(&maps_fd, &fd, nfd))
		close(nfd);
	return r;
}

static int query(uintptr_t addr, bool next, struct vma *out)
{
	int r = -ENOTTY;

	if (!atomic_load_explicit(&no_ioctl, memory_order_relaxed)) {
		r = query_cached(addr, next, true, out);
		if (r == -ENAMETOOLONG) /* a path longer than we keep */
			r = query_cached(addr, next, false, out);
		/* Out of memory or interrupted: we do not know, and "nothing
		 * mapped" would make callers forget live state. */
		if (r == -ENOMEM || r == -EINTR || r == -EAGAIN)
			return r;
		if (r < 0 && r != -ENOTTY)
			return -ENOENT; /* nothing mapped there */
	}
	if (r == -ENOTTY) {
		atomic_store(&no_ioctl, 1);
		r = query_parse(addr, next, out);
	}
	return r;
}

int vma_query(uintptr_t addr, struct vma *out)
{
	return query(addr, false, out);
}

int vma_query_no_stdio(uintptr_t addr, struct vma *out)
{
	int r;

	if (atomic_load_explicit(&no_ioctl, memory_order_relaxed))
		return -ENOTTY;
	r = query_cached(addr, false, true, out);
	if (r == -ENAMETOOLONG)
		r = query_cached(addr, false, false, out);
	if (r == -ENOTTY)
		atomic_store(&no_ioctl, 1);
	else if (r < 0 && r != -ENOMEM && r != -EINTR && r != -EAGAIN)
		r = -ENOENT;
	return r;
}

int vma_query_next(uintptr_t addr, struct vma *out)
{
	return query(addr, true, out);
}

void vma_query_forget(void)
{
	int fd = atomic_exchange(&maps_fd, -1);

	if (fd >= 0)
		close(fd);
}
