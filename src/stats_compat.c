/* SPDX-License-Identifier: MIT */
/*
 * stats_compat.c - vrange_get_stats@LIBVRANGE_0.1, the entry point binaries
 * linked against 0.1 call.  The header's vrange_get_stats() is now an inline
 * that passes its struct's size to vrange_get_stats_sized(); a binary built
 * before it calls this symbol, which writes the 0.1 layout (stats_abi.h) and
 * not one byte more.  A non-default version (one '@'): the link editor binds
 * nothing new to it.
 *
 * Only libvrange.so (and its fault-injection twin) is built with this file:
 * the version node it names exists in their map alone, not in the shim's or
 * a program's.
 */
#include "stats_abi.h"

int compat_get_stats_0_1(struct vrange_stats *out)
	__attribute__((visibility("default")));
__asm__(".symver compat_get_stats_0_1, vrange_get_stats@LIBVRANGE_0.1");

int compat_get_stats_0_1(struct vrange_stats *out)
{
	return vrange_get_stats_sized(out, VR_STATS_SIZE_0_1);
}
