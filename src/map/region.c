/* SPDX-License-Identifier: MIT */
/*
 * region.c - regions: memfds the library creates or adopts and maps, and
 * marking by region offset (the address table: region_table.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "pressure.h"
#include "region.h"
#include "region_table.h"
#include "shared_file.h"
#include "shmem.h"
#include "sigbus_fixup.h"
#include "uffd_purge.h"

/* memfd names: the kernel takes 249 bytes after its "memfd:" prefix. */
#define MEMFD_NAME_MAX 249

int vr_page_range(uint64_t off, uint64_t len, uint64_t size, bool inward,
		  uint64_t *start, uint64_t *end)
{
	uint64_t mask = vr_page_size - 1, last;

	/* Nothing asked, nothing touched, wherever off points: rounding an
	 * empty range outward would name the page around off. */
	if (len == 0) {
		*start = *end = 0;
		return 0;
	}
	if (off > UINT64_MAX - len || off + len > size)
		return -EINVAL;
	last = off + len;
	if (inward) {
		*start = (off + mask) >> vr_page_shift;
		*end = last >> vr_page_shift;
		if (*end < *start)
			*end = *start;
	} else {
		*start = off >> vr_page_shift;
		*end = (last >> vr_page_shift) + ((last & mask) != 0);
	}
	return 0;
}

static int choose_access(unsigned int flags, unsigned int *access)
{
	const unsigned int both = VRANGE_ACCESS_ZERO | VRANGE_ACCESS_SIGBUS;

	if ((flags & ~both) || (flags & both) == both)
		return -EINVAL;
	if (flags & VRANGE_ACCESS_ZERO) {
		*access = VRANGE_ACCESS_ZERO;
		return 0;
	}
	if (!uffd_available()) {
		if (flags & VRANGE_ACCESS_SIGBUS)
			return -EOPNOTSUPP;
		*access = VRANGE_ACCESS_ZERO;
		return 0;
	}
	*access = VRANGE_ACCESS_SIGBUS;
	return 0;
}

/*
 * The inline fast path of the public header (docs/abi.md, "The inline fast
 * path") reads the library's memory through the structs vrange.h declares:
 * they must be the library's own layouts.
 */
_Static_assert(sizeof(struct vrange_inline_word) == sizeof(struct pw_word) &&
	       offsetof(struct vrange_inline_word, seq) == offsetof(struct pw_word, seq) &&
	       offsetof(struct vrange_inline_word, prio) == offsetof(struct pw_word, prio) &&
	       offsetof(struct vrange_inline_word, state) == offsetof(struct pw_word, state) &&
	       offsetof(struct vrange_inline_word, cost) == offsetof(struct pw_word, cost),
	       "the inline word");
_Static_assert(offsetof(struct vrange_inline_words, ord_built) == offsetof(struct pw_hdr, ord_built) &&
	       offsetof(struct vrange_inline_words, ord_stale) == offsetof(struct pw_hdr, ord_stale) &&
	       offsetof(struct vrange_inline_words, fast_off) == offsetof(struct pw_hdr, fast_off) &&
	       offsetof(struct vrange_inline_words, owner) == offsetof(struct pw_hdr, owner) &&
	       sizeof(((struct pw_hdr *)0)->owner) == sizeof(((struct vrange_inline_words *)0)->owner) &&
	       offsetof(struct vrange_inline_words, stripe) == PW_STRIPES_AT &&
	       sizeof(struct vrange_inline_words) == PW_HDR_BYTES &&
	       sizeof(struct vrange_inline_stripe) == sizeof(struct pw_stripe) &&
	       offsetof(struct pw_stripe, vol) == 0 &&
	       offsetof(struct vrange_inline_stripe, busy) == offsetof(struct pw_stripe, busy) &&
	       offsetof(struct vrange_inline_words, plain) == offsetof(struct pw_hdr, plain) &&
	       sizeof(((struct pw_hdr *)0)->plain) == sizeof(uint32_t) &&
	       PW_STRIPES == 4 && PW_RT_VOLATILE == 1 && PW_COST_MAX == 0xffff,
	       "the inline words' header");
