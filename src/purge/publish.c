/* SPDX-License-Identifier: MIT */
/*
 * publish.c - keep this process's record for vrangectl (see publish.h):
 * a memfd mapped shared, rewritten under a mutex and a sequence count on
 * slow paths only.  Nothing here can fail a library call: without a memfd
 * the process is simply not listed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pressure.h"
#include "publish.h"
#include "purge.h"
#include "uffd_purge.h"
#include "vrange.h"

static pthread_mutex_t pub_lock = PTHREAD_MUTEX_INITIALIZER;
static bool pub_off, pub_broken;
static int pub_fd = -1;
static struct pub_hdr *pub;
static size_t pub_cap;          /* entries the mapping has room for */
static uint32_t **owners;       /* owners[i]: where entry i's slot is kept */

static void fill_status(void);

static struct pub_file *entries(void)
{
	return (struct pub_file *)(pub + 1);
}

static size_t bytes_for(size_t cap)
{
	size_t b = sizeof(struct pub_hdr) + cap * sizeof(struct pub_file);

	return (b + vr_page_size - 1) & ~(vr_page_size - 1);
}

static bool create(void)
{
	/* 64 KiB (pages untouched cost nothing): room for over a thousand
	 * files before it has to grow. */
	size_t cap = ((64u << 10) - sizeof(struct pub_hdr)) / sizeof(struct pub_file);
	int fd = memfd_create(PUB_NAME, MFD_CLOEXEC);
	void *p = MAP_FAILED;

	if (fd >= 0 && vr_ftruncate(fd, bytes_for(cap)) == 0)
		p = mmap(NULL, bytes_for(cap), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		if (fd >= 0)
			close(fd);
		pub_broken = true; /* not listed; never retried on every call */
		return false;
	}
	pub = p;
	pub_fd = fd;
	pub_cap = cap;
	memcpy(pub->magic, PUB_MAGIC, sizeof(PUB_MAGIC));
	pub->version = PUB_VERSION;
	pub->hdr_bytes = sizeof(struct pub_hdr);
	pub->entry_bytes = sizeof(struct pub_file);
	pub->page_size = (uint32_t)vr_page_size;
	pub->pid = getpid();
	fill_status();
	return true;
}

/* Room for n entries (lock held). */
static bool reserve(size_t n)
{
	size_t cap;
	void *p;
	uint32_t **o;

	if (pub_off || pub_broken || (!pub && !create()))
		return false;
	if (n > PUB_MAX_FILES)
		return false;
	if (n > pub_cap) {
		cap = pub_cap * 2 > n ? pub_cap * 2 : n;
		if (vr_ftruncate(pub_fd, bytes_for(cap)) < 0)
			return false;
		p = mremap(pub, bytes_for(pub_cap), bytes_for(cap), MREMAP_MAYMOVE);
		if (p == MAP_FAILED) {
			if (vr_ftruncate(pub_fd, bytes_for(pub_cap)) < 0)
				pub_broken = true;
			return false;
		}
		pub = p;
		pub_cap = cap;
	}
	if (n > 0 && !owners) {
		/* Room for every entry there may ever be; pages are only used
		 * as entries are (calloc would touch them all where malloc
		 * perturbs, and this is a library for low memory). */
		o = mmap(NULL, PUB_MAX_FILES * sizeof(*o), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (o == MAP_FAILED)
			return false;
		owners = o;
	}
	return true;
}

static void write_begin(void)
{
	uint32_t s = atomic_load_explicit(&pub->seq, memory_order_relaxed);

	atomic_store_explicit(&pub->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void write_end(void)
{
	uint32_t s = atomic_load_explicit(&pub->seq, memory_order_relaxed);

	atomic_store_explicit(&pub->seq, s + 1, memory_order_release);
}

void publish_disable(void)
{
	pthread_mutex_lock(&pub_lock);
	pub_off = true;
	pthread_mutex_unlock(&pub_lock);
}

void publish_set(uint32_t *slot, const struct pub_file *e)
{
	uint32_t n;

	pthread_mutex_lock(&pub_lock);
	if (*slot == 0 && reserve((pub ? pub->nfiles : 0) + 1u)) {
		n = pub->nfiles;
		owners[n] = slot;
		*slot = n + 1;
		write_begin();
		entries()[n] = *e;
		pub->nfiles = n + 1;
		write_end();
	} else if (*slot && pub && *slot <= pub->nfiles) {
		write_begin();
		entries()[*slot - 1] = *e;
		write_end();
	}
	pthread_mutex_unlock(&pub_lock);
}

void publish_del(uint32_t *slot)
{
	uint32_t i, last;

	pthread_mutex_lock(&pub_lock);
	if (*slot && pub && *slot <= pub->nfiles) {
		i = *slot - 1;
		last = pub->nfiles - 1;
		write_begin();
		if (i != last) {
			entries()[i] = entries()[last];
			owners[i] = owners[last];
			*owners[i] = i + 1;
		}
		pub->nfiles--;
		write_end();
	}
	*slot = 0;
	pthread_mutex_unlock(&pub_lock);
}

/* Counters, pressure source, monitor (lock held, record mapped). */
static void fill_status(void)
{
	struct vrange_stats st;
	struct purge_counters pc;

	memset(&st, 0, sizeof(st));
	pressure_fill_stats(&st);
	purge_get_counters(&pc);
	write_begin();
	pub->purges = pc.purges;
	pub->purged_total = pc.purged_total;
	pub->purged_cost = pc.purged_cost;
	pub->pressure_events = pc.pressure_events;
	pub->refills = pc.refills;
	/* Running, even while an autostarted thread still looks for its
	 * sources (it publishes again once it has them). */
	pub->monitor = pressure_running() || strcmp(st.pressure_source, "none") != 0;
	memcpy(pub->pressure_source, st.pressure_source, sizeof(pub->pressure_source));
	strncpy(pub->access_fallback, uffd_fallback_reason(),
		sizeof(pub->access_fallback) - 1);
	write_end();
}

/* A process with no state yet has no record: it is not listed. */
void publish_status(void)
{
	pthread_mutex_lock(&pub_lock);
	if (pub && !pub_off)
		fill_status();
	pthread_mutex_unlock(&pub_lock);
}

void publish_fork_prepare(void)
{
	pthread_mutex_lock(&pub_lock);
}

void publish_fork_parent(void)
{
	pthread_mutex_unlock(&pub_lock);
}

/*
 * The child shares the parent's record (same memfd, mapped shared): it
 * must not write there, and must not be listed with the parent's files.
 * Drop it; the child's own record starts empty.
 */
void publish_fork_child(void)
{
	if (pub)
		munmap(pub, bytes_for(pub_cap));
	if (pub_fd >= 0)
		close(pub_fd);
	pub = NULL;
	pub_fd = -1;
	pub_cap = 0;
	pub_broken = false;
	pthread_mutex_init(&pub_lock, NULL);
}
