/* SPDX-License-Identifier: MIT */
/*
 * sigbus_fixup.h - stale SIGBUS markers left by another process (internal).
 *
 * A purge poisons the purged pages in this process's SIGBUS-mode mappings
 * (regions, and application mappings passed to vrange()).
 * When another process that shares the file then marks those pages
 * non-volatile, it cannot clear the markers in our page tables; the next
 * touch here raises SIGBUS on a page that is ordinary data again.  A SIGBUS
 * handler of the library, installed with the first SIGBUS-mode region or
 * application mapping, tells the two apart: a page the shared state no
 * longer counts as purged gets its marker cleared and the access is
 * retried; every other SIGBUS goes on to the handler that was there before
 * (or the default).
 * An application that installs its own SIGBUS handler afterwards replaces
 * this one; its handler then also sees such stale signals.
 */
#ifndef VRANGE_SIGBUS_FIXUP_H
#define VRANGE_SIGBUS_FIXUP_H

#include "env.h"

/* Install the handler once (idempotent, thread-safe). */
void sigbus_fixup_install(void) VR_HIDDEN;

#endif
