/* SPDX-License-Identifier: MIT */
/*
 * uffd_purge.c - what touching a purged page does: SIGBUS, or a refill.
 *
 * SIGBUS mode, no refill callback (measured on Linux 6.18):
 *
 *   before the punch   UFFDIO_REGISTER(MISSING) [off, len) on a uffd opened
 *                      with UFFD_FEATURE_SIGBUS: a touch of a page the punch
 *                      has already removed raises SIGBUS instead of mapping
 *                      a zero page (the "no silent zeros" window is closed
 *                      before the first page goes).
 *   after the punch    UFFDIO_POISON [off, len) (needs a registration, any
 *                      mode; the markers live in the page table and survive
 *                      later punches and the unregistration), then
 *                      UFFDIO_UNREGISTER, which lets the VMAs merge back:
 *                      no registration outlives a purge, so 100,000 purged
 *                      ranges cost no VMAs and never-purged pages keep the
 *                      kernel's normal fault path.
 *   mark_nonvolatile   MADV_DONTNEED over the purged pages clears the
 *                      markers; the next touch maps a fresh zero page.  A
 *                      plain system call: async-signal-safe, as the SIGBUS
 *                      handler pattern requires.
 *
 * A poisoned page raises SIGBUS (BUS_ADRERR, si_addr exact) on read and on
 * write; shmem only raises MISSING faults where the file has a hole, so
 * pages with data are never affected by a registration.
 *
 * Refill regions: the purged ranges stay registered MISSING on a second
 * uffd (without the SIGBUS feature) whose fault thread calls the callback,
 * installs the bytes with UFFDIO_COPY (atomic, wakes every waiter of the
 * page) and marks the page volatile again in the tree (rt_unpurge).  A
 * callback error poisons the page and wakes the toucher, who then gets
 * SIGBUS.  Registrations are kept as a sorted list of intervals per region
 * (adjacent ones merge, like the VMAs they mirror); past UFFD_MAX_IV
 * intervals the whole mapping is registered once instead ("whole" mode:
 * never-purged holes then fault through the thread, which answers them with
 * UFFDIO_ZEROPAGE - slower, still correct), so a region never costs more
 * than about 2 * UFFD_MAX_IV VMAs.
 *
 * fork(): without UFFD_FEATURE_EVENT_FORK the kernel drops every uffd
 * registration in the child, and poison markers of a MAP_SHARED mapping are
 * not copied either.  So in a child, pages the parent had purged read as
 * zeros (a touch allocates a zero page in the shared file) - no signal, no
 * hang, and no refill.  The child must not use the parent's uffds (they act
 * on the parent's mm): our atfork child handler closes them and lets the
 * child probe afresh on its next purge, after which the child's own purges
 * behave as in the parent (refill regions get a fault thread of the child's
 * own when the child purges them).
 *
 * The callback runs on the fault thread with no library lock held, so it
 * may call the library (mark, query, even create regions); it must not
 * destroy the region it is filling, and while it runs, other refills wait.
 * A kernel access to a purged page of a refill region (read(2) into it)
 * gets EFAULT where only UFFD_USER_MODE_ONLY was available (non-root).
 *
 * Locking: everything per region is guarded by the file's lock (the hooks
 * run under it).  list_lock guards the list of refill regions and their
 * busy counts; it is never held together with a file lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "file_state.h"
#include "purge.h"
#include "region.h"
#include "uffd_purge.h"

/* Newer than the 6.1 headers we build against. */
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1ULL << 14)
#endif
#ifndef _UFFDIO_POISON
#define _UFFDIO_POISON (0x08)
struct uffdio_poison {
	struct uffdio_range range;
#define UFFDIO_POISON_MODE_DONTWAKE ((__u64)1 << 0)
	__u64 mode;
	__s64 updated;
};
#define UFFDIO_POISON _IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)
#endif

/* Registered intervals a refill region keeps before going "whole". */
#define UFFD_MAX_IV 512u
/* Fault messages read at once by the fault thread. */
#define UFFD_MSGS 16

