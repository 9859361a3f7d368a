/* SPDX-License-Identifier: MIT */
/*
 * uffd_purge.c - what touching a purged page does: SIGBUS, or a refill.
 *
 * Every SIGBUS mapping the library knows of (a region's, an application
 * mapping passed to vrange()) is armed when it is learnt: registered
 * whole, MISSING and MINOR mode, on fault_fd, a uffd without
 * UFFD_FEATURE_SIGBUS whose fault thread decides every touch of a hole -
 * and of a page the file has but this mapping does not map yet - from the
 * file's state (measured on Linux 6.18):
 *
 *   purged, still      UFFDIO_POISON on the page, wake: the toucher retries,
 *   volatile           meets the marker and gets SIGBUS (BUS_ADRERR, si_addr
 *                      exact) on its own thread; a refill region's callback
 *                      fills it instead (UFFDIO_COPY).
 *   anything else      UFFDIO_ZEROPAGE: what the kernel would have mapped.
 *                      A first touch right after the previous fill of the
 *                      mapping takes twice as many pages as that one (up
 *                      to FILL_MAX), if none of them is volatile: a memset
 *                      of a fresh region costs a round trip per megabyte.
 *                      A minor fault (the file has the page): UFFDIO_CONTINUE
 *                      over its aligned block of MINOR_BLOCK pages (2 MiB),
 *                      if none of them is purged (MINOR_MIN, else the one).
 *
 * Why minor faults: one file, two access modes (contract 6).  A ZERO-mode
 * mapping of the file (a region adopted so, in any process; a shim area;
 * any mapping the library never saw) that reads a purged hole fills it, in
 * the file, for every mapping - the kernel has no private zero page for a
 * shared mapping.  Registered MISSING only, a SIGBUS mapping would then map
 * that page and read zeros.  With MINOR the touch still comes here, and the
 * tree still says purged (until mark_nonvolatile): the thread poisons it
 * (UFFDIO_POISON takes a page that is in the file but not in this
 * mapping) and the toucher gets SIGBUS.  A refill region's such page is
 * punched again and refilled.  Where minor faults are missing (before
 * Linux 5.14) or would break the kernel's own accesses (a user-mode-only
 * uffd: EFAULT on every page not mapped yet), the mapping keeps SIGBUS
 * mode for holes and counts in the fallbacks (note_partial).
 *
 * Why for good, and not only around purges: poison markers and
 * registrations live in one process's page tables, and a purge may come
 * from any process sharing the file (another adopter, a fork child,
 * vrangectl) with nothing running here.  So every process keeps its own
 * mappings registered, and a page another process punched is a hole that
 * comes to our thread.  Why a thread, not UFFD_FEATURE_SIGBUS and a
 * handler deciding: the kernel's own accesses (read(2) into a fresh page)
 * would fail with EFAULT, and an application that installs its SIGBUS
 * handler after ours would see every first touch.
 *
 *   before the punch   nothing: already registered.
 *   after the punch    UFFDIO_POISON [off, len) in this process's armed
 *                      mappings, so touches here signal without a trip to
 *                      the thread (refill regions, and regions no other
 *                      mapping can reach yet: left to the thread, see
 *                      poison_now()).
 *   mark_nonvolatile   MADV_DONTNEED over the purged pages clears the
 *                      markers; the next touch comes to the thread and
 *                      gets a zero page.  A plain system call:
 *                      async-signal-safe, as the SIGBUS handler pattern
 *                      requires.  Markers in other processes stay; their
 *                      SIGBUS fixup (sigbus_fixup.c) clears them.
 *
 * shmem raises MISSING faults where the file has a hole and MINOR faults
 * where it has a page this mapping does not map yet; pages this mapping
 * maps never meet the thread.
 *
 * Where the only uffd to be had is UFFD_USER_MODE_ONLY (no privilege,
 * vm.unprivileged_userfaultfd=0), a registration for good would make the
 * kernel's accesses to fresh pages EFAULT: there a mapping is registered
 * only around each purge, on sigbus_fd (UFFD_FEATURE_SIGBUS), poisoned and
 * unregistered - SIGBUS in the purging process only (counted as a
 * fallback: "UFFD_USER_MODE_ONLY").  A refill region is armed anyway,
 * MISSING mode only (the callback needs the thread; kernel accesses to its
 * purged pages get EFAULT).  A mapping the kernel refuses to register
 * (EPERM: a read-only descriptor's; EBUSY: a registration of the
 * application's) reads zeros where a purge punched; uffd_fallbacks()
 * counts the known ones.
 *
 * fork(): without UFFD_FEATURE_EVENT_FORK the kernel drops every uffd
 * registration in the child, and poison markers of a MAP_SHARED mapping are
 * not copied either.  The child must not use the parent's uffds (they act
 * on the parent's mm): our atfork child handler closes them, probes afresh
 * and arms the child's copies of regions again with a uffd and a fault
 * thread of its own; the application mappings (which may be gone, their
 * address reused) are armed again at the child's first purge or vrange()
 * call (uffd_rearm), if they still map the file (appmap_holds), and so are
 * regions where the handler failed.  A child's copy that read a hole
 * before that has a page of zeros mapped there: arming unmaps the purged
 * pages before it poisons them (walk_poison_armed).  Every first touch of
 * the child's copies is a minor fault: a round trip per 2 MiB.
 *
 * The callback runs on the fault thread with no library lock held, so it
 * may call the library (mark, query, even create regions); it must not
 * destroy the region it is filling, nor touch a page an armed mapping
 * does not map (a hole: never touched, or purged; a page this process has
 * not touched yet) - that fault would wait for the thread that is running
 * the callback.  While it runs, other faults wait.
 * A kernel access to a purged page of a refill region (read(2) into it)
 * gets EFAULT where only UFFD_USER_MODE_ONLY was available (non-root).
 *
 * Locking: m->armed and the fill state are guarded by the file's lock (the
 * hooks run under it).  list_lock guards the list of armed mappings and
 * their busy counts; it is never taken while a file lock is held (fork's
 * prepare handlers take it before the file locks).
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
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

#include "app_map_faults.h"
#include "file_state.h"
#include "purge.h"
#include "region.h"
#include "uffd_purge.h"
#include "vma_query.h"

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
/* Minor faults on shmem: Linux 5.14 (the 6.1 headers have them; older
 * ones may not). */
