/* SPDX-License-Identifier: MIT */
/* plain_fence.c - the other side of a plain mark (see plain_fence.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "plain_fence.h"

_Atomic bool plain_marks;
static _Atomic int fence_works = -1; /* -1 not tried, 0 refused, 1 works */
static char why[32] = "not started";
static struct plain_owner self;
static _Atomic bool self_known;

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

/* The state letter and start time (clock ticks after boot: the 22nd
 * field) of /proc/<path>/stat; false if unreadable.  Only open, read and
 * close: async-signal-safe. */
static bool read_stat(const char *path, char *state, uint64_t *start)
{
	char buf[512];
	const char *p;
	ssize_t n;
	int fd, field;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* The name may hold anything: count fields after its last ')'. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return false;
	*state = p[2];
	*start = 0;
	for (field = 2; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	while (*p >= '0' && *p <= '9')
		*start = *start * 10 + (uint64_t)(*p++ - '0');
	return true;
}

static uint64_t start_time(int32_t pid)
{
	char path[40], state;
	uint64_t start;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return read_stat(path, &state, &start) ? start : 0;
}

/* Some thread of pid is not a zombie: the process may still run code (its
 * first thread may have exited alone, a zombie while the others run). */
static bool any_thread_runs(int32_t pid)
{
	char path[64], state;
	struct dirent *e;
	uint64_t start;
	bool runs = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return true; /* cannot tell */
	while (!runs && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
		runs = read_stat(path, &state, &start) && state != 'Z' && state != 'X';
	}
	closedir(d);
	return runs;
}

static uint32_t pid_ns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

static void know_self(void)
{
	self.pid = (int32_t)getpid();
	self.pid_ns = pid_ns();
	self.start = start_time(self.pid);
	atomic_store(&self_known, true);
}

void plain_fence_init(bool allowed)
{
	bool fence = membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
	bool reg = fence && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;

	if (!reg) {
		const char *name = strerrorname_np(errno);

		if (name)
			snprintf(why, sizeof(why), "membarrier: %s", name);
		else
			snprintf(why, sizeof(why), "membarrier: error %d", errno);
	}
	else if (!allowed)
		snprintf(why, sizeof(why), "VRANGE_PLAIN_MARKS=0");
	else
		why[0] = '\0';
	atomic_store(&fence_works, fence ? 1 : 0);
	know_self();
	atomic_store(&plain_marks, reg && allowed);
}

const char *plain_marks_off_why(void)
{
	return why;
}

bool plain_fence_cheap(void)
{
	return atomic_load_explicit(&fence_works, memory_order_relaxed) != 0;
}

void plain_fence(void)
{
	int works = atomic_load(&fence_works);

	if (works != 0) {
		if (membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) {
			atomic_store(&fence_works, 1);
			return;
		}
		atomic_store(&fence_works, 0);
	}
	/* Refused here (a seccomp filter): ours, and time for theirs. */
	atomic_thread_fence(memory_order_seq_cst);
	nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	atomic_thread_fence(memory_order_seq_cst);
}

void plain_owner_self(struct plain_owner *out)
{
	/* A fork child whose start-up has not run yet (or never will: a
	 * test's own copy of this file) is not its parent. */
	if (!atomic_load(&self_known) || self.pid != (int32_t)getpid())
		know_self();
	*out = self;
}

int plain_owner_gone(const struct plain_owner *o)
{
	uint64_t now;

	/* Another pid namespace's number means nothing here: assume alive. */
	if (!o->pid || !o->start || o->pid_ns != pid_ns())
		return 0;
	if (kill(o->pid, 0) < 0 && errno == ESRCH)
		return 1;
	now = start_time(o->pid);
	if (now && now != o->start)
		return 1; /* the number went to another process */
	/* Dead but not yet reaped by its parent: every thread a zombie. */
	return now && !any_thread_runs(o->pid);
}
