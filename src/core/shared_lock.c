/* SPDX-License-Identifier: MIT */
/* shared_lock.c - see shared_lock.h. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shared_lock.h"

#define WAITERS SHARED_LOCK_WAITERS
#define TID_MASK 0x3fffffffu /* pid_max is at most 2^22 */
#define SLICE_MS 10u

/* This thread's word, cached: the uncontended path makes no system call. */
__thread uint64_t shared_lock_me __attribute__((tls_model("initial-exec")));

/* fork() copies the cache into a child whose thread has another id. */
static void forget_me(void)
{
	shared_lock_me = 0;
}

__attribute__((constructor)) static void shared_lock_init(void)
{
	pthread_atfork(NULL, NULL, forget_me);
}

/* The futex is the half of the word that holds the tid and waiters bit. */
static uint32_t *futex_word(struct shared_lock *l)
{
	return (uint32_t *)(void *)&l->word +
	       (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
}

/* "/proc/<tid>/stat" into buf (no snprintf: this runs in signal handlers). */
static void stat_path(char *buf, uint32_t tid)
{
	char digits[12];
	int n = 0;

	do
		digits[n++] = (char)('0' + tid % 10);
	while ((tid /= 10) && n < (int)sizeof(digits));
	memcpy(buf, "/proc/", 6);
	buf += 6;
	while (n)
		*buf++ = digits[--n];
	memcpy(buf, "/stat", 6);
}

/*
 * Read a thread's scheduling state letter and start time from its stat
 * file.  The command name may hold anything, ')' included, so the fields
 * are counted from the last ')'.  0, or -1 if unreadable.
 */
static int read_stat(const char *path, char *state, uint64_t *start)
{
	char buf[1024], *p;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), field = 0;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -1;
	*state = p[2];
	/* After ')': field 3 (state) ... field 22 (starttime). */
	for (p += 2; *p && field < 19; p++)
		field += *p == ' ';
	if (field < 19 || *p < '0' || *p > '9')
		return -1;
	for (*start = 0; *p >= '0' && *p <= '9'; p++)
		*start = *start * 10 + (uint64_t)(*p - '0');
	return 0;
}

/* The start-time tag stored beside a tid: never 0 (0 = unknown). */
static uint32_t start_tag(uint64_t start)
{
	uint32_t t = (uint32_t)(start ^ (start >> 32));

	return t ? t : 1;
}

static uint64_t self(void)
{
	if (!shared_lock_me) {
		uint32_t tid = (uint32_t)syscall(SYS_gettid) & TID_MASK;
		uint64_t start;
		char state;

		if (read_stat("/proc/thread-self/stat", &state, &start) < 0)
			shared_lock_me = tid; /* no /proc: tag unknown */
		else
			shared_lock_me = tid | (uint64_t)start_tag(start) << 32;
	}
	return shared_lock_me;
}

static void futex_wait_ms(struct shared_lock *l, uint32_t val, unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	syscall(SYS_futex, futex_word(l), FUTEX_WAIT, val, &ts, NULL, 0);
}

/*
 * Is the thread that word names still running?  kill(tid, 0) alone says
 * yes to a zombie (killed, not yet reaped: it will never release) and to
 * a thread id the kernel has since given to somebody else; the stat file
 * tells both apart.  Without /proc, only kill's answer is left.
 */
static bool owner_running(uint64_t word)
{
	uint32_t tid = (uint32_t)word & TID_MASK, tag = (uint32_t)(word >> 32);
	char path[32], state;
	uint64_t start;

	if (tid == 0)
		return false;
	if (kill((pid_t)tid, 0) < 0 && errno == ESRCH)
		return false;
	stat_path(path, tid);
	if (read_stat(path, &state, &start) < 0)
		return true;
	if (state == 'Z' || state == 'X' || state == 'x')
		return false;
	return !tag || tag == start_tag(start);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* We never lock twice, so our own id there is a scribble. */
static bool owner_gone(uint64_t cur, uint64_t me)
{
	return (cur & TID_MASK) == (me & TID_MASK) || !owner_running(cur);
}

int shared_lock_acquire_slow(struct shared_lock *l, unsigned int timeout_ms)
{
	uint64_t me = self(), cur = 0, deadline = 0;

	if (atomic_compare_exchange_strong_explicit(&l->word, &cur, me,
						    memory_order_acquire,
						    memory_order_relaxed))
		return 0;
	for (;;) {
		if (cur == 0) {
			/* Free again: take it, keeping others' wake-ups coming. */
			if (atomic_compare_exchange_strong_explicit(
				    &l->word, &cur, me | WAITERS,
				    memory_order_acquire, memory_order_relaxed))
				return 0;
			continue;
		}
		if (owner_gone(cur, me)) {
			if (atomic_compare_exchange_strong_explicit(
				    &l->word, &cur, me | WAITERS,
				    memory_order_acquire, memory_order_relaxed))
				return 1;
			continue;
		}
		/* Real time, not slices: every release wakes us early. */
		if (!deadline)
			deadline = now_ms() + timeout_ms;
		else if (now_ms() > deadline)
			return -EIO;
		if (!(cur & WAITERS) &&
		    !atomic_compare_exchange_strong_explicit(
			    &l->word, &cur, cur | WAITERS,
			    memory_order_relaxed, memory_order_relaxed))
			continue;
		futex_wait_ms(l, (uint32_t)(cur | WAITERS), SLICE_MS);
		cur = atomic_load_explicit(&l->word, memory_order_relaxed);
	}
}

void shared_lock_wake(struct shared_lock *l)
{
	syscall(SYS_futex, futex_word(l), FUTEX_WAKE, 1, NULL, NULL, 0);
}