struct uffd_iv {
	size_t start, end; /* bytes from the mapping's base */
};

struct uffd_region {
	struct uffd_region *next;  /* refill list, list_lock */
	struct vrange_region *r;
	char *base;                /* r->map.base, for the fault thread */
	size_t size;
	unsigned int busy;         /* faults being served; list_lock */
	/* The rest under the file's lock. */
	bool whole;                /* whole mapping registered */
	uint32_t n;                /* intervals in iv[] when !whole */
	struct uffd_iv iv[UFFD_MAX_IV];
};

enum probe_state { PROBE_UNKNOWN, PROBE_OK, PROBE_FAILED };
enum open_how { OPEN_SYSCALL, OPEN_USER_ONLY, OPEN_DEVICE };

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int probe_state = PROBE_UNKNOWN;
static char reason[32];
static enum open_how open_how;
static int sigbus_fd = -1;  /* UFFD_FEATURE_SIGBUS: transient registrations */
static int refill_fd = -1;  /* the fault thread's uffd; probe_lock to open */
static bool thread_running; /* probe_lock */
static pthread_t fault_thread;

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t list_cond = PTHREAD_COND_INITIALIZER;
static struct uffd_region *refill_list;

static void set_reason_errno(const char *what, int err)
{
	const char *name;

	switch (err) {
	case EPERM: name = "EPERM"; break;
	case EACCES: name = "EACCES"; break;
	case ENOSYS: name = "ENOSYS"; break;
	case ENOENT: name = "ENOENT"; break;
	case EINVAL: name = "EINVAL"; break;
	case ENOMEM: name = "ENOMEM"; break;
	case EMFILE: name = "EMFILE"; break;
	default: name = NULL; break;
	}
	if (name)
		snprintf(reason, sizeof(reason), "%s: %s", what, name);
	else
		snprintf(reason, sizeof(reason), "%s: errno %d", what, err);
}

/* A new uffd the way the probe found to work; -errno. */
static int uffd_open_how(enum open_how how, int flags)
{
	int fd, dev;

	if (how != OPEN_DEVICE) {
		if (how == OPEN_USER_ONLY)
			flags |= UFFD_USER_MODE_ONLY;
		fd = (int)syscall(__NR_userfaultfd, flags);
		return fd < 0 ? -errno : fd;
	}
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -errno;
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
	fd = fd < 0 ? -errno : fd;
	close(dev);
	return fd;
}

/*
 * Find a way to get a uffd: the system call; for a user without the
 * privilege (vm.unprivileged_userfaultfd=0) the same with
 * UFFD_USER_MODE_ONLY; where the call is blocked, /dev/userfaultfd.
 */
static int uffd_first_open(int flags)
{
	int fd, err;

	fd = uffd_open_how(OPEN_SYSCALL, flags);
	if (fd >= 0) {
		open_how = OPEN_SYSCALL;
		return fd;
	}
	err = fd;
	if (fd == -EPERM) {
		fd = uffd_open_how(OPEN_USER_ONLY, flags);
		if (fd >= 0) {
			open_how = OPEN_USER_ONLY;
			return fd;
		}
	}
	fd = uffd_open_how(OPEN_DEVICE, flags);
	if (fd >= 0) {
		open_how = OPEN_DEVICE;
		return fd;
	}
	set_reason_errno("userfaultfd", -err);
	return err;
}

static int uffd_api(int fd, uint64_t features, uint64_t *got)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };

	if (ioctl(fd, UFFDIO_API, &api) < 0)
		return -errno;
	if (got)
		*got = api.features;
	return 0;
}

