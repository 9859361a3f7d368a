/* SPDX-License-Identifier: MIT */
/*
 * unmap_events.h - being told when the application unmaps memory that
 * vrange() saw (internal).
 *
 * Marking known anonymous memory makes no system call, so it cannot tell
 * whether the address still holds the mapping it knew; only the kernel can
 * say that a mapping went.  A userfaultfd opened with
 * UFFD_FEATURE_EVENT_UNMAP queues an event for every munmap (or MAP_FIXED,
 * mremap, brk shrink) of memory registered with it, and the unmapping
 * thread waits until the event is read.  A reader thread of ours reads at
 * once and stamps each event with the mark clock read after the mapping
 * was gone and before the unmapper could go on: marks older than the stamp
 * were made on the old memory, newer ones on whatever is there now.
 */
#ifndef VRANGE_UNMAP_EVENTS_H
#define VRANGE_UNMAP_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"

struct unmap_event {
	uintptr_t start, end; /* the range unmapped */
	uint64_t seq;         /* mark clock after it went */
};

/* Start the reader on uffd (opened with UFFD_FEATURE_EVENT_UNMAP): 0, or
 * -errno (then the caller must not rely on events, nor register memory
 * with that descriptor: an unread event would block munmap for good). */
int unmap_events_start(int uffd) VR_HIDDEN;

/*
 * Copy up to max events read so far, oldest first; they stay queued (and
 * unmap_events_unsettled() true) until unmap_events_done(n) says they are
 * applied.  *lost is set when the queue overflowed since the last call
 * (events were dropped: treat every known mapping as suspect).  One
 * consumer at a time (the caller holds the anonymous state's lock).
 */
size_t unmap_events_take(struct unmap_event *out, size_t max, bool *lost) VR_HIDDEN;
void unmap_events_done(size_t n) VR_HIDDEN;

/*
 * Shut the gate: until unmap_events_release(), no event is read, so no
 * munmap (or mmap(MAP_FIXED), mremap) of memory registered with us when
 * the gate shut returns, and its thread cannot map anything new in the
 * hole.  Held only around a few system calls that wait for no thread
 * (never across a lock).  One holder at a time (the anonymous lock).
 */
void unmap_events_hold(void) VR_HIDDEN;
void unmap_events_release(void) VR_HIDDEN;

/*
 * Is an event being read, or read and not yet applied?  One or two atomic
 * loads: the marking fast path asks, so that no mark goes through a table
 * entry whose memory an munmap that already returned took away.
 */
bool unmap_events_unsettled(void) VR_HIDDEN;

/* Is an event waiting to be read (an munmap is in progress)? */
bool unmap_events_pending(void) VR_HIDDEN;

/* A fork child has no reader: forget it. */
void unmap_events_forget(void) VR_HIDDEN;

#endif
