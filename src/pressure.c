/* SPDX-License-Identifier: MIT */
/* pressure.c - placeholder until the monitor lands. */
#include <errno.h>
#include <string.h>

#include "pressure.h"
#include "vrange.h"

void pressure_autostart(void)
{
}

void pressure_set_budget(size_t bytes)
{
	(void)bytes;
}

void pressure_fill_stats(struct vrange_stats *out)
{
	strcpy(out->pressure_source, "none");
}

int vrange_monitor_start(const struct vrange_monitor_opts *opts)
{
	(void)opts;
	return -ENOSYS;
}

int vrange_monitor_stop(void)
{
	return 0;
}

int vrange_set_budget(size_t bytes)
{
	pressure_set_budget(bytes);
	return 0;
}
