/* SPDX-License-Identifier: MIT */
/*
 * unmap_events.c - the thread that reads munmap events of our userfaultfd
 * (see unmap_events.h).
 *
 * The reader must never wait for anything but the descriptor: a thread
 * blocked in munmap waits for it, and that thread may hold anything (an
 * application lock, or - in a signal handler - a library lock).  So it
 * takes no lock at all: events go into a single-producer ring, and whoever
 * holds the anonymous state's lock takes them out.
 */
#include <errno.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "unmap_events.h"

#define RING 1024u /* a power of two */

static struct unmap_event ring[RING];
static _Atomic uint32_t head, tail; /* consumer, producer */
static _Atomic bool lost;
static _Atomic int reader_fd = -1;
/*
 * Set while the reader reads and queues.  The kernel lets the unmapper go
 * during read(), before the event is queued: a consumer that finds this
 * set waits the few instructions until it is queued, so an munmap that
 * returned is always in the ring by the time anyone looks.
 */
static _Atomic bool reading;
/*
 * The gate (unmap_events_hold): while it is shut the reader reads
 * nothing, so an unmapper of registered memory stays in munmap (or in the
 * mmap(MAP_FIXED) that replaced it) until the holder is done.  The reader
 * waits only for the holder, which waits for nothing: it makes a few
 * system calls and opens the gate.
 */
static _Atomic int gate;        /* 1: shut */
static _Atomic int gate_waiter; /* the reader sleeps on it */

/* Wait until the gate is open, then set reading; false if it was shut. */
static bool enter_read(void)
{
	/* Dekker with unmap_events_hold: both store, then load (seq_cst). */
	atomic_store(&reading, true);
	if (!atomic_load(&gate))
		return true;
	atomic_store(&reading, false);
	atomic_store(&gate_waiter, 1);
	while (atomic_load(&gate))
		syscall(SYS_futex, &gate, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
	return false;
}

static void push(uintptr_t start, uintptr_t end, uint64_t seq)
{
	uint32_t t = atomic_load_explicit(&tail, memory_order_relaxed);

	if (t - atomic_load_explicit(&head, memory_order_acquire) >= RING) {
		atomic_store(&lost, true);
		return;
	}
	ring[t % RING] = (struct unmap_event){ start, end, seq };
	atomic_store_explicit(&tail, t + 1, memory_order_release);
}

/* Read everything queued; false when the descriptor is gone. */
static bool read_all(int fd, uint64_t seq)
{
	struct uffd_msg msg[16];
	ssize_t n;

	while ((n = read(fd, msg, sizeof(msg))) > 0) {
		for (size_t i = 0; i < (size_t)n / sizeof(msg[0]); i++)
			if (msg[i].event == UFFD_EVENT_UNMAP)
				push((uintptr_t)msg[i].arg.remove.start,
				     (uintptr_t)msg[i].arg.remove.end, seq);
	}
	/* Any other failure may pass: an unmapper is waiting for this
	 * read, so only a descriptor that is gone ends the reader. */
	return n == 0 ? false : errno != EBADF;
}

static sem_t started;

static void *reader(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	/*
	 * Everything this thread will ever call, once, before the starter
	 * goes on: whatever it allocates on first use (a sanitizer's
	 * per-thread state) is placed now, not later in a hole the
	 * application just unmapped and means to map again.
	 */
	poll(&p, 1, 0);
	read_all(fd, vr_next_seq());
	sem_post(&started);
	for (;;) {
		if (poll(&p, 1, -1) < 0) {
			/* Only a descriptor that is gone ends the reader: an
			 * unmapper waits for it (munmap would hang). */
			if (errno == EBADF)
				break;
			if (errno != EINTR)
				poll(NULL, 0, 1);
			continue;
		}
		if (p.revents & (POLLNVAL | POLLERR))
			break; /* closed under us: no registrations left */
		/*
		 * The unmapped range is gone and its unmapper waits for this
		 * read: every mark older than this stamp was made before the
		 * munmap, every newer one after it returned.
		 */
		while (!enter_read())
			;
		if (!read_all(fd, vr_seq_barrier())) {
			atomic_store(&reading, false);
			break;
		}
		atomic_store_explicit(&reading, false, memory_order_release);
	}
	return NULL;
}

int unmap_events_start(int uffd)
{
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t th;
	int r;

	/* Signals are the application's business, never this thread's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	sem_init(&started, 0, 0);
	r = -pthread_create(&th, &attr, reader, (void *)(intptr_t)uffd);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	while (r == 0 && sem_wait(&started) < 0 && errno == EINTR)
		;
	if (r == 0) {
		atomic_store(&reader_fd, uffd);
		pthread_setname_np(th, "vrange-unmap");
	}
	return r;
}

size_t unmap_events_take(struct unmap_event *out, size_t max, bool *was_lost)
{
	uint32_t h, t;
	size_t n = 0;

	/* The reader never blocks while it reads: this wait is short. */
	while (atomic_load_explicit(&reading, memory_order_acquire))
		sched_yield();
	h = atomic_load_explicit(&head, memory_order_relaxed);
	t = atomic_load_explicit(&tail, memory_order_acquire);
	while (h != t && n < max)
		out[n++] = ring[h++ % RING];
	*was_lost = atomic_exchange(&lost, false);
	return n;
}

void unmap_events_done(size_t n)
{
	uint32_t h = atomic_load_explicit(&head, memory_order_relaxed);

	atomic_store_explicit(&head, h + (uint32_t)n, memory_order_release);
}

void unmap_events_hold(void)
{
	atomic_store(&gate, 1);
	/* A read that began before the gate shut ends without waiting. */
	while (atomic_load(&reading))
		sched_yield();
}

void unmap_events_release(void)
{
	atomic_store(&gate, 0);
	if (atomic_exchange(&gate_waiter, 0))
		syscall(SYS_futex, &gate, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

bool unmap_events_unsettled(void)
{
	return atomic_load_explicit(&reading, memory_order_acquire) ||
	       atomic_load_explicit(&head, memory_order_relaxed) !=
		       atomic_load_explicit(&tail, memory_order_acquire);
}

bool unmap_events_pending(void)
{
	int fd = atomic_load(&reader_fd);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

void unmap_events_forget(void)
{
	atomic_store(&reader_fd, -1);
	atomic_store(&head, 0);
	atomic_store(&tail, 0);
	atomic_store(&lost, false);
	atomic_store(&reading, false);
	atomic_store(&gate, 0);
	atomic_store(&gate_waiter, 0);
}