#ifndef UFFD_FEATURE_MINOR_SHMEM
#define UFFD_FEATURE_MINOR_SHMEM (1 << 10)
#endif
#ifndef UFFDIO_REGISTER_MODE_MINOR
#define UFFDIO_REGISTER_MODE_MINOR ((__u64)1 << 2)
#endif
#ifndef UFFD_PAGEFAULT_FLAG_MINOR
#define UFFD_PAGEFAULT_FLAG_MINOR (1 << 2)
#endif
#ifndef _UFFDIO_CONTINUE
#define _UFFDIO_CONTINUE (0x07)
struct uffdio_continue {
	struct uffdio_range range;
	__u64 mode;
	__s64 mapped;
};
#define UFFDIO_CONTINUE _IOWR(UFFDIO, _UFFDIO_CONTINUE, struct uffdio_continue)
#endif

/* Fault messages read at once by the fault thread. */
#define UFFD_MSGS 16
/* Most pages one zero fill of a sequential first touch installs (1 MiB). */
#define FILL_MAX 256u
/* Pages a minor fault maps: the aligned block around it - one page table's
 * worth (2 MiB) - or, near a purged page, the kernel's own fault-around,
 * which a minor registration turns off (64 KiB). */
#define MINOR_BLOCK 512u
#define MINOR_MIN 16u

/*
 * An armed mapping: registered MISSING (and MINOR where minor_here()),
 * whole, on fault_fd, so every touch of a hole in it - a page another
 * process purged, or one never touched - and of a page it does not map yet
 * comes to the fault thread, which decides from the file's state.
 */
struct uffd_armed {
	struct uffd_armed *next;   /* armed list, list_lock */
	struct vmap *m;
	struct vfile *f;
	char *start;               /* the registered span */
	size_t len;
	unsigned int busy;         /* faults being served; list_lock */
	/* Under the file's lock (only the fault thread uses them). */
	char *run_end;             /* where the last zero fill ended */
	uint32_t win;              /* pages that fill took */
};

enum probe_state { PROBE_UNKNOWN, PROBE_OK, PROBE_FAILED };
enum open_how { OPEN_SYSCALL, OPEN_USER_ONLY, OPEN_DEVICE };

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int probe_state = PROBE_UNKNOWN;
static char reason[32];
static enum open_how open_how;
static int sigbus_fd = -1;  /* UFFD_FEATURE_SIGBUS: transient registrations */
static int fault_fd = -1;   /* armed mappings; probe_lock to open */
static bool thread_running; /* probe_lock */
static pthread_t fault_thread;

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t list_cond = PTHREAD_COND_INITIALIZER;
static struct uffd_armed *armed_list;
static struct uffd_armed *rearm_list; /* a fork child's, not yet again */
static _Atomic bool rearm_pending;
static bool minor_ok;       /* fault_fd takes minor faults; probe_lock */
static _Atomic uint64_t fallbacks;   /* mappings that could not be armed */
static char fallback_why[32];        /* the last reason, for stats */

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

static int uffd_register_mode(int fd, void *addr, size_t len, uint64_t mode,
			      uint64_t *ioctls)
{
	struct uffdio_register reg = {
		.range = { (uintptr_t)addr, len },
		.mode = mode,
	};

	if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
		return -errno;
	if (ioctls)
		*ioctls = reg.ioctls;
	return 0;
}

