/* SPDX-License-Identifier: MIT */
/* shared_file.c - placeholder until shared state lands: process-local. */
#include <errno.h>
#include <unistd.h>

#include "shared_file.h"

int vshared_format(int fd, uint64_t user_size)
{
	return ftruncate(fd, (off_t)user_size) < 0 ? -errno : 0;
}

int vshared_probe(int fd, uint64_t *user_size)
{
	(void)fd;
	(void)user_size;
	return 0;
}
