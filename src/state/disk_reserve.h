/* SPDX-License-Identifier: MIT */
/* disk_reserve.h - the worker that keeps free space on file systems holding
 * volatile disk ranges (disk_reserve.c). */
#ifndef VRANGE_DISK_RESERVE_H
#define VRANGE_DISK_RESERVE_H

#include "env.h"

/* A disk file was marked volatile: make sure the worker watches.  One
 * atomic load when it already does; never waits for it. */
void disk_reserve_kick(void) VR_HIDDEN;

#endif