static int uffd_register(int fd, void *addr, size_t len, uint64_t *ioctls)
{
	return uffd_register_mode(fd, addr, len, UFFDIO_REGISTER_MODE_MISSING,
				  ioctls);
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

/* One registration of a shmem page, to see that the kernel takes it and
 * offers UFFDIO_POISON there. */
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

void uffd_fork_prepare(void)
{
	pthread_mutex_lock(&probe_lock);
	pthread_mutex_lock(&list_lock);
}

void uffd_fork_parent(void)
{
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_unlock(&probe_lock);
}

/*
 * The child: our uffds belong to the parent's mm and the kernel dropped
 * every registration of the child's copy (see the top).  Close them, forget
 * the registrations, and probe again on the child's next purge.
 */
static void rearm(bool regions_only);

void uffd_fork_child(void)
{
	struct uffd_armed *a, *next;

	if (sigbus_fd >= 0)
		close(sigbus_fd);
	if (fault_fd >= 0)
		close(fault_fd);
	sigbus_fd = fault_fd = -1;
	thread_running = false;
	/* The child's copies of armed mappings are not registered any more:
	 * arm them again below, with a uffd and a fault thread of the child's
	 * own (should that fail, the child's next purge tries again). */
	for (a = armed_list; a; a = next) {
		next = a->next;
		a->m->armed = NULL;
		a->busy = 0;
		a->next = rearm_list;
		rearm_list = a;
	}
	armed_list = NULL;
	atomic_store(&rearm_pending, rearm_list != NULL);
	if (atomic_load(&probe_state) == PROBE_OK)
		atomic_store(&probe_state, PROBE_UNKNOWN);
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_unlock(&probe_lock);
	/* The other modules' child handlers, which let go of locks we take,
	 * ran before this one (env.c); the application mappings wait for the
	 * child's first purge (rearm). */
	rearm(true);
}

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
	/*
	 * Minor faults (Linux 5.14): a touch of a page the file has but this
	 * mapping does not map comes to the fault thread too - a hole another
	 * mapping (a ZERO-mode one) filled after a purge.  Without them such
	 * a page reads zeros here: every armed mapping counts as a fallback
	 * (note_partial).  The kernel's word, not a trial registration: one
	 * that failed for want of memory or descriptors would cost minor
	 * faults for good; a mapping the kernel refuses them is counted when
	 * it is armed (arm_entry).
	 */
	minor_ok = have & UFFD_FEATURE_MINOR_SHMEM;
	sigbus_fd = fd;
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


/*
 * Can a whole registration stand in every process for the lifetime of a
 * mapping?  Only where the kernel's own accesses (read(2) into the
 * memory) come to the fault thread too: a UFFD_USER_MODE_ONLY uffd would
 * turn them into EFAULT on never-touched pages.
 */
static bool whole_ok(void)
{
	return open_how != OPEN_USER_ONLY;
}

/*
 * Register armed mappings for minor faults too?  Where the kernel has
 * them - but not on a user-mode-only uffd (a refill region's, armed there
 * anyway): the kernel's own accesses (read(2) into the memory) to every
 * page this mapping does not map yet would get EFAULT, not only to holes.
 */
static bool minor_here(void)
{
	return minor_ok && whole_ok();
}

/* ---- the fault thread ---------------------------------------------------- */

/* Is page pg of f purged?  File lock held. */
static bool page_purged(struct vfile *f, uint64_t pg)
{
	uint64_t vol = 0, purged = 0;

	return rt_count(&f->tree, pg, pg + 1, &vol, &purged) == 0 && purged;
}

/*
 * Fill [addr, addr + len) of an armed mapping with UFFDIO_ZEROPAGE (zero
 * pages into a shmem mapping) or UFFDIO_CONTINUE (map the file's pages),
 * stepping over pages that are there by now (-EEXIST), in at most
 * max_calls calls.  True if addr itself was filled (the kernel woke its
 * waiters).
 */
static bool fill_steps(unsigned long req, char *addr, size_t len, int max_calls)
{
	char *p = addr, *end = addr + len;
	bool first = false;

	for (int calls = 0; p < end && calls < max_calls; calls++) {
		/* Both requests: the range, a mode, then what was done. */
		union {
			struct uffdio_zeropage z;
			struct uffdio_continue c;
		} u = { .z = { .range = { (uintptr_t)p, (size_t)(end - p) } } };
		int64_t did;
		size_t done;
		int r = ioctl(fault_fd, req, &u);

		if (r == 0) {
			first = first || p == addr;
			break;
		}
		did = req == UFFDIO_ZEROPAGE ? u.z.zeropage : u.c.mapped;
		done = did > 0 ? (size_t)did : 0;
		if (p == addr && done)
			first = true;
		if (errno == EAGAIN && done) {
			p += done;
			continue;
		}
		if (errno != EEXIST)
			break;
		p += done + vr_page_size;
	}
	return first;
}

/* Zero pages into a shmem mapping, however many calls it takes. */
static bool zero_fill(char *addr, size_t len)
{
	return fill_steps(UFFDIO_ZEROPAGE, addr, len, INT_MAX);
}

/*
 * A hole nothing was lost from (never touched, or unmarked since the
 * purge): a zero page, as the kernel would have given it.  A first touch
 * that runs on from the last fill of this mapping takes twice as many
 * pages as that fill did (up to FILL_MAX), as long as none of them is
 * volatile: those pages could be purged and must stay holes until the
 * application touches them.  So memset of a fresh region costs one round
 * trip per megabyte, and scattered touches one page each.  File lock held.
 */
static void fill_not_purged(struct uffd_armed *a, char *page)
{
	uint64_t pg = (uint64_t)(page - a->m->base) >> vr_page_shift;
	uint64_t vol = 0, purged = 0;
	size_t w = 1, room = (size_t)(a->start + a->len - page) >> vr_page_shift;

	if (page == a->run_end) {
		w = a->win * 2u < FILL_MAX ? a->win * 2u : FILL_MAX;
		if (w < 1)
			w = 1;
		if (w > room)
			w = room;
		if (w > 1 && (rt_count(&a->f->tree, pg, pg + w, &vol, &purged) < 0 ||
			      vol + purged))
			w = 1;
	}
	a->win = (uint32_t)w;
	a->run_end = page + (w << vr_page_shift);
	if (!zero_fill(page, w << vr_page_shift))
		uffd_wake(fault_fd, page, vr_page_size);
}

/*
 * Map the file's pages into [addr, addr + len), stopping at a hole
 * (-EFAULT: its touch comes as a missing fault) or after a few steps: a
 * window is a guess, never worth more than a handful of calls.
 */
static bool continue_fill(char *addr, size_t len)
{
	return fill_steps(UFFDIO_CONTINUE, addr, len, 8);
}

/*
 * A minor fault: the file has the page, this mapping does not map it (a
 * fork child's first touch, a page another process or mapping wrote), and
 * it is not purged.  Map it, and with it the rest of its aligned block of
 * MINOR_BLOCK pages (or of MINOR_MIN, the kernel's own fault-around that a
 * minor registration turns off), unless a page of the block is purged: a
 * purged page the file has again (filled through a ZERO-mode mapping)
 * must come to the thread on its own touch.  Pages the file has are no
 * memory to allocate, so a block costs page table entries only, and
 * touches in any order cost a round trip per 2 MiB.  File lock held.
 */
static void map_not_purged(struct uffd_armed *a, char *page)
{
	static const size_t blocks[] = { MINOR_BLOCK, MINOR_MIN };
	char *lo = page, *hi = page + vr_page_size;

	for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		size_t bytes = blocks[i] << vr_page_shift;
		uintptr_t off = (uintptr_t)(page - a->m->base) & ~(uintptr_t)(bytes - 1);
		char *s = a->m->base + off, *e = s + bytes;
		uint64_t vol = 0, purged = 0;

		if (s < a->start)
			s = a->start;
		if (e > a->start + a->len)
			e = a->start + a->len;
		if (rt_count(&a->f->tree, (uint64_t)(s - a->m->base) >> vr_page_shift,
			     (uint64_t)(e - a->m->base) >> vr_page_shift,
			     &vol, &purged) == 0 && !purged) {
			lo = s;
			hi = e;
			break;
		}
	}
	if (!continue_fill(page, (size_t)(hi - page)))
		uffd_wake(fault_fd, page, vr_page_size);
	if (lo < page)
		continue_fill(lo, (size_t)(page - lo));
}

