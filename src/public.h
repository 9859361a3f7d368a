/* SPDX-License-Identifier: MIT */
/*
 * public.h - force-included first in every library source (see
 * src/meson.build): the library builds with -fvisibility=hidden, and the
 * public declarations of vrange.h are the one set that must stay visible.
 */
#pragma GCC visibility push(default)
#include "vrange.h"
#pragma GCC visibility pop
