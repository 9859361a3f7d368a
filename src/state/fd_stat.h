/* SPDX-License-Identifier: MIT */
/*
 * fd_stat.h - fstat of a descriptor as the library takes it (internal).
 *
 * Where the architecture has the old fstat system call (x86-64) it is
 * taken directly: libc's fstat is fstatat(fd, "", AT_EMPTY_PATH), whose
 * empty path the kernel still parses (about 30 ns of the 230 the file
 * layer's call costs here), and an interposed fstat - the ashmem shim's,
 * which takes its own registry lock - is not asked: the library looks at
 * the file itself.
 */
#ifndef VRANGE_FD_STAT_H
#define VRANGE_FD_STAT_H

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* 0, or -1 with errno (fstat's). */
static inline int fd_stat(int fd, struct stat *st)
{
#if defined(__x86_64__) && defined(SYS_fstat)
	return (int)syscall(SYS_fstat, fd, st);
#else
	return fstat(fd, st);
#endif
}

/* Whether fd_stat() passes by interposed functions (the raw system call). */
#if defined(__x86_64__) && defined(SYS_fstat)
#define FD_STAT_RAW 1
#else
#define FD_STAT_RAW 0
#endif

#endif
