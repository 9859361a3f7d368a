/* SPDX-License-Identifier: MIT */
/*
 * coordinator.h - is `vrangectl coordinate` looking after this user's
 * library files? (internal; the tool uses it too)
 *
 * The coordinator listens on the abstract unix socket
 * "@vrange-coordinator-<uid>".  Anyone can bind an abstract name, so the
 * name proves nothing: a process believes in a coordinator only when the
 * kernel says (SO_PEERCRED of the listening socket) that it belongs to the
 * process's own effective user or to root.  Something another user created
 * is never obeyed.  The check is one connect; its answer is kept for a
 * quarter second, so a coordinator that died is noticed within that.
 */
#ifndef VRANGE_COORDINATOR_H
#define VRANGE_COORDINATOR_H

#include <stdbool.h>
#include <sys/types.h>

#include "env.h"

/* The abstract address for uid (sun_path[0] = 0); its length for bind. */
struct sockaddr_un;
unsigned int coord_address(uid_t uid, struct sockaddr_un *sa) VR_HIDDEN;

/* A coordinator of our user (or root) is listening now (cached 250 ms). */
bool coord_present(void) VR_HIDDEN;

/* The same check, uncached; *owner gets the listener's uid (or -1). */
bool coord_check(uid_t uid, uid_t *owner) VR_HIDDEN;

#endif
