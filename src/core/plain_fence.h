/* SPDX-License-Identifier: MIT */
/*
 * plain_fence.h - the other side of a plain mark (internal).
 *
 * A plain mark turns a page word in no state volatile with plain stores,
 * no locked instruction (page_words_fast.h, docs/design.md "The plain
 * mark").  What a locked instruction gave the marking thread - its stores
 * seen before its next loads - the few that must order against it get
 * here instead, on their side: membarrier(2)'s global expedited command
 * runs a full barrier on every CPU that runs a thread of a process that
 * registered for it.  Such a process may mark plainly; any process may
 * fence.  Where the command is refused, a fence is a full barrier of our
 * own and a millisecond's wait (a store leaves the buffer of a running
 * processor long before that), and this process marks with the locked
 * instruction.
 */
#ifndef VRANGE_PLAIN_FENCE_H
#define VRANGE_PLAIN_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef VR_HIDDEN
#define VR_HIDDEN __attribute__((visibility("hidden")))
#endif

/* Register this process (at start-up, and again in a fork child: the
 * registration belongs to the address space).  allowed false
 * (VRANGE_PLAIN_MARKS=0): never mark plainly, fence still. */
void plain_fence_init(bool allowed) VR_HIDDEN;

/* Whether this process's marks may be plain. */
extern _Atomic bool plain_marks VR_HIDDEN;
static inline bool plain_marks_on(void)
{
	return __atomic_load_n((const bool *)&plain_marks, __ATOMIC_RELAXED);
}

/* "" or why they are not (for vrange_get_stats). */
const char *plain_marks_off_why(void) VR_HIDDEN;

/* Whether this process's fence is the system call (not refused so far):
 * such a process lets others mark plainly in the areas it formats or
 * holds (a fence costs it microseconds, not the fallback's millisecond). */
bool plain_fence_cheap(void) VR_HIDDEN;

/* Every plain mark's stores made before the call are seen after it, and
 * every plain mark begun after it sees the caller's stores made before. */
void plain_fence(void) VR_HIDDEN;

/* Who a stripe's owner is, as the stripe records it when claimed: the
 * process, its start time and its pid namespace, so that a purge that
 * finds a plain mark under way for too long can tell a dead owner. */
struct plain_owner {
	int32_t pid;
	uint32_t pid_ns;
	uint64_t start;
};
void plain_owner_self(struct plain_owner *out) VR_HIDDEN;

/* 1 the owner is gone, 0 it lives (or this process cannot tell). */
int plain_owner_gone(const struct plain_owner *o) VR_HIDDEN;

#endif
