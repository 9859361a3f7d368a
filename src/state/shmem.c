/* SPDX-License-Identifier: MIT */
/* shmem.c - recognise shared-memory files: only their pages can be punched
 * out from under every mapping at once, which is what purging needs. */
#include <errno.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include "shmem.h"

int shmem_check_kind(int fd, const struct stat *st)
{
	struct statfs sfs;

	if (!S_ISREG(st->st_mode))
		return -EOPNOTSUPP;
	if (fstatfs(fd, &sfs) < 0)
		return -EBADF;
	/* memfds live on the kernel's internal tmpfs mount: same magic. */
	if (sfs.f_type != TMPFS_MAGIC)
		return -EOPNOTSUPP;
	return 0;
}

int shmem_check_fd(int fd, struct stat *st)
{
	if (fd < 0 || fstat(fd, st) < 0)
		return -EBADF;
	return shmem_check_kind(fd, st);
}
