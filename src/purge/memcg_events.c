/* SPDX-License-Identifier: MIT */
/*
 * memcg_events.c - arm the kernel's memory-pressure events on a cgroup
 * (see memcg_events.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "memcg_events.h"

#define PSI_WIN_STEP_US 2000000u

int mcg_v1_register(int ctl_fd, int efd, int target_fd, const char *arg)
{
	char buf[64];
	int len = snprintf(buf, sizeof(buf), "%d %d %s", efd, target_fd, arg);

	if (write(ctl_fd, buf, (size_t)len) < 0)
		return -errno;
	return 0;
}

int mcg_v1_threshold(const char *dir, int usage_fd, uint64_t at)
{
	char path[4200], arg[32];
	int ctl, efd, r;

	snprintf(path, sizeof(path), "%s/cgroup.event_control", dir);
	ctl = open(path, O_WRONLY | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd < 0) {
		r = -errno;
		goto out;
	}
	snprintf(arg, sizeof(arg), "%" PRIu64, at);
	r = mcg_v1_register(ctl, efd, usage_fd, arg);
	if (r == 0)
		r = efd;
	else
		close(efd);
out:
	close(ctl);
	return r;
}

int mcg_psi_write(int fd, unsigned int stall_us, unsigned int win_us, unsigned int *used_us)
{
	unsigned int win = win_us;
	char buf[64];
	int r = -EINVAL;

	if (win < MCG_PSI_WIN_MIN_US)
		win = MCG_PSI_WIN_MIN_US;
	if (win > MCG_PSI_WIN_MAX_US)
		win = MCG_PSI_WIN_MAX_US;
	for (;;) {
		unsigned int s = stall_us < win ? stall_us : win / 2;
		int len = snprintf(buf, sizeof(buf), "some %u %u", s, win);

		if (write(fd, buf, (size_t)len + 1) >= 0) {
			if (used_us)
				*used_us = win;
			return 0;
		}
		r = -errno;
		if (r != -EINVAL || win >= MCG_PSI_WIN_MAX_US)
			break;
		/* Next accepted candidate: the next multiple of 2 s. */
		win = (win / PSI_WIN_STEP_US + 1) * PSI_WIN_STEP_US;
		if (win > MCG_PSI_WIN_MAX_US)
			win = MCG_PSI_WIN_MAX_US;
	}
	return r;
}

int mcg_psi_open(const char *dir, unsigned int stall_us, unsigned int win_us)
{
	char path[4200];
	int fd, r;

	snprintf(path, sizeof(path), "%s/memory.pressure", dir);
	fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = mcg_psi_write(fd, stall_us, win_us, NULL);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

void mcg_v2_events_rearm(int fd)
{
	char buf[512];

	if (pread(fd, buf, sizeof(buf), 0) < 0)
		return;
}

int mcg_v2_events_open(const char *dir)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/memory.events", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	mcg_v2_events_rearm(fd);
	return fd;
}
