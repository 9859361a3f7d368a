/* SPDX-License-Identifier: MIT */
/* plain_fence.c - the other side of a plain mark (see plain_fence.h). */
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

/* The start time of pid (clock ticks after boot: /proc/<pid>/stat's 22nd
 * field), 0 if unknown.  Only open, read and close: async-signal-safe. */
static uint64_t start_time(int32_t pid)
{
	char path[40], buf[512];
	const char *p;
	uint64_t v = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The name may hold anything: count fields after its last ')'. */
	p = strrchr(buf, ')');
	for (field = 2; p && *p && field < 22; p++)
		if (*p == ' ')
			field++;
	while (p && *p >= '0' && *p <= '9')
		v = v * 10 + (uint64_t)(*p++ - '0');
	return v;
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
	return now && now != o->start;
}
