/* SPDX-License-Identifier: MIT */
/*
 * public.h - force-included first in every library source (see
 * src/meson.build): the library builds with -fvisibility=hidden, and the
 * public declarations of vrange.h are the one set that must stay visible.
 */
/* vrange.h's inline vrange_get_stats() is for callers; the library defines
 * the exported 0.1 entry point of that name (vrange.c). */
#define VRANGE_BUILDING_LIBRARY 1
#pragma GCC visibility push(default)
#include "vrange.h"
#pragma GCC visibility pop
