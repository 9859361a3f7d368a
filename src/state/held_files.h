/* SPDX-License-Identifier: MIT */
/*
 * held_files.h - the files this process holds (internal).
 *
 * An orphan's state (file_state.c) may keep the library's descriptor of
 * its file only while the application still holds the file itself: a
 * mapping of it or a descriptor that is not the library's.  Which files
 * those are is read from /proc/self/maps and /proc/self/fd once per
 * batch of orphans (a sweep) and only if one of them asks; each question
 * is then a binary search, so a sweep over many orphans in a process
 * holding thousands of descriptors stays linear in what is read.
 */
#ifndef VRANGE_HELD_FILES_H
#define VRANGE_HELD_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "env.h"

struct held_id {
	dev_t dev;
	ino_t ino;
	int fd; /* the descriptor it was seen through, -1 a mapping */
};

struct held_set {
	bool built, doubt; /* doubt: a list could not be read: all held */
	size_t n, cap;
	struct held_id *v; /* sorted by (dev, ino) once built */
};

/* Does this process hold the file (dev, ino) other than through the
 * descriptor own_fd (the library's own, -1 none): a mapping, or another
 * descriptor?  Reads the lists on the first question (h zeroed before);
 * doubt says yes. */
bool held_here(struct held_set *h, dev_t dev, ino_t ino, int own_fd) VR_HIDDEN;

/* Free what held_here() read. */
void held_free(struct held_set *h) VR_HIDDEN;

#endif
