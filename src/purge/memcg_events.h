/* SPDX-License-Identifier: MIT */
/*
 * memcg_events.h - the kernel's memory-pressure events, armed on a given
 * cgroup: shared by the in-process monitor (pressure.c, on its own cgroup)
 * and `vrangectl coordinate` (on the cgroup of every group it serves).
 *
 *  - cgroup v1: an eventfd that fires when memory.usage_in_bytes crosses
 *    a threshold (either way), through cgroup.event_control.
 *  - cgroup v2 and /proc/pressure: a PSI "some" trigger; POLLPRI when it
 *    fires, POLLERR when its cgroup is gone.
 *  - cgroup v2: memory.events, POLLPRI on every change once read.
 *
 * All descriptors are close-on-exec; every function returns a descriptor
 * or 0, or -errno.
 */
#ifndef VRANGE_MEMCG_EVENTS_H
#define VRANGE_MEMCG_EVENTS_H

#include <stdint.h>

#include "env.h"

/* PSI: the kernel takes windows from 500 ms to 10 s; unprivileged (and
 * some sandboxed root) writers only multiples of 2 s (Linux 6.5+). */
#define MCG_PSI_WIN_MIN_US 500000u
#define MCG_PSI_WIN_MAX_US 10000000u

/* Register efd (an eventfd) on the cgroup.event_control ctl_fd for
 * target_fd with arg ("<bytes>" for a usage threshold, "medium" for a
 * memory.pressure_level). */
int mcg_v1_register(int ctl_fd, int efd, int target_fd, const char *arg) VR_HIDDEN;

/* A new eventfd (non-blocking) that fires when the usage of the v1 cgroup
 * whose memory.usage_in_bytes is open as usage_fd crosses at bytes. */
int mcg_v1_threshold(const char *dir, int usage_fd, uint64_t at) VR_HIDDEN;

/* Write a "some" trigger to fd (a memory.pressure file open O_RDWR),
 * stepping the window up from win_us to what the kernel accepts (the stall
 * is cut to half a window if longer).  The window used is in *used_us. */
int mcg_psi_write(int fd, unsigned int stall_us, unsigned int win_us,
		  unsigned int *used_us) VR_HIDDEN;

/* Open dir/memory.pressure and arm a trigger on it (mcg_psi_write). */
int mcg_psi_open(const char *dir, unsigned int stall_us, unsigned int win_us) VR_HIDDEN;

/* dir/memory.events, read once so that its next change reports POLLPRI. */
int mcg_v2_events_open(const char *dir) VR_HIDDEN;

/* Read an open memory.events again (re-arms POLLPRI). */
void mcg_v2_events_rearm(int fd) VR_HIDDEN;

#endif
