/* SPDX-License-Identifier: MIT */
/*
 * demo_cgroup.h - run a child inside a fresh memory cgroup with a hard
 * limit, for the demonstration programs (v1 memory controller first, else
 * cgroup v2 with swap off).  Needs root.
 */
#ifndef VRANGE_DEMO_CGROUP_H
#define VRANGE_DEMO_CGROUP_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int demo_write(const char *dir, const char *file, const char *val)
{
	char path[4096];
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* Mount point of the v1 memory hierarchy or of cgroup2, from mountinfo. */
static inline bool demo_find_mount(bool v2, char *out, size_t n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char mnt[1024], fstype[64], super[512];
		const char *sep = strstr(line, " - ");

		if (!sep || sscanf(line, "%*s %*s %*s %*s %1023s", mnt) != 1 ||
		    sscanf(sep + 3, "%63s %*s %511s", fstype, super) != 2)
			continue;
		/* A mount point longer than out is no answer (never cut). */
		if ((v2 ? !strcmp(fstype, "cgroup2")
			: !strcmp(fstype, "cgroup") && strstr(super, "memory")) &&
		    strlen(mnt) < n) {
			memcpy(out, mnt, strlen(mnt) + 1);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* A memory cgroup named prefix-<pid> limited to limit bytes, in dir;
 * *v2 (if not NULL) tells which hierarchy.  0, or -1 with a message in
 * why. */
static inline int demo_cgroup_make(uint64_t limit, const char *prefix, char *dir,
				   size_t n, bool *v2, char *why, size_t wn)
{
	char mnt[1024], val[32];
	int r;

	snprintf(val, sizeof(val), "%llu", (unsigned long long)limit);
	if (demo_find_mount(false, mnt, sizeof(mnt))) {
		snprintf(dir, n, "%s/%s-%d", mnt, prefix, (int)getpid());
		if (mkdir(dir, 0755) == 0) {
			r = demo_write(dir, "memory.limit_in_bytes", val);
			if (r == 0) {
				if (v2)
					*v2 = false;
				return 0;
			}
			rmdir(dir);
			snprintf(why, wn, "memory.limit_in_bytes: %s", strerror(-r));
		} else {
			snprintf(why, wn, "mkdir %.300s: %s", dir, strerror(errno));
		}
	}
	if (demo_find_mount(true, mnt, sizeof(mnt))) {
		demo_write(mnt, "cgroup.subtree_control", "+memory");
		snprintf(dir, n, "%s/%s-%d", mnt, prefix, (int)getpid());
		if (mkdir(dir, 0755) == 0) {
			r = demo_write(dir, "memory.max", val);
			if (r == 0) {
				demo_write(dir, "memory.swap.max", "0");
				if (v2)
					*v2 = true;
				return 0;
			}
			rmdir(dir);
			snprintf(why, wn, "cgroup v2 memory.max: %s", strerror(-r));
		} else if (!*why) {
			snprintf(why, wn, "mkdir %.300s: %s", dir, strerror(errno));
		}
	}
	if (!*why)
		snprintf(why, wn, "no memory cgroup hierarchy mounted");
	return -1;
}

static inline void demo_cgroup_remove(const char *dir)
{
	/* A killed child's memory is uncharged asynchronously: retry a bit. */
	for (int i = 0; i < 100 && rmdir(dir) < 0 && errno == EBUSY; i++)
		usleep(20000);
}

/*
 * Move the calling process into the cgroup at dir.  The child does this
 * itself, first thing after fork: then the library (and its pressure
 * monitor) is first used inside the cgroup whatever the parent does
 * meanwhile.  (A process moved later is followed by the monitor within a
 * second, but a cache filled and an allocation made in that second would
 * race it.)
 */
static inline int demo_cgroup_enter(const char *dir)
{
	char pidstr[32];

	snprintf(pidstr, sizeof(pidstr), "%d", (int)getpid());
	return demo_write(dir, "cgroup.procs", pidstr);
}

/*
 * Fork a child that starts only once it is inside a new limited cgroup
 * (it enters the cgroup itself; exit status 4 if it cannot).  Returns 0
 * in the child; the child's pid in the parent (dir names the cgroup, for
 * demo_cgroup_remove after waiting); -1 with why on failure.
 */
static inline pid_t demo_cgroup_fork(uint64_t limit, const char *prefix, char *dir,
				     size_t n, char *why, size_t wn)
{
	pid_t pid;

	if (demo_cgroup_make(limit, prefix, dir, n, NULL, why, wn) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		if (demo_cgroup_enter(dir) < 0)
			_exit(4);
		return 0;
	}
	if (pid < 0) {
		snprintf(why, wn, "fork: %s", strerror(errno));
		demo_cgroup_remove(dir);
	}
	return pid;
}

#endif
