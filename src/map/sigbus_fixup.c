/* SPDX-License-Identifier: MIT */
/* sigbus_fixup.c - see sigbus_fixup.h. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "any_mapping.h"
#include "file_state.h"
#include "region.h"
#include "sigbus_fixup.h"
#include "uffd_purge.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sigaction previous;
/*
 * The last address this thread fixed, and how many times markers had been
 * installed then: a second fault there with none installed in between is
 * genuine (the marker was not the cause).  After a purge, or a SIGBUS
 * region made at the same address over purged pages, the page may carry a
 * new stale marker (unmarked by another process again).
 */
static __thread uintptr_t last_fixed;
static __thread uint64_t last_fixed_gen;

/*
 * Is the page at addr, in a mapping the library knows (a SIGBUS-mode
 * region, or an application mapping passed to vrange()), no longer
 * purged?
 */
static bool stale_marker(void *addr)
{
	bool partly, stale = false;
	struct vrange_region *r = region_lookup(addr, 1, &partly);
	struct vfile *f = NULL;
	uint64_t page = 0, vol = 0, purged = 0;

	if (r && r->map.sigbus) {
		f = r->file;
		page = (uint64_t)((char *)addr - r->map.base) >> vr_page_shift;
	} else if (!r) {
		f = anymap_file_at(addr, &page);
	}
	if (!f || vfile_lock(f) < 0)
		return false;
	if (rt_count(&f->tree, page, page + 1, &vol, &purged) == 0)
		stale = purged == 0;
	vfile_unlock(f);
	return stale;
}

static void chain(int sig, siginfo_t *si, void *uc)
{
	if (previous.sa_flags & SA_SIGINFO) {
		previous.sa_sigaction(sig, si, uc);
		return;
	}
	if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
		previous.sa_handler(sig);
		return;
	}
	/* Default action: return and let the access fault again, unhandled. */
	signal(SIGBUS, SIG_DFL);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t page = (uintptr_t)si->si_addr & ~(uintptr_t)(vr_page_size - 1);
	uint64_t gen = atomic_load(&uffd_poison_gen); /* async-signal-safe */

	if (si->si_code == BUS_ADRERR &&
	    (page != last_fixed || gen != last_fixed_gen) &&
	    stale_marker(si->si_addr)) {
		last_fixed = page;
		last_fixed_gen = gen;
		madvise((void *)page, vr_page_size, MADV_DONTNEED);
		return; /* the access is retried and now finds the page */
	}
	last_fixed = 0;
	chain(sig, si, uc);
}

static void install_once(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &previous);
}

void sigbus_fixup_install(void)
{
	pthread_once(&once, install_once);
}
