/* SPDX-License-Identifier: MIT */
/* shmem.h - is this descriptor a shared-memory (tmpfs/memfd) file? */
#ifndef VRANGE_SHMEM_H
#define VRANGE_SHMEM_H

#include <sys/stat.h>

#include "env.h"

/* fstat fd into *st and check it is a regular tmpfs/memfd file.
 * 0, -EBADF (bad fd) or -EOPNOTSUPP (anything else). */
int shmem_check_fd(int fd, struct stat *st) VR_HIDDEN;

/* The second half of shmem_check_fd, for a caller that has st already. */
int shmem_check_kind(int fd, const struct stat *st) VR_HIDDEN;

#endif