_Static_assert(offsetof(struct vrange_inline_pw, hdr) == offsetof(struct pw, h) &&
	       offsetof(struct vrange_inline_pw, npages) == offsetof(struct pw, n) &&
	       sizeof(((struct pw *)0)->n) == sizeof(uint32_t),
	       "the inline view of the words");
_Static_assert(sizeof(struct vrange_inline_hit) == sizeof(struct region_last_hit) &&
	       offsetof(struct vrange_inline_hit, ver) == offsetof(struct region_last_hit, ver) &&
	       offsetof(struct vrange_inline_hit, base) == offsetof(struct region_last_hit, e.base) &&
	       offsetof(struct vrange_inline_hit, size) == offsetof(struct region_last_hit, e.size) &&
	       offsetof(struct vrange_inline_hit, r) == offsetof(struct region_last_hit, e.r),
	       "the inline last hit");
_Static_assert(offsetof(struct vrange_region, in) == 0, "the handle's head");
_Static_assert(sizeof(struct timespec) == sizeof(struct vrange_inline_ts) &&
	       offsetof(struct timespec, tv_nsec) == offsetof(struct vrange_inline_ts, nsec) &&
	       sizeof(clockid_t) == sizeof(int) &&
	       CLOCK_MONOTONIC_COARSE == VRANGE_INLINE_CLOCK, "the inline clock");

_Static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4 &&
	       offsetof(struct vr_clock, floor) == offsetof(struct vrange_inline_clock, floor) &&
	       offsetof(struct vr_clock, now) == offsetof(struct vrange_inline_clock, now) &&
	       offsetof(struct vr_clock, state) == offsetof(struct vrange_inline_clock, state) &&
	       VR_TICK_SELF == VRANGE_INLINE_TICK_SELF && VR_TICK_IDLE == VRANGE_INLINE_TICK_IDLE &&
	       VR_TICK_MARKED == VRANGE_INLINE_TICK_MARKED &&
	       VR_TICK_ARMED == VRANGE_INLINE_TICK_ARMED, "the inline clock line");

static struct vrange_inline_lib inline_lib;

#if PW_LOCK_FREE
#include <cpuid.h>

static char *thread_pointer(void)
{
	char *tp;

	__asm__("mov %%fs:0, %0" : "=r"(tp));
	return tp;
}

/*
 * The library's part of the inline path, filled when the library is
 * loaded, so that vrange_inline_lib() is one load - async-signal-safe, as
 * the inline vrange() that asks for it must be - and reads no environment
 * (that waits for the first call, vr_init_basic).  VRANGE_INLINE_ABI
 * where single pages change lock-free (x86-64 with cmpxchg16b, the gate
 * of pw_have_cas16, asked here again: the order of constructors is not
 * known).  TLS offsets from the thread pointer: every variable is
 * initial-exec, so one offset for every thread.  The clock is libc's
 * here; a region's copy takes the vDSO's (inline_head).
 */
__attribute__((constructor)) static void inline_setup(void)
{
	unsigned int a, b, c, d;
	char *tp = thread_pointer();

	/* The header's own spelling of the type (a static assert above). */
	inline_lib.clock_gettime = (int (*)(int, struct vrange_inline_ts *))(void (*)(void))
		clock_gettime;
	inline_lib.clock_line = (struct vrange_inline_clock *)(void *)&vr_clock;
	inline_lib.want_mark = (const unsigned char *)(const void *)&pressure_want_mark;
	inline_lib.table_ver = (const uint32_t *)(const void *)&region_table_seq.seq;
	inline_lib.tls_seq = (char *)&vr_seq_last - tp;
	inline_lib.tls_token = (char *)&pw_my_token - tp;
	inline_lib.tls_stripe = (char *)&pw_my_stripe - tp;
	inline_lib.tls_hit = (char *)&region_last_hit - tp;
	if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_CMPXCHG16B) && sizeof(bool) == 1)
		inline_lib.abi = VRANGE_INLINE_ABI;
}
#endif