static int uffd_register(int fd, void *addr, size_t len, uint64_t *ioctls)
{
	struct uffdio_register reg = {
		.range = { (uintptr_t)addr, len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
		return -errno;
	if (ioctls)
		*ioctls = reg.ioctls;
	return 0;
}

static int uffd_unregister(int fd, void *addr, size_t len)
{
	struct uffdio_range range = { (uintptr_t)addr, len };

	return ioctl(fd, UFFDIO_UNREGISTER, &range) < 0 ? -errno : 0;
}

/*
 * Poison [addr, addr + len).  The kernel stops at the first page that is
 * already mapped or poisoned (-EEXIST): step over it and go on, so that
 * every hole of the range ends up poisoned.  0, or -errno if some hole may
 * have stayed unpoisoned.  Async-signal-safe.
 */
_Atomic uint64_t uffd_poison_gen;

static int uffd_poison(int fd, char *addr, size_t len)
{
	char *end = addr + len;

	atomic_fetch_add(&uffd_poison_gen, 1); /* see sigbus_fixup.c */

	while (addr < end) {
		struct uffdio_poison p = {
			.range = { (uintptr_t)addr, (size_t)(end - addr) },
		};

		if (ioctl(fd, UFFDIO_POISON, &p) == 0)
			return 0;
		if (errno == EAGAIN && p.updated > 0) {
			addr += p.updated;
			continue;
		}
		if (errno != EEXIST)
			return -errno;
		addr += (p.updated > 0 ? (size_t)p.updated : 0) + vr_page_size;
	}
	return 0;
}

static void uffd_wake(int fd, void *addr, size_t len)
{
	struct uffdio_range range = { (uintptr_t)addr, len };

	ioctl(fd, UFFDIO_WAKE, &range);
}

/* One registration of a shmem page, to see that the kernel takes it. */
static int probe_shmem(int fd)
{
	uint64_t ioctls = 0;
	int mfd = memfd_create("vrange-uffd-probe", MFD_CLOEXEC), r;
	void *p = MAP_FAILED;

	if (mfd < 0)
		return -errno;
	if (ftruncate(mfd, (off_t)vr_page_size) < 0) {
		r = -errno;
		goto out;
	}
	p = mmap(NULL, vr_page_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto out;
	}
	r = uffd_register(fd, p, vr_page_size, &ioctls);
	if (r == 0) {
		uffd_unregister(fd, p, vr_page_size);
		if (!(ioctls & (1ULL << _UFFDIO_POISON)))
			r = -EOPNOTSUPP;
	}
out:
	if (p != MAP_FAILED)
		munmap(p, vr_page_size);
	close(mfd);
	return r;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&probe_lock);
	pthread_mutex_lock(&list_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_unlock(&probe_lock);
}

/*
 * The child: our uffds belong to the parent's mm and the kernel dropped
 * every registration of the child's copy (see the top).  Close them, forget
 * the registrations, and probe again on the child's next purge.
 */
static void fork_child(void)
{
	if (sigbus_fd >= 0)
		close(sigbus_fd);
	if (refill_fd >= 0)
		close(refill_fd);
	sigbus_fd = refill_fd = -1;
	thread_running = false;
	for (struct uffd_region *u = refill_list; u; u = u->next) {
		u->busy = 0;
		u->whole = false;
		u->n = 0;
	}
	if (atomic_load(&probe_state) == PROBE_OK)
		atomic_store(&probe_state, PROBE_UNKNOWN);
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_unlock(&probe_lock);
}

static bool atfork_done;

/* Under probe_lock. */
static int probe_locked(void)
{
	const uint64_t need = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MISSING_SHMEM |
			      UFFD_FEATURE_POISON;
	uint64_t have = 0;
	int fd, r;

	if (vr_env.no_uffd) {
		snprintf(reason, sizeof(reason), "disabled by VRANGE_NO_UFFD");
		return -EOPNOTSUPP;
	}
	/* A first uffd only asks what the kernel offers (features 0). */
	fd = uffd_first_open(O_CLOEXEC);
	if (fd < 0)
		return fd;
	r = uffd_api(fd, 0, &have);
	close(fd);
	if (r < 0) {
		set_reason_errno("UFFDIO_API", -r);
		return r;
	}
	if (!(have & UFFD_FEATURE_SIGBUS))
		snprintf(reason, sizeof(reason), "no UFFD_FEATURE_SIGBUS");
	else if (!(have & UFFD_FEATURE_MISSING_SHMEM))
		snprintf(reason, sizeof(reason), "no uffd on shmem");
	else if (!(have & UFFD_FEATURE_POISON))
		snprintf(reason, sizeof(reason), "no UFFDIO_POISON");
	if ((have & need) != need)
		return -EOPNOTSUPP;
	fd = uffd_open_how(open_how, O_CLOEXEC);
	if (fd < 0) {
		set_reason_errno("userfaultfd", -fd);
		return fd;
	}
	r = uffd_api(fd, need, NULL);
	if (r == 0)
		r = probe_shmem(fd);
	if (r < 0) {
		if (r == -EOPNOTSUPP)
			snprintf(reason, sizeof(reason), "no UFFDIO_POISON");
		else
			set_reason_errno("uffd on shmem", -r);
		close(fd);
		return r;
	}
	sigbus_fd = fd;
	if (!atfork_done) {
		pthread_atfork(fork_prepare, fork_parent, fork_child);
		atfork_done = true;
	}
	reason[0] = '\0';
	return 0;
}

/* Not the kernel's verdict on userfaultfd (out of descriptors or memory,
 * interrupted, busy...): worth asking again. */
static bool transient(int r)
{
	return r != -EPERM && r != -EACCES && r != -ENOSYS && r != -EINVAL &&
	       r != -EOPNOTSUPP && r != -ENOTTY;
}

static bool ensure_probed(void)
{
	int st = atomic_load(&probe_state);

	if (st != PROBE_UNKNOWN)
		return st == PROBE_OK;
	vr_init_basic();
	pthread_mutex_lock(&probe_lock);
	st = atomic_load(&probe_state);
	if (st == PROBE_UNKNOWN) {
		int r = probe_locked();

		st = r == 0 ? PROBE_OK : PROBE_FAILED;
		/* A transient failure: unusable for now, asked again next
		 * time (one EMFILE must not cost SIGBUS mode for good). */
		if (r == 0 || !transient(r))
			atomic_store(&probe_state, st);
	}
	pthread_mutex_unlock(&probe_lock);
	return st == PROBE_OK;
}

bool uffd_available(void)
{
	return ensure_probed();
}

const char *uffd_fallback_reason(void)
{
	ensure_probed();
	return reason;
}

/* ---- intervals of a refill region (file lock held) ---------------------- */

/* Add [s, e), merging with what it overlaps or touches.  -ENOSPC if full. */
static int iv_add(struct uffd_region *u, size_t s, size_t e)
{
	uint32_t i = 0, j;

	while (i < u->n && u->iv[i].end < s)
		i++;
	/* iv[i..j) overlap or touch [s, e). */
	for (j = i; j < u->n && u->iv[j].start <= e; j++) {
		if (u->iv[j].start < s)
			s = u->iv[j].start;
		if (u->iv[j].end > e)
			e = u->iv[j].end;
	}
	if (j == i) {
		if (u->n == UFFD_MAX_IV)
			return -ENOSPC;
		memmove(&u->iv[i + 1], &u->iv[i], (u->n - i) * sizeof(u->iv[0]));
		u->n++;
	} else if (j > i + 1) {
		memmove(&u->iv[i + 1], &u->iv[j], (u->n - j) * sizeof(u->iv[0]));
		u->n -= j - i - 1;
	}
	u->iv[i].start = s;
	u->iv[i].end = e;
	return 0;
}

/* Remove [s, e).  -ENOSPC when splitting would need a slot there is not.
 * Async-signal-safe (no allocation). */
static int iv_del(struct uffd_region *u, size_t s, size_t e)
{
	uint32_t i = 0;

	while (i < u->n && u->iv[i].end <= s)
		i++;
	while (i < u->n && u->iv[i].start < e) {
		struct uffd_iv *v = &u->iv[i];

		if (v->start < s && v->end > e) {
			if (u->n == UFFD_MAX_IV)
				return -ENOSPC;
			memmove(&u->iv[i + 1], &u->iv[i], (u->n - i) * sizeof(u->iv[0]));
			u->n++;
			u->iv[i].end = s;
			u->iv[i + 1].start = e;
			return 0;
		}
		if (v->start < s) {
			v->end = s;
			i++;
		} else if (v->end > e) {
			v->start = e;
			return 0;
		} else {
			memmove(&u->iv[i], &u->iv[i + 1], (u->n - i - 1) * sizeof(u->iv[0]));
			u->n--;
		}
	}
	return 0;
}

/* Register the whole mapping on the refill uffd: the overflow fallback. */
static void go_whole(struct uffd_region *u)
{
	if (uffd_register(refill_fd, u->base, u->size, NULL) == 0) {
		u->whole = true;
		u->n = 0;
	}
}

/* Make [off, off + len) of a refill region fault into the thread. */
static int refill_register(struct uffd_region *u, size_t off, size_t len)
{
	int r;

	if (u->whole)
		return 0;
	if (iv_add(u, off, off + len) < 0) {
		go_whole(u);
		return u->whole ? 0 : -ENOMEM;
	}
	r = uffd_register(refill_fd, u->base + off, len, NULL);
	if (r < 0) {
		/* Most likely out of VMAs: one registration for everything. */
		iv_del(u, off, off + len);
		go_whole(u);
		r = u->whole ? 0 : r;
	}
	return r;
}

/* ---- the fault thread ---------------------------------------------------- */

/* Is page pg of f purged?  File lock held. */
static bool page_purged(struct vfile *f, uint64_t pg)
{
	uint64_t vol = 0, purged = 0;

	return rt_count(&f->tree, pg, pg + 1, &vol, &purged) == 0 && purged;
}

/* A MISSING fault on a page that is not purged (any more): a zero page,
 * or, if the page exists by now, just wake the toucher. */
static void resolve_not_purged(char *page)
{
	struct uffdio_zeropage z = {
		.range = { (uintptr_t)page, vr_page_size },
	};

	if (ioctl(refill_fd, UFFDIO_ZEROPAGE, &z) < 0)
		uffd_wake(refill_fd, page, vr_page_size);
}

static struct uffd_region *find_and_hold(const char *addr)
{
	struct uffd_region *u;

	pthread_mutex_lock(&list_lock);
	for (u = refill_list; u; u = u->next) {
		if (addr >= u->base && (size_t)(addr - u->base) < u->size) {
			u->busy++;
			break;
		}
	}
	pthread_mutex_unlock(&list_lock);
	return u;
}

static void release(struct uffd_region *u)
{
	pthread_mutex_lock(&list_lock);
	if (--u->busy == 0)
		pthread_cond_broadcast(&list_cond);
	pthread_mutex_unlock(&list_lock);
}

static void serve_fault(char *page, void *buf)
{
	struct uffd_region *u = find_and_hold(page);
	struct vrange_region *r;
	vrange_refill_fn fn;
	void *arg;
	size_t off;
	uint64_t pg;
	int ret;

	if (!u) {
		/* Not ours (any more): let the toucher retry. */
		uffd_wake(refill_fd, page, vr_page_size);
		return;
	}
	r = u->r;
	off = (size_t)(page - u->base);
	pg = off >> vr_page_shift;
	if (vfile_lock(r->file) < 0) {
		uffd_wake(refill_fd, page, vr_page_size);
		goto out;
	}
	fn = r->refill;
	arg = r->refill_arg;
	if (!page_purged(r->file, pg)) {
		resolve_not_purged(page);
		goto unlock;
	}
	if (!fn) {
		uffd_poison(refill_fd, page, vr_page_size);
		goto unlock;
	}
	/* The callback may be slow and may call the library: no lock held. */
	vfile_unlock(r->file);
	ret = fn(r, off, buf, vr_page_size, arg);
	if (vfile_lock(r->file) < 0) {
		uffd_wake(refill_fd, page, vr_page_size);
		goto out;
	}
	if (!page_purged(r->file, pg)) {
		/* Marked non-volatile meanwhile: it is a fresh zero page now. */
		resolve_not_purged(page);
	} else if (ret < 0) {
		/* The toucher retries, meets the marker: SIGBUS. */
		uffd_poison(refill_fd, page, vr_page_size);
	} else {
		struct uffdio_copy c = {
			.dst = (uintptr_t)page,
			.src = (uintptr_t)buf,
			.len = vr_page_size,
		};

		if (ioctl(refill_fd, UFFDIO_COPY, &c) == 0) {
			/*
			 * Counted as volatile again.  Should the tree have no
			 * node for the split (a foreign file's private arena
			 * is full) the page stays "purged": a later
			 * mark_nonvolatile says PURGED, never a false INTACT.
			 */
			rt_unpurge(&r->file->tree, pg, pg + 1,
				   atomic_load(&r->prio), vr_next_seq(), NULL);
			purge_note_refill(1);
		} else {
			/* Filled by some other way (-EEXIST) or unregistered. */
			uffd_wake(refill_fd, page, vr_page_size);
		}
	}
unlock:
	vfile_unlock(r->file);
out:
	release(u);
}

/* The fault thread's page buffer: made before the thread starts (a thread
 * that could not get one would leave touches blocked), kept for good. */
static void *fault_buf; /* probe_lock */

static void *fault_main(void *arg)
{
	struct uffd_msg msgs[UFFD_MSGS];
	int fd = (int)(intptr_t)arg;
	void *buf = fault_buf;

	for (;;) {
		ssize_t n = read(fd, msgs, sizeof(msgs));

		if (n < 0) {
			if (errno == EBADF)
				break; /* closed: nothing will fault here any more */
			/* Anything else may pass (a touch is waiting on us):
			 * never leave the faults unserved; try again shortly. */
			if (errno != EINTR && errno != EAGAIN)
				poll(NULL, 0, 1);
			continue;
		}
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(msgs[0]); i++) {
			uintptr_t a;

			if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
				continue;
			a = (uintptr_t)msgs[i].arg.pagefault.address;
			serve_fault((char *)(a & ~(uintptr_t)(vr_page_size - 1)), buf);
		}
	}
	pthread_mutex_lock(&probe_lock);
	if (refill_fd == fd)
		thread_running = false;
	pthread_mutex_unlock(&probe_lock);
	return NULL;
}

/* The refill uffd and its thread, once per process (and per fork child). */
static int ensure_refill_thread(void)
{
	sigset_t all, old;
	int r = 0, fd;

	if (!ensure_probed())
		return -EOPNOTSUPP;
	pthread_mutex_lock(&probe_lock);
	if (thread_running)
		goto out;
	if (refill_fd < 0) {
		fd = uffd_open_how(open_how, O_CLOEXEC);
		if (fd < 0) {
			r = fd;
			goto out;
		}
		r = uffd_api(fd, UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_POISON, NULL);
		if (r < 0) {
			close(fd);
			goto out;
		}
		refill_fd = fd;
	}
	if (!fault_buf) {
		void *b = mmap(NULL, vr_page_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (b == MAP_FAILED) {
			r = -errno;
			goto out;
		}
		fault_buf = b;
	}
	/* Application signals go to application threads, never here. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&fault_thread, NULL, fault_main,
			    (void *)(intptr_t)refill_fd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0) {
		pthread_detach(fault_thread);
		thread_running = true;
	}
out:
	pthread_mutex_unlock(&probe_lock);
	return r;
}

/* ---- the hooks ----------------------------------------------------------- */

static struct uffd_region *refill_state(const struct vmap *m)
{
	return m->region ? m->region->uffd : NULL;
}

int uffd_before_discard(struct vmap *m, size_t off, size_t len)
{
	struct uffd_region *u = refill_state(m);
	int r;

	if (!ensure_probed())
		return -EOPNOTSUPP;
	if (u) {
		r = ensure_refill_thread(); /* again after a fork */
		return r < 0 ? r : refill_register(u, off, len);
	}
	/* Touches of what the punch removes SIGBUS from here on. */
	r = uffd_register(sigbus_fd, m->base + off, len, NULL);
	if (r < 0)
		vr_debug("uffd: registering %zu bytes for a purge failed (%d): "
			 "those pages will read zeros", len, r);
	return r;
}

void uffd_cancel_discard(struct vmap *m, size_t off, size_t len)
{
	if (!refill_state(m) && sigbus_fd >= 0)
		uffd_unregister(sigbus_fd, m->base + off, len);
}

void uffd_after_discard(struct vmap *m, size_t off, size_t len)
{
	if (refill_state(m) || sigbus_fd < 0)
		return; /* refill: the registration stays, the thread serves */
	/*
	 * Without the markers the registration is what raises SIGBUS: keep
	 * it.  Either way, a registration that outlives the purge (also when
	 * unregistering fails) is dropped by uffd_after_nonvolatile before
	 * the pages are handed back.
	 */
	if (uffd_poison(sigbus_fd, m->base + off, len) < 0 ||
	    uffd_unregister(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->armed, true);
}

bool uffd_span_ok(const struct vmap *m)
{
	return !refill_state(m) && sigbus_fd >= 0;
}

/* Without its markers a purged piece keeps the span's registration,
 * which raises SIGBUS as they would (see uffd_after_discard). */
void uffd_poison_armed(struct vmap *m, size_t off, size_t len)
{
	if (!refill_state(m) && sigbus_fd >= 0 &&
	    uffd_poison(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->armed, true);
}

void uffd_disarm(struct vmap *m, size_t off, size_t len)
{
	if (refill_state(m) || sigbus_fd < 0 || atomic_load(&m->armed))
		return; /* a registration that must stay: unmarking drops it */
	if (uffd_unregister(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->armed, true);
}

int uffd_after_nonvolatile(struct vmap *m, size_t off, size_t len)
{
	struct uffd_region *u = refill_state(m);
	int r;

	/* Async-signal-safe: system calls and the preallocated intervals. */
	if (u && !u->whole && refill_fd >= 0) {
		if (iv_del(u, off, off + len) < 0)
			go_whole(u);
		else if ((r = uffd_unregister(refill_fd, m->base + off, len)) < 0)
			return r; /* still registered: touches would wait */
	}
	/* A purge whose registration stayed (see uffd_after_discard): a
	 * touch would raise SIGBUS on the fresh page.  Drop it first. */
	if (!u && sigbus_fd >= 0 && atomic_load(&m->armed) &&
	    (r = uffd_unregister(sigbus_fd, m->base + off, len)) < 0)
		return r;
	/* Clears poison markers; the next touch maps a fresh zero page. */
	return madvise(m->base + off, len, MADV_DONTNEED) < 0 ? -errno : 0;
}

/* A purged range of the file, poisoned in a SIGBUS mapping that joins it. */
static int walk_poison_new(const struct rt_range *rr, void *arg)
{
	struct vmap *m = arg;
	size_t off = (size_t)rr->start << vr_page_shift;
	size_t len = (size_t)(rr->end - rr->start) << vr_page_shift;

	if (rr->state != RT_PURGED || off >= m->size)
		return 0;
	if (len > m->size - off)
		len = m->size - off;
	if (uffd_register(sigbus_fd, m->base + off, len, NULL) < 0) {
		vr_debug("uffd: cannot arm %zu purged bytes of a new mapping", len);
		return 0;
	}
	uffd_poison(sigbus_fd, m->base + off, len);
	uffd_unregister(sigbus_fd, m->base + off, len);
	return 0;
}

void uffd_map_joined(struct vmap *m, const struct rt_tree *t)
{
	if (!m->sigbus || !ensure_probed() || sigbus_fd < 0)
		return;
	rt_visit(t, 0, m->size >> vr_page_shift, walk_poison_new, m);
}

/* ---- refill on and off --------------------------------------------------- */

struct walk_ctx {
	struct uffd_region *u;
	struct vmap *m;
	bool on;
};

/* A purged range while the callback comes or goes. */
static int walk_purged(const struct rt_range *rr, void *arg)
{
	struct walk_ctx *c = arg;
	size_t off = (size_t)rr->start << vr_page_shift;
	size_t len = (size_t)(rr->end - rr->start) << vr_page_shift;

	if (rr->state != RT_PURGED || off >= c->m->size)
		return 0;
	if (len > c->m->size - off)
		len = c->m->size - off;
	if (c->on) {
		/* Registered first, so no touch finds neither marker nor
		 * registration; then the markers go and touches refill. */
		refill_register(c->u, off, len);
		madvise(c->m->base + off, len, MADV_DONTNEED);
	} else {
		uffd_poison(refill_fd, c->m->base + off, len);
	}
	return 0;
}

static int refill_on(struct vrange_region *r)
{
	struct uffd_region *u;
	struct walk_ctx c;
	int ret = ensure_refill_thread();

	if (ret < 0)
		return ret;
	if (!r->map.sigbus)
		return -EOPNOTSUPP; /* ZERO mode: the purge path never calls us */
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->r = r;
	u->base = r->map.base;
	u->size = r->map.size;
	ret = vfile_lock(r->file);
	if (ret < 0) {
		free(u);
		return ret;
	}
	if (r->uffd || !r->refill) {
		/* Already on, or turned off again before we got here. */
		vfile_unlock(r->file);
		free(u);
		return 0;
	}
	c = (struct walk_ctx){ .u = u, .m = &r->map, .on = true };
	rt_visit(&r->file->tree, 0, r->map.size >> vr_page_shift, walk_purged, &c);
	r->uffd = u;
	vfile_unlock(r->file);
	pthread_mutex_lock(&list_lock);
	u->next = refill_list;
	refill_list = u;
	pthread_mutex_unlock(&list_lock);
	return 0;
}

/* Take u off the list once the fault thread is done with it. */
static void unlist(struct uffd_region *u)
{
	pthread_mutex_lock(&list_lock);
	for (struct uffd_region **pp = &refill_list; *pp; pp = &(*pp)->next) {
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	}
	/* The fault thread itself (a callback destroying another region)
	 * is not serving u: never wait for ourselves. */
	if (!(thread_running && pthread_equal(pthread_self(), fault_thread)))
		while (u->busy)
			pthread_cond_wait(&list_cond, &list_lock);
	pthread_mutex_unlock(&list_lock);
}

static int refill_off(struct vrange_region *r)
{
	struct uffd_region *u;
	struct walk_ctx c;
	int ret = vfile_lock(r->file);

	if (ret < 0)
		return ret;
	u = r->uffd;
	if (!u || r->refill) {
		vfile_unlock(r->file);
		return 0;
	}
	/* Purged pages raise SIGBUS again: poison them while still
	 * registered, then drop the registrations. */
	c = (struct walk_ctx){ .u = u, .m = &r->map, .on = false };
	if (refill_fd >= 0) {
		rt_visit(&r->file->tree, 0, r->map.size >> vr_page_shift,
			 walk_purged, &c);
		if (u->whole)
			uffd_unregister(refill_fd, u->base, u->size);
		for (uint32_t i = 0; !u->whole && i < u->n; i++)
			uffd_unregister(refill_fd, u->base + u->iv[i].start,
					u->iv[i].end - u->iv[i].start);
	}
	r->uffd = NULL;
	vfile_unlock(r->file);
	unlist(u);
	free(u);
	return 0;
}

int uffd_region_refill(struct vrange_region *r)
{
	return r->refill ? refill_on(r) : refill_off(r);
}

void uffd_region_gone(struct vrange_region *r)
{
	struct uffd_region *u;

	if (vfile_lock(r->file) < 0)
		return;
	u = r->uffd;
	/* The purge path falls back to plain SIGBUS handling until the
	 * mapping is gone; munmap drops our registrations. */
	r->uffd = NULL;
	vfile_unlock(r->file);
	if (u) {
		unlist(u);
		free(u);
	}
}