/*
 * A fault on a registration we keep no record of: the mapping's entry was
 * dropped while part of it stayed (a partial munmap).  Unregister that
 * piece, so it behaves as the kernel's, and let the toucher retry.
 */
static void forget_stray(char *page)
{
	struct vma v = { 0 };

	if (vma_query((uintptr_t)page, &v) == 0)
		uffd_unregister(fault_fd, (void *)v.start, v.end - v.start);
	uffd_wake(fault_fd, page, vr_page_size);
}

static struct uffd_armed *find_and_hold(const char *addr)
{
	struct uffd_armed *a;

	pthread_mutex_lock(&list_lock);
	for (a = armed_list; a; a = a->next) {
		if (addr >= a->start && (size_t)(addr - a->start) < a->len) {
			a->busy++;
			break;
		}
	}
	pthread_mutex_unlock(&list_lock);
	return a;
}

static void release(struct uffd_armed *a)
{
	pthread_mutex_lock(&list_lock);
	if (--a->busy == 0)
		pthread_cond_broadcast(&list_cond);
	pthread_mutex_unlock(&list_lock);
}

/* Purged and still volatile: the toucher gets SIGBUS from the marker (an
 * earlier poison of the purge may be there already). */
static void poison_and_wake(char *page)
{
	uffd_poison(fault_fd, page, vr_page_size);
	uffd_wake(fault_fd, page, vr_page_size);
}

/* A purged page of a region with a callback.  File lock held on entry,
 * not on return. */
static void serve_refill(struct uffd_armed *a, struct vrange_region *r,
			 char *page, uint64_t pg, void *buf)
{
	vrange_refill_fn fn = r->refill;
	void *arg = r->refill_arg;
	size_t off = (size_t)(page - a->m->base);
	int ret;

	/* The callback may be slow and may call the library: no lock held. */
	vfile_unlock(a->f);
	ret = fn(r, off, buf, vr_page_size, arg);
	if (vfile_lock(a->f) < 0) {
		uffd_wake(fault_fd, page, vr_page_size);
		return;
	}
	if (!page_purged(a->f, pg)) {
		/* Marked non-volatile meanwhile: it is a fresh zero page now. */
		if (!zero_fill(page, vr_page_size))
			uffd_wake(fault_fd, page, vr_page_size);
	} else if (ret < 0) {
		/* The toucher retries, meets the marker: SIGBUS. */
		poison_and_wake(page);
	} else {
		struct uffdio_copy c = {
			.dst = (uintptr_t)page,
			.src = (uintptr_t)buf,
			.len = vr_page_size,
		};

		if (ioctl(fault_fd, UFFDIO_COPY, &c) == 0) {
			/*
			 * Counted as volatile again.  Should the tree have no
			 * node for the split (a foreign file's private arena
			 * is full) the page stays "purged": a later
			 * mark_nonvolatile says PURGED, never a false INTACT.
			 */
			rt_unpurge(&a->f->tree, pg, pg + 1,
				   region_prio(r), vr_next_seq(), NULL);
			purge_note_refill(1);
		} else {
			/* Filled by some other way (-EEXIST). */
			uffd_wake(fault_fd, page, vr_page_size);
		}
	}
	vfile_unlock(a->f);
}