void region_inline_start(void)
{
	inline_lib.plain = plain_marks_on();
}

const struct vrange_inline_lib *vrange_inline_lib(void)
{
	return &inline_lib;
}

/* The head of a region wired up (after vr_init): its layout for the
 * header's inline path, and VRANGE_INLINE_ABI where that path runs - the
 * file keeps page words, which it never gives up (a library file's size
 * is fixed), or has none (npages 0: the call).  The clock of the marks'
 * ages is the vDSO's where vr_init found it. */
static void inline_head(struct vrange_region *r)
{
	r->in.page_shift = vr_page_shift;
	r->in.size = r->map.size;
	r->in.pw = (const struct vrange_inline_pw *)(const void *)&r->file->tree.pw;
	r->in.lib = inline_lib;
	if (vr_vdso_gettime)
		r->in.lib.clock_gettime = (int (*)(int, struct vrange_inline_ts *))
			(void (*)(void))vr_vdso_gettime;
	r->in.abi = inline_lib.abi;
}

/* Wire up a region on fd (mapped at base, size bytes) whose file's state
 * is f (a reference the region now owns).  Consumes fd on success. */
static int region_wire(int fd, void *base, size_t size, struct vfile *f,
		       unsigned int access, vrange_region **out)
{
	struct vrange_region *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	r->file = f;
	r->fd = fd;
	r->access = access;
	r->map.base = base;
	r->map.size = size;
	r->map.sigbus = access == VRANGE_ACCESS_SIGBUS;
	if (r->map.sigbus)
		sigbus_fixup_install();
	r->map.region = r;
	inline_head(r);
	vfile_add_map(r->file, &r->map);
	/* Before anybody can touch it (not returned, not in the table): from
	 * now on pages purged by any process signal here.  A mapping the
	 * kernel refuses reads zeros (counted in the stats). */
	if (r->map.sigbus)
		uffd_arm(r->file, &r->map, false);
	ret = region_table_insert(r->map.base, r->map.size, r);
	if (ret < 0) {
		/* Out of the file's list before it is disarmed (destroy). */
		vfile_del_map(r->file, &r->map);
		uffd_forget_map(r->file, &r->map);
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

/* Map fd (size bytes) and wire the region up; consumes fd on success. */
static int region_open(int fd, size_t size, unsigned int access,
		       vrange_region **out)
{
	struct vfile *f;
	struct stat st;
	void *base;
	int ret;

	if (fstat(fd, &st) < 0)
		return -errno;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	ret = vfile_get(fd, &st, &f);
	if (ret == 0) {
		ret = region_wire(fd, base, size, f, access, out);
		if (ret < 0)
			vfile_put(f);
	}
	if (ret < 0)
		munmap(base, size);
	return ret;
}

/*
 * A region on a memfd just made: nobody else can reach its file yet, so
 * its state starts in this process's pool (state_pool.h) - no descriptor,
 * mapping or system call besides the memfd's own.  -E2BIG: too big for
 * the pool.  Consumes fd on success.
 */
static int region_open_new(int fd, size_t size, unsigned int access,
			   vrange_region **out)
{
	struct vfile *f;
	struct stat st;
	void *base;
	int ret;

	if (vr_ftruncate(fd, size) < 0 || fstat(fd, &st) < 0)
		return -errno;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	ret = vfile_new_region(fd, &st, size, &f);
	if (ret == 0) {
		ret = region_wire(fd, base, size, f, access, out);
		if (ret < 0)
			vfile_put(f);
	}
	if (ret < 0)
		munmap(base, size);
	return ret;
}

static int round_size(size_t size, size_t *out)
{
	if (size == 0 || size > SIZE_MAX - (vr_page_size - 1))
		return -EINVAL;
	*out = (size + vr_page_size - 1) & ~(vr_page_size - 1);
	return 0;
}

int vrange_region_create(const char *name, size_t size, unsigned int flags,
			 vrange_region **out)
{
	char nbuf[MEMFD_NAME_MAX + 1];
	unsigned int access;
	size_t rsize;
	int fd, ret;

	vr_init();
	if (!out)
		return -EINVAL;
	pressure_check_cgroup();
	ret = round_size(size, &rsize);
	if (ret == 0)
		ret = choose_access(flags, &access);
	if (ret < 0)
		return ret;
	snprintf(nbuf, sizeof(nbuf), "%s", name ? name : "vrange");
	fd = memfd_create(nbuf, MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = region_open_new(fd, rsize, access, out);
	if (ret != -E2BIG)
		goto done;
	/* Shared state: every process that maps the file will share it.  A
	 * file system without user xattrs leaves it process-local. */
	ret = vshared_format(fd, rsize);
	if (ret == -EOPNOTSUPP && vr_ftruncate(fd, rsize) == 0)
		ret = 0;
	if (ret < 0)
		goto fail;
	ret = region_open(fd, rsize, access, out);
done:
	if (ret == 0) {
		/* A memfd of our own: nobody else maps it yet. */
		atomic_store(&(*out)->file->unreached, true);
		return 0;
	}
	vshared_unformat(fd);
fail:
	close(fd);
	return ret;
}

int vrange_region_adopt(int fd, unsigned int flags, vrange_region **out)
{
	unsigned int access;
	struct stat st;
	uint64_t user_size;
	size_t rsize;
	int ret, nfd;

	if (!out)
		return -EINVAL;
	/* Before start-up can open a descriptor in a number the caller has
	 * just closed (see fd_layer_begin in vrange.c). */
	ret = shmem_check_fd(fd, &st);
	if (ret < 0)
		return ret;
	vr_init();
	pressure_check_cgroup();
	ret = choose_access(flags, &access);
	if (ret < 0)
		return ret;
	/* A library file maps its user area only; a foreign one, all of it. */
	ret = vshared_probe(fd, &user_size);
	if (ret < 0)
		return ret;
	if (ret == 0 || user_size == 0) /* no metadata, or a foreign file's */
		user_size = (uint64_t)st.st_size;
	if (user_size == 0 || round_size((size_t)user_size, &rsize) < 0)
		return -EINVAL;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (nfd < 0)
		return -errno;
	ret = region_open(nfd, rsize, access, out);
	if (ret < 0)
		close(nfd);
	return ret;
}

int vrange_region_destroy(vrange_region *r)
{
	if (!r)
		return 0;
	region_table_remove(r->map.base, r);
	/*
	 * Out of the file's mapping list first, then disarmed: a purge by
	 * another thread (the monitor) between the two would meet a mapping
	 * still registered with the fault thread's userfaultfd but no longer
	 * marked armed, try to register it around the punch (EBUSY: another
	 * userfaultfd has it), punch nothing, and leave its batch recorded
	 * purged with the data in place - for good: no later purge takes it
	 * (issue 25, item 9; docs/design.md, "Locking and signal safety").
	 */
	vfile_del_map(r->file, &r->map);
	uffd_forget_map(r->file, &r->map);
	munmap(r->map.base, r->map.size);
	(void)vfile_put_lender(r->file, r->fd, close);
	free(r);
	return 0;
}

void *vrange_region_base(const vrange_region *r)
{
	return r ? r->map.base : NULL;
}

size_t vrange_region_size(const vrange_region *r)
{
	return r ? r->map.size : 0;
}

int vrange_region_fd(const vrange_region *r)
{
	int ret;

	if (!r)
		return -EINVAL;
	/* Whoever gets the fd may pass it on: its state must be where any
	 * process holding the file finds it. */
	ret = vfile_share(r->file);
	return ret < 0 ? ret : r->fd;
}

unsigned int vrange_region_access(const vrange_region *r)
{
	return r ? r->access : 0;
}

int vrange_region_set_priority(vrange_region *r, int priority)
{
	if (!r)
		return -EINVAL;
	__atomic_store_n(&r->in.prio, priority, __ATOMIC_SEQ_CST);
	return 0;
}

int vrange_region_set_cost(vrange_region *r, uint32_t cost)
{
	if (!r || !cost)
		return -EINVAL;
	__atomic_store_n(&r->in.cost, cost, __ATOMIC_RELAXED);
	return 0;
}

/* Check a call on a region and find its pages: 1 go on, 0 nothing to do
 * (len 0, or no whole page inside when rounding inward), -errno. */
static int region_pages(const vrange_region *r, size_t off, size_t len,
			bool inward, uint64_t *start, uint64_t *end)
{
	int ret;

	if (!r)
		return -EINVAL;
	ret = vr_page_range(off, len, r->map.size, inward, start, end);
	return ret < 0 ? ret : *start < *end;
}

/* Every mark of a region: seq its place in the purge order (0: now), cost
 * 0 the region's (vrange_region_set_cost; unset, 1).  Inline, so that the
 * plain and the costed mark make no call through the PLT between them. */
static inline int mark_at(vrange_region *r, size_t off, size_t len,
			  uint64_t seq, uint32_t cost)
{
	uint64_t start, end;
	int ret = region_pages(r, off, len, true, &start, &end);

	if (ret <= 0)
		return ret;
	if (!cost) {
		cost = region_cost(r);
		if (!cost)
			cost = 1;
	}
	return vfile_mark_volatile_at(r->file, start, end,
				      region_prio(r), seq, cost);
}

int region_mark_volatile_at(vrange_region *r, size_t off, size_t len,
			    uint64_t seq, uint32_t cost)
{
	return mark_at(r, off, len, seq, cost);
}

int vrange_mark_volatile_cost(vrange_region *r, size_t off, size_t len,
			      uint32_t cost)
{
	return cost ? mark_at(r, off, len, 0, cost) : -EINVAL;
}

static __attribute__((noinline)) int mark_vol(vrange_region *r, size_t off, size_t len)
{
	return mark_at(r, off, len, 0, 0);
}

static __attribute__((noinline)) int mark_nonvol(vrange_region *r, size_t off, size_t len)
{
	uint64_t start, end;
	int ret = region_pages(r, off, len, false, &start, &end);

	if (ret <= 0)
		return ret;
	return vfile_mark_nonvolatile(r->file, start, end);
}

int region_mark_volatile(vrange_region *r, size_t off, size_t len)
{
	return region_fast_vol(r, off, len) ? 0 : mark_vol(r, off, len);
}

int region_mark_nonvolatile(vrange_region *r, size_t off, size_t len)
{
	return region_fast_nonvol(r, off, len) ? VRANGE_INTACT : mark_nonvol(r, off, len);
}

int vrange_mark_volatile(vrange_region *r, size_t off, size_t len)
{
	return region_fast_vol(r, off, len) ? 0 : mark_vol(r, off, len);
}

int vrange_mark_nonvolatile(vrange_region *r, size_t off, size_t len)
{
	return region_fast_nonvol(r, off, len) ? VRANGE_INTACT : mark_nonvol(r, off, len);
}

int vrange_is_volatile(vrange_region *r, size_t off, size_t len)
{
	uint64_t start, end;
	int ret = region_pages(r, off, len, false, &start, &end);

	if (ret <= 0)
		return ret;
	return vfile_is_volatile(r->file, start, end);
}

int vrange_region_set_refill(vrange_region *r, vrange_refill_fn fn, void *arg)
{
	vrange_refill_fn old_fn;
	void *old_arg;
	int ret;

	if (!r)
		return -EINVAL;
	if (!uffd_available())
		return -EOPNOTSUPP;
	ret = vfile_lock(r->file);
	if (ret < 0)
		return ret;
	old_fn = r->refill;
	old_arg = r->refill_arg;
	r->refill = fn;
	r->refill_arg = arg;
	vfile_unlock(r->file);
	ret = uffd_region_refill(r);
	if (ret < 0 && vfile_lock(r->file) == 0) {
		/* Refused (a ZERO-mode region): leave it as it was. */
		r->refill = old_fn;
		r->refill_arg = old_arg;
		vfile_unlock(r->file);
	}
	return ret;
}
