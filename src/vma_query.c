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

static _Atomic int no_ioctl; /* the kernel lacks PROCMAP_QUERY */

static int query_ioctl(int fd, uintptr_t addr, struct vma *out)
{
	struct vr_procmap_query q = {
		.size = sizeof(q),
		.query_addr = addr,
		.vma_name_addr = (uintptr_t)out->name,
		.vma_name_size = sizeof(out->name),
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

static int parse_line(const char *line, uintptr_t addr, struct vma *out)
{
	unsigned long long start, end, off, ino;
	unsigned int maj, min;
	char perms[8];
	int name_at = 0;

	if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms,
		   &off, &maj, &min, &ino, &name_at) < 7)
		return -EIO;
	if (addr < start || addr >= end)
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

static int query_parse(int fd, uintptr_t addr, struct vma *out)
{
	char line[512];
	FILE *f = fdopen(dup(fd), "r");
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (r == -ENOENT && fgets(line, sizeof(line), f))
		r = parse_line(line, addr, out);
	fclose(f);
	return r == -EIO ? -ENOENT : r;
}

int vma_query(uintptr_t addr, struct vma *out)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	int r;

	if (fd < 0)
		return -errno;
	r = no_ioctl ? -ENOTTY : query_ioctl(fd, addr, out);
	if (r == -ENOTTY) {
		no_ioctl = 1;
		r = query_parse(fd, addr, out);
	} else if (r < 0) {
		r = -ENOENT; /* nothing mapped there */
	}
	close(fd);
	return r;
}