static void serve_fault(char *page, bool minor, void *buf)
{
	struct uffd_armed *a = find_and_hold(page);
	struct vrange_region *r;
	uint64_t pg;

	if (!a) {
		forget_stray(page);
		return;
	}
	pg = (uint64_t)(page - a->m->base) >> vr_page_shift;
	if (vfile_lock(a->f) < 0) {
		/* Wedged state: the toucher retries until it can be had. */
		uffd_wake(fault_fd, page, vr_page_size);
		goto out;
	}
	r = a->m->region;
	if (!page_purged(a->f, pg)) {
		if (minor)
			map_not_purged(a, page);
		else
			fill_not_purged(a, page);
	} else if (r && r->refill) {
		/* Purged, yet the file has the page: another mapping filled
		 * the hole (zeros, or whatever was written there while it was
		 * volatile).  Punch it again, so the callback's page can go
		 * in (UFFDIO_COPY needs a hole). */
		if (minor)
			fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  (off_t)(pg << vr_page_shift), (off_t)vr_page_size);
		serve_refill(a, r, page, pg, buf);
		goto out;
	} else {
		/* Purged: a hole, or a page another mapping filled since (a
		 * minor fault) - SIGBUS either way, until it is unmarked. */
		poison_and_wake(page);
	}
	vfile_unlock(a->f);
out:
	release(a);
}

/* The fault thread's page buffer: made before the thread starts (a thread
 * that could not get one would leave touches blocked), kept for good. */
static void *fault_buf; /* probe_lock */

/*
 * Posted by a new fault thread once it runs: its creator waits for it, so
 * no fork() can copy the process while the thread is still starting up
 * (inside its C library's or a sanitizer's allocator: the child would
 * inherit that lock held, and its own fault thread hang on it).
 */
static sem_t fault_started; /* probe_lock */

static void *fault_main(void *arg)
{
	struct uffd_msg msgs[UFFD_MSGS];
	int fd = (int)(intptr_t)arg;
	void *buf = fault_buf;

	sem_post(&fault_started);

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
			serve_fault((char *)(a & ~(uintptr_t)(vr_page_size - 1)),
				    msgs[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_MINOR,
				    buf);
		}
	}
	pthread_mutex_lock(&probe_lock);
	if (fault_fd == fd)
		thread_running = false;
	pthread_mutex_unlock(&probe_lock);
	return NULL;
}

