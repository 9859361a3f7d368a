/* SPDX-License-Identifier: MIT */
/*
 * shared_file.h - files this library creates keep their volatile state
 * inside the file, shared by every process that maps it (internal).
 *
 * Layout: [user area: user_size bytes, page-rounded][metadata].  The
 * metadata starts with a header page and holds the range tree's arena and a
 * process-shared robust lock.  Nothing outside the file names it, so only a
 * process that already holds the file can reach the state.
 */
#ifndef VRANGE_SHARED_FILE_H
#define VRANGE_SHARED_FILE_H

#include <stdint.h>

#include "env.h"

/*
 * Make fd - a tmpfs/memfd file the library created, empty or of user_size
 * bytes - a library file for user_size bytes of user data: the file grows
 * by the metadata and the metadata is formatted.  0 or -errno.
 */
int vshared_format(int fd, uint64_t user_size) VR_HIDDEN;

/*
 * Is fd a library file?  1 and *user_size filled, 0 if it is a foreign
 * file, -errno on failure (-EIO if its metadata is corrupt).
 */
int vshared_probe(int fd, uint64_t *user_size) VR_HIDDEN;

#endif
