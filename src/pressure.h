/* SPDX-License-Identifier: MIT */
/* pressure.h - the monitor thread: pressure sources, policy, budget. */
#ifndef VRANGE_PRESSURE_H
#define VRANGE_PRESSURE_H

#include <stddef.h>

#include "env.h"

struct vrange_stats;

/* Start the monitor with default options, as at first use; errors are only
 * logged (VRANGE_DEBUG): the library works without it. */
void pressure_autostart(void) VR_HIDDEN;

/* Set the budget (0 = none) and wake the monitor to enforce it. */
void pressure_set_budget(size_t bytes) VR_HIDDEN;

/* Copy the name of the pressure source in use into out->pressure_source. */
void pressure_fill_stats(struct vrange_stats *out) VR_HIDDEN;

#endif