/* The fault uffd and its thread, once per process (and per fork child). */
static int ensure_fault_thread(void)
{
	sigset_t all, old;
	int r = 0, fd;

	if (!ensure_probed())
		return -EOPNOTSUPP;
	pthread_mutex_lock(&probe_lock);
	if (thread_running)
		goto out;
	if (fault_fd < 0) {
		fd = uffd_open_how(open_how, O_CLOEXEC);
		if (fd < 0) {
			r = fd;
			goto out;
		}
		r = uffd_api(fd, UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_POISON |
				 (minor_ok ? UFFD_FEATURE_MINOR_SHMEM : 0), NULL);
		if (r < 0) {
			close(fd);
			goto out;
		}
		fault_fd = fd;
	}
	if (!fault_buf) {
		/* MAP_NORESERVE: a flag the application's anonymous memory
		 * lacks, so the kernel never merges this page into a mapping
		 * next to it - which vrange() would then register whole, this
		 * page too (the model soak found it registered at the end of
		 * a seed, 1 page, the application's neighbour unmapped). */
		void *b = mmap(NULL, vr_page_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (b == MAP_FAILED) {
			r = -errno;
			goto out;
		}
		fault_buf = b;
	}
	/* Application signals go to application threads, never here. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	sem_init(&fault_started, 0, 0);
	r = -pthread_create(&fault_thread, NULL, fault_main,
			    (void *)(intptr_t)fault_fd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0) {
		pthread_detach(fault_thread);
		while (sem_wait(&fault_started) < 0 && errno == EINTR)
			;
		thread_running = true;
	}
out:
	pthread_mutex_unlock(&probe_lock);
	return r;
}

/* ---- arming -------------------------------------------------------------- */

static void note_fallback(struct vmap *m, int err)
{
	const char *why;

	switch (err) {
	case -EPERM: why = "EPERM: read-only mapping"; break;
	case -EBUSY: why = "EBUSY: application's uffd"; break;
	case -ENOMEM: why = "ENOMEM"; break;
	default: why = "not registrable"; break;
	}
	m->fallback = true;
	m->sigbus = false;
	atomic_fetch_add(&fallbacks, 1);
	pthread_mutex_lock(&list_lock);
	snprintf(fallback_why, sizeof(fallback_why), "%s", why);
	pthread_mutex_unlock(&list_lock);
	vr_debug("uffd: the mapping at %p cannot raise SIGBUS (%s): purged "
		 "pages read zeros there", (void *)(m->base + m->first), why);
}

/*
 * A mapping that raises SIGBUS, but not everywhere the contract asks
 * (contract 6: one file, two access modes): where a purged hole is filled
 * through another mapping (a ZERO-mode one, or any the library never saw)
 * before it is touched here, it reads zeros - because the kernel has no
 * minor faults on shmem (before 5.14), or because the mapping is only
 * registered around this process's own purges (UFFD_USER_MODE_ONLY).
 * Counted with the fallbacks, m->sigbus kept.
 */
static void note_partial(struct vmap *m, const char *why)
{
	if (m->fallback)
		return;
	m->fallback = true;
	atomic_fetch_add(&fallbacks, 1);
	pthread_mutex_lock(&list_lock);
	snprintf(fallback_why, sizeof(fallback_why), "%s", why);
	pthread_mutex_unlock(&list_lock);
	vr_debug("uffd: the mapping at %p raises SIGBUS only in part (%s): a "
		 "purged page filled through another mapping reads zeros there",
		 (void *)(m->base + m->first), why);
}

/* Armed with minor faults after all (a refill, a fork child's re-arming). */
static void clear_partial(struct vmap *m)
{
	if (m->fallback && m->sigbus) {
		m->fallback = false;
		atomic_fetch_sub(&fallbacks, 1);
	}
}

static void list_add(struct uffd_armed *a)
{
	pthread_mutex_lock(&list_lock);
	a->next = armed_list;
	armed_list = a;
	pthread_mutex_unlock(&list_lock);
}

/* Take a off the list once the fault thread is done with it. */
static void unlist(struct uffd_armed *a)
{
	pthread_mutex_lock(&list_lock);
	for (struct uffd_armed **pp = &armed_list; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	/* The fault thread itself (a callback destroying another region)
	 * is not serving a: never wait for ourselves. */
	if (!(thread_running && pthread_equal(pthread_self(), fault_thread)))
		while (a->busy)
			pthread_cond_wait(&list_cond, &list_lock);
	pthread_mutex_unlock(&list_lock);
}

/* A purged range of the file, poisoned in a mapping that joins it. */
static int walk_poison_new(const struct rt_range *rr, void *arg)
{
	struct vmap *m = arg;
	size_t off = (size_t)rr->start << vr_page_shift;
	size_t len = (size_t)(rr->end - rr->start) << vr_page_shift;

	if (rr->state != RT_PURGED || off >= m->size)
		return 0;
	if (off < m->first) {
		if (off + len <= m->first)
			return 0;
		len -= m->first - off;
		off = m->first;
	}
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

/*
 * Not armed (a user-mode-only uffd, no fault thread): the mapping is
 * registered only around purges.  See now whether it can be registered at
 * all, and poison what was purged before it came.
 */
static int arm_transient(struct vfile *f, struct vmap *m)
{
	char *start = m->base + m->first;
	size_t len = m->size - m->first;
	int r = uffd_register(sigbus_fd, start, len, NULL);

	/* Only the kernel's refusals for good (a read-only mapping, the
	 * application's own uffd, a kind it does not take) mean zeros; any
	 * other failure is left to the purges' own registrations, which
	 * leave the pages unpunched when they fail. */
	if (r == -EPERM || r == -EBUSY || r == -EINVAL)
		return r;
	if (r == 0)
		uffd_unregister(sigbus_fd, start, len);
	if (vfile_lock(f) == 0) {
		rt_visit(&f->tree, m->first >> vr_page_shift,
			 m->size >> vr_page_shift, walk_poison_new, m);
		vfile_unlock(f);
	}
	return 0;
}

/* A purged range of the file, poisoned in an armed mapping that joins. */
static int walk_poison_armed(const struct rt_range *rr, void *arg)
{
	struct uffd_armed *a = arg;
	char *s = a->m->base + ((size_t)rr->start << vr_page_shift);
	char *e = a->m->base + ((size_t)rr->end << vr_page_shift);

	if (rr->state != RT_PURGED)
		return 0;
	if (s < a->start)
		s = a->start;
	if (e > a->start + a->len)
		e = a->start + a->len;
	if (s < e) {
		/* A page this mapping maps already (a fork child's copy read
		 * the hole before it was armed again: the kernel filled it)
		 * would stay in place of the marker.  Unmapped first - a
		 * shared mapping's page stays in the file - it comes to the
		 * thread on its next touch, if the poison does not land. */
		madvise(s, (size_t)(e - s), MADV_DONTNEED);
		uffd_poison(fault_fd, s, (size_t)(e - s));
	}
	return 0;
}

/* Register a's mapping for good and list it.  No lock held. */
static int arm_entry(struct uffd_armed *a)
{
	bool minor = minor_here();
	int r;

	/* Listed first: the thread must know every fault it can be sent. */
	list_add(a);
	r = vfile_lock(a->f);
	if (r == 0) {
		r = uffd_register_mode(fault_fd, a->start, a->len,
				       UFFDIO_REGISTER_MODE_MISSING |
				       (minor ? UFFDIO_REGISTER_MODE_MINOR : 0),
				       NULL);
		/* A kind of mapping that takes missing faults only: armed for
		 * those, counted below. */
		if (r == -EINVAL && minor) {
			minor = false;
			r = uffd_register(fault_fd, a->start, a->len, NULL);
		}
		if (r == 0) {
			a->m->armed = a;
			/* Pages purged before this mapping came: poisoned now,
			 * as the purge did in the mappings it saw.  Left to the
			 * thread, a hole that a mapping the library never saw
			 * filled with zeros meanwhile would read zeros here.
			 * A refill region's go to its callback instead. */
			if (!(a->m->region && a->m->region->refill))
				rt_visit(&a->f->tree, a->m->first >> vr_page_shift,
					 a->m->size >> vr_page_shift,
					 walk_poison_armed, a);
		}
		vfile_unlock(a->f);
	}
	if (r < 0) {
		unlist(a);
	} else if (minor) {
		clear_partial(a->m);
	} else {
		note_partial(a->m, !minor_ok ? "no minor faults on shmem"
			     : whole_ok() ? "EINVAL: no minor faults"
					  : "UFFD_USER_MODE_ONLY");
	}
	return r;
}

static int arm_whole(struct vfile *f, struct vmap *m)
{
	struct uffd_armed *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return -ENOMEM;
	a->m = m;
	a->f = f;
	a->start = m->base + m->first;
	a->len = m->size - m->first;
	r = arm_entry(a);
	if (r < 0)
		free(a);
	return r;
}

/* Take the first entry of rearm_list (a region's only, when asked). */
static struct uffd_armed *rearm_next(bool regions_only)
{
	struct uffd_armed *a = NULL;

	pthread_mutex_lock(&list_lock);
	for (struct uffd_armed **pp = &rearm_list; *pp; pp = &(*pp)->next) {
		if (!regions_only || (*pp)->m->region) {
			a = *pp;
			*pp = a->next;
			break;
		}
	}
	if (!rearm_list)
		atomic_store(&rearm_pending, false);
	pthread_mutex_unlock(&list_lock);
	return a;
}

/*
 * Arm again what a fork child inherited.  A region's mapping is the
 * library's: it is still there.  An application mapping may have been
 * unmapped since it was learnt (its entry not swept yet) and its address
 * taken by another mapping, so it is armed again only if it still maps
 * the file at the same offsets - asked after fork, once every module's
 * child handler has run (the purge entry), never from the handler itself.
 */
static void rearm(bool regions_only)
{
	struct uffd_armed *a;

	if (!atomic_load_explicit(&rearm_pending, memory_order_relaxed))
		return;
	if (ensure_fault_thread() < 0)
		return; /* they stay registered around purges only */
	while ((a = rearm_next(regions_only))) {
		a->run_end = NULL;
		a->win = 0;
		if ((!a->m->region &&
		     !appmap_holds(a->f, a->m, a->m->first,
				       a->m->size - a->m->first)) ||
		    arm_entry(a) < 0)
			free(a);
	}
}

void uffd_rearm(void)
{
	rearm(false);
}

int uffd_arm(struct vfile *f, struct vmap *m, bool force)
{
	int r;

	if (!m->sigbus || m->armed)
		return 0;
	if (!ensure_probed())
		return -EOPNOTSUPP;
	r = -EAGAIN;
	if (whole_ok() || force) {
		r = ensure_fault_thread();
		if (r == 0)
			r = arm_whole(f, m);
		if (r < 0 && force)
			return r; /* a refill asked for it: m stays as it was */
	}
	/* Not whole, or no thread (out of descriptors, a fault in its
	 * setup...) or no memory: registered around purges, as before.  Only
	 * a mapping the kernel will not register at all falls back to zeros. */
	if (r < 0) {
		r = arm_transient(f, m);
		if (r == 0)
			note_partial(m, whole_ok() ? "armed around purges only"
						   : "UFFD_USER_MODE_ONLY");
	}
	if (r < 0)
		note_fallback(m, r);
	return r;
}

void uffd_forget_map(struct vfile *f, struct vmap *m)
{
	struct uffd_armed *a;
	bool locked = vfile_lock(f) == 0;

	a = m->armed;
	m->armed = NULL;
	if (locked)
		vfile_unlock(f);
	if (m->fallback) {
		m->fallback = false;
		atomic_fetch_sub(&fallbacks, 1);
	}
	pthread_mutex_lock(&list_lock);
	for (struct uffd_armed **pp = &rearm_list; *pp; pp = &(*pp)->next) {
		if ((*pp)->m == m) {
			struct uffd_armed *gone = *pp;

			*pp = gone->next;
			free(gone);
			break;
		}
	}
	pthread_mutex_unlock(&list_lock);
	if (a) {
		unlist(a);
		free(a);
	}
}

void uffd_fallbacks(uint64_t *count, char *why, size_t size)
{
	*count = atomic_load(&fallbacks);
	pthread_mutex_lock(&list_lock);
	snprintf(why, size, "%s", *count ? fallback_why : "");
	pthread_mutex_unlock(&list_lock);
}

/* ---- the purge hooks ----------------------------------------------------- */

/*
 * An armed mapping stays registered for good: a poison that fails costs a
 * trip to the fault thread, which poisons on touch from the file's state -
 * unless the hole is filled first through a mapping nobody armed (a read
 * through a read-only one allocates the page): then the touch finds a page
 * and reads zeros.  So every purge poisons its holes at once; leaving them
 * all to the thread failed test_anon's shm_chunks26_sigbus that way.  A mapping that is not armed (a user-mode-only uffd) is
 * registered around each purge; when its poison or its unregistering
 * fails, the registration stays (m->reg_stayed): it raises SIGBUS as the
 * markers would, and unmarking drops it before the pages are handed back.
 */

/* A span arming (file_state.c: scattered pages of one batch): an armed
 * mapping is registered already, so only a refill region says no. */
bool uffd_span_ok(const struct vmap *m)
{
	if (m->armed)
		return !(m->region && m->region->refill);
	return sigbus_fd >= 0;
}

/*
 * Poison what a purge punched in an armed mapping at once?  So this
 * process's touches cost no trip to the thread - but the ioctl costs a
 * third of the punch, per run.  Not in a refill region (its callback
 * serves the holes) nor in a region no other mapping can reach yet: the
 * danger poisoning guards against is a hole read through a mapping the
 * thread does not watch, which fills it with zeros that this mapping then
 * shows instead of SIGBUS.  Such a region's holes are poisoned when it
 * becomes reachable (uffd_region_poison_holes); until then a touch goes to
 * the thread, which poisons that page.  Under the file's lock.
 */
static bool poison_now(const struct vmap *m)
{
	return !(m->region && (m->region->refill ||
			       atomic_load(&m->region->file->unreached)));
}

/* After a punch: an armed mapping's part (true), else the caller's. */
static bool armed_after_punch(struct vmap *m, size_t off, size_t len)
{
	if (!m->armed)
		return false;
	if (poison_now(m))
		uffd_poison(fault_fd, m->base + off, len);
	return true;
}

void uffd_poison_armed(struct vmap *m, size_t off, size_t len)
{
	if (armed_after_punch(m, off, len))
		return;
	if (sigbus_fd >= 0 && uffd_poison(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->reg_stayed, true);
}

void uffd_disarm(struct vmap *m, size_t off, size_t len)
{
	if (m->armed || sigbus_fd < 0 || atomic_load(&m->reg_stayed))
		return; /* a registration that must stay: unmarking drops it */
	if (uffd_unregister(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->reg_stayed, true);
}

int uffd_before_discard(struct vmap *m, size_t off, size_t len)
{
	int r;

	if (m->armed)
		return 0; /* registered for good: the thread serves the holes */
	if (!ensure_probed())
		return -EOPNOTSUPP;
	/* Touches of what the punch removes SIGBUS from here on. */
	r = uffd_register(sigbus_fd, m->base + off, len, NULL);
	if (r < 0)
		vr_debug("uffd: registering %zu bytes for a purge failed (%d): "
			 "those pages will read zeros", len, r);
	return r;
}

void uffd_cancel_discard(struct vmap *m, size_t off, size_t len)
{
	if (!m->armed && sigbus_fd >= 0 &&
	    uffd_unregister(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->reg_stayed, true);
}

void uffd_after_discard(struct vmap *m, size_t off, size_t len)
{
	if (armed_after_punch(m, off, len))
		return;
	if (sigbus_fd < 0)
		return;
	/* Lets the VMAs merge back: nothing of the purge stays registered,
	 * unless poisoning or unregistering failed (see above). */
	if (uffd_poison(sigbus_fd, m->base + off, len) < 0 ||
	    uffd_unregister(sigbus_fd, m->base + off, len) < 0)
		atomic_store(&m->reg_stayed, true);
}

int uffd_after_nonvolatile(struct vmap *m, size_t off, size_t len)
{
	int r;

	/* A purge's registration that stayed would raise SIGBUS on the
	 * fresh page: drop it first.  Plain system calls: async-signal-safe. */
	if (!m->armed && sigbus_fd >= 0 && atomic_load(&m->reg_stayed) &&
	    (r = uffd_unregister(sigbus_fd, m->base + off, len)) < 0)
		return r;
	/* Clears poison markers; the next touch maps a fresh zero page (in an
	 * armed mapping through the fault thread). */
	return madvise(m->base + off, len, MADV_DONTNEED) < 0 ? -errno : 0;
}

/* ---- refill on and off --------------------------------------------------- */

/* A purged range while the callback comes (on) or goes. */
static int walk_purged(const struct rt_range *rr, void *arg)
{
	struct vrange_region *r = arg;
	size_t off = (size_t)rr->start << vr_page_shift;
	size_t len = (size_t)(rr->end - rr->start) << vr_page_shift;

	if (rr->state != RT_PURGED || off >= r->map.size)
		return 0;
	if (len > r->map.size - off)
		len = r->map.size - off;
	if (r->refill) {
		madvise(r->map.base + off, len, MADV_DONTNEED); /* to the thread */
		return 0;
	}
	return uffd_poison(fault_fd, r->map.base + off, len);
}

/* Every purged page of r's mapping, to the callback or poisoned as r's
 * refill says.  Tree lock held. */
static int walk_holes(struct vrange_region *r)
{
	return rt_visit(&r->file->tree, 0, r->map.size >> vr_page_shift,
			walk_purged, r);
}

int uffd_region_poison_holes(struct vrange_region *r)
{
	return r->map.armed && !r->refill ? walk_holes(r) : 0;
}

int uffd_region_refill(struct vrange_region *r)
{
	int ret;

	if (!r->map.sigbus)
		return r->refill ? -EOPNOTSUPP : 0; /* ZERO mode: never purged to us */
	if (r->refill && !r->map.armed) {
		/* A refill needs the thread even where SIGBUS mode does not
		 * (user-mode-only uffd: kernel accesses get EFAULT there). */
		ret = uffd_arm(r->file, &r->map, true);
		if (ret < 0)
			return ret;
	}
	ret = vfile_lock(r->file);
	if (ret < 0)
		return ret;
	if (r->map.armed) /* a poison that fails: the thread poisons on touch */
		walk_holes(r);
	vfile_unlock(r->file);
	return 0;
}
