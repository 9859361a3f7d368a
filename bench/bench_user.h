/* SPDX-License-Identifier: MIT */
/*
 * bench_user.h - run a benchmark's processes as a uid of the run's own.
 *
 * A coordinator serves every process of its uid: as root it would reach
 * (and be obeyed by) whatever else runs as root on the machine.  So the
 * benchmarks that start one run it, and the processes it serves, as a
 * fresh uid.  Dumpable again after the change, as an exec'd process of
 * that user is, so that the coordinator may read /proc/<pid>/fd.
 */
#ifndef VRANGE_BENCH_USER_H
#define VRANGE_BENCH_USER_H

#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * Become uid (and gid uid); _exit(126) if that is refused.  sys_nice:
 * keep CAP_SYS_NICE as an ambient capability through the exec, as a
 * system unit's User= with AmbientCapabilities=CAP_SYS_NICE gives it, so
 * the coordinator may make itself real-time as a root one would (raising
 * RLIMIT_RTPRIO instead needs CAP_SYS_RESOURCE, which not every root has).
 */
static inline void bench_become_user(uid_t uid, bool sys_nice)
{
	if (sys_nice && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		_exit(126);
	if (setgid(uid) < 0 || setuid(uid) < 0)
		_exit(126);
	prctl(PR_SET_DUMPABLE, 1);
	if (sys_nice) {
		struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
		struct __user_cap_data_struct d[2];

		memset(d, 0, sizeof(d));
		d[0].permitted = d[0].effective = d[0].inheritable = 1u << CAP_SYS_NICE;
		if (syscall(SYS_capset, &h, d) < 0 ||
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_NICE, 0, 0) < 0)
			fprintf(stderr, "CAP_SYS_NICE not kept: %s\n", strerror(errno));
	}
}

#endif
