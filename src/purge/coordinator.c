/* SPDX-License-Identifier: MIT */
/*
 * coordinator.c - recognise a real `vrangectl coordinate` (see the header):
 * an abstract socket whose listener the kernel vouches for.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "coordinator.h"

#define CACHE_NS 250000000ull

unsigned int coord_address(uid_t uid, struct sockaddr_un *sa)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1,
		     "vrange-coordinator-%u", (unsigned int)uid);
	return (unsigned int)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

bool coord_check(uid_t uid, uid_t *owner)
{
	struct sockaddr_un sa;
	struct ucred cr;
	socklen_t len = sizeof(cr);
	unsigned int alen = coord_address(uid, &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	bool ok = false;

	if (owner)
		*owner = (uid_t)-1;
	if (fd < 0)
		return false;
	/* Non-blocking: a listener that does not accept cannot stall us (a
	 * full backlog is EAGAIN, and then we look after ourselves). */
	if (connect(fd, (struct sockaddr *)&sa, alen) == 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
		if (owner)
			*owner = cr.uid;
		ok = cr.uid == uid || cr.uid == 0;
	}
	close(fd);
	return ok;
}

bool coord_present(void)
{
	static _Atomic uint64_t checked_ns;
	static _Atomic bool present;
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (now - atomic_load(&checked_ns) < CACHE_NS && atomic_load(&checked_ns))
		return atomic_load(&present);
	atomic_store(&present, coord_check(geteuid(), NULL));
	atomic_store(&checked_ns, now);
	return atomic_load(&present);
}
