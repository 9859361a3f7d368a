/* SPDX-License-Identifier: MIT */
/*
 * stats_abi.h - the layouts of struct vrange_stats callers can hold.
 *
 * struct vrange_stats as LIBVRANGE_0.1 first published it ends after
 * access_fallback (128 bytes).  sigbus_fallbacks and sigbus_fallback were
 * appended later under the same version node and with no size, so a binary
 * linked against 0.1 holds either layout; the smaller is the one every one
 * of them can hold.  vrange_get_stats@LIBVRANGE_0.1 (stats_compat.c) writes
 * exactly that much, and it is the smallest size vrange_get_stats_sized()
 * accepts.  docs/abi.md has the rules.
 */
#ifndef VRANGE_STATS_ABI_H
#define VRANGE_STATS_ABI_H

#include <stddef.h>

#include "vrange.h"

#define VR_STATS_SIZE_0_1 offsetof(struct vrange_stats, sigbus_fallbacks)
_Static_assert(VR_STATS_SIZE_0_1 == 128,
	       "the 0.1 layout of struct vrange_stats moved");

#endif
