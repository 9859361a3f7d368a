/* SPDX-License-Identifier: MIT */
/* env.c - library start-up: page size, the environment, debug logging. */
#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "env.h"
#include "file_state.h"
#include "pressure.h"
#include "purge.h"
#include "region.h"
#include "uffd_purge.h"

struct vr_env vr_env = { .monitor = true };
size_t vr_page_size = 4096;
unsigned int vr_page_shift = 12;

static pthread_once_t basic_once = PTHREAD_ONCE_INIT;
static pthread_once_t full_once = PTHREAD_ONCE_INIT;

/*
 * Ages are CLOCK_MONOTONIC_COARSE nanoseconds: one clock for every process
 * on the machine, so ranges marked by different processes in one shared
 * file (and files marked by different processes) order against each other
 * to within a tick.  The coarse clock is a vDSO read of the last tick -
 * several times cheaper than the precise one on the marking path - with no
 * system call, and signal-safe.
 *
 * Within a tick each thread counts on from its own last stamp.  A global
 * counter would make every stamp unique, but its compare-and-swap is a
 * cache line every marking thread writes: two threads marking their own
 * regions would run no faster than one.  Uniqueness is not needed - equal
 * stamps only mean "marked at the same moment"; the purge order breaks
 * ties by address.  What is needed is an order across threads at a few
 * moments (a purge pass starts, the application unmapped memory): a
 * barrier stamp is later than every stamp taken before it, in any thread,
 * and earlier than every stamp taken after it.  Before: a thread's count
 * never runs ahead of the precise clock (each mark takes far longer than
 * the nanosecond it adds).  After: every stamp is above the last barrier's
 * (vr_seq_floor, a line only barriers write, so marking threads only read it
 * and it stays in their caches).
 */
__thread uint64_t vr_seq_last __attribute__((tls_model("initial-exec")));
_Alignas(64) _Atomic uint64_t vr_seq_floor;
int (*vr_vdso_gettime)(clockid_t, struct timespec *);

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t vr_next_seq(void)
{
	return vr_next_seq_inline();
}

/* A symbol of the vDSO (its dynamic symbol table, found from its program
 * headers as the kernel's parse_vdso.c does), or NULL. */
static void *vdso_sym(const char *name)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
	const Elf64_Phdr *ph;
	const Elf64_Dyn *dyn = NULL;
	const Elf64_Sym *sym = NULL;
	const Elf64_Word *hash = NULL;
	const char *str = NULL;
	uintptr_t bias = 0;
	bool load = false;

	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64)
		return NULL;
	ph = (const Elf64_Phdr *)((const char *)eh + eh->e_phoff);
	for (unsigned int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD && !load) {
			bias = (uintptr_t)eh + ph[i].p_offset - ph[i].p_vaddr;
			load = true;
		} else if (ph[i].p_type == PT_DYNAMIC) {
			dyn = (const Elf64_Dyn *)((const char *)eh + ph[i].p_offset);
		}
	}
	if (!dyn || !load)
		return NULL;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_STRTAB)
			str = (const char *)(bias + dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_SYMTAB)
			sym = (const Elf64_Sym *)(bias + dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_HASH)
			hash = (const Elf64_Word *)(bias + dyn->d_un.d_ptr);
	}
	if (!str || !sym || !hash)
		return NULL;
	for (Elf64_Word k = 0; k < hash[1]; k++)
		if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC &&
		    sym[k].st_shndx != SHN_UNDEF && strcmp(str + sym[k].st_name, name) == 0)
			return (void *)(bias + sym[k].st_value);
	return NULL;
}

/* The vDSO's clock_gettime, kept only if it answers the coarse clock. */
static void find_vdso_clock(void)
{
	int (*get)(clockid_t, struct timespec *) =
		(int (*)(clockid_t, struct timespec *))vdso_sym("__vdso_clock_gettime");
	struct timespec ts;

	if (get && get(CLOCK_MONOTONIC_COARSE, &ts) == 0)
		vr_vdso_gettime = get;
}

uint64_t vr_seq_barrier(void)
{
	uint64_t stamp = vr_stamp_after(clock_ns(CLOCK_MONOTONIC));
	uint64_t cur = atomic_load_explicit(&vr_seq_floor, memory_order_relaxed);

	while (cur < stamp &&
	       !atomic_compare_exchange_weak_explicit(&vr_seq_floor, &cur, stamp,
						      memory_order_seq_cst,
						      memory_order_relaxed))
		;
	return stamp;
}

int vr_ftruncate(int fd, uint64_t len)
{
	int r;

	do
		r = ftruncate(fd, (off_t)len);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

int vr_parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;
	unsigned int shift = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || (shift && v > (SIZE_MAX >> shift)))
		return -EINVAL;
	*out = (size_t)v << shift;
	return 0;
}

static void warn_malformed(const char *name, const char *value)
{
	/* The contract's one permitted word on stderr: a malformed setting. */
	fprintf(stderr, "libvrange: ignoring malformed %s=\"%s\"\n", name, value);
}

static bool parse_bool(const char *name, const char *v, bool dflt)
{
	if (!v)
		return dflt;
	if (!strcmp(v, "0"))
		return false;
	if (!strcmp(v, "1"))
		return true;
	warn_malformed(name, v);
	return dflt;
}

/*
 * secure_getenv: a setuid program (the preload shim can reach those) must
 * not let its caller's environment steer the library.
 */
static void read_env(void)
{
	const char *v;

	vr_env.debug = parse_bool("VRANGE_DEBUG", secure_getenv("VRANGE_DEBUG"), false);
	vr_env.monitor = parse_bool("VRANGE_MONITOR", secure_getenv("VRANGE_MONITOR"), true);
	vr_env.no_uffd = parse_bool("VRANGE_NO_UFFD", secure_getenv("VRANGE_NO_UFFD"), false);
	v = secure_getenv("VRANGE_PRESSURE");
	if (v && !strcmp(v, "meminfo"))
		vr_env.meminfo_only = true;
	else if (v && *v)
		warn_malformed("VRANGE_PRESSURE", v);
	v = secure_getenv("VRANGE_FS_ROOT");
	vr_env.fs_root = v && *v == '/' ? strdup(v) : NULL;
	if (v && *v && *v != '/')
		warn_malformed("VRANGE_FS_ROOT", v);
	if (!vr_env.fs_root)
		vr_env.fs_root = "";
	v = secure_getenv("VRANGE_BUDGET");
	if (v && vr_parse_size(v, &vr_env.budget) < 0) {
		vr_env.budget = 0;
		warn_malformed("VRANGE_BUDGET", v);
	}
}

/* Lock order: the monitor's wakefulness, the cache list, purge engine, file registry and files,
 * region table, state pool, userfaultfd's probe and mapping lists (a
 * monitor purging holds the purge engine's lock when it lets go of an
 * armed mapping: those last two come after it). */
static void fork_prepare(void)
{
	/* Before any lock: it takes them itself. */
	vfile_share_all_states();
	pressure_fork_prepare();
	cache_fork_prepare();
	purge_fork_prepare();
	vfile_fork_prepare();
	region_fork_prepare();
	pool_fork_prepare();
	uffd_fork_prepare();
}

static void fork_parent(void)
{
	pool_fork_parent();
	region_fork_parent();
	vfile_fork_done();
	purge_fork_done();
	cache_fork_parent();
	uffd_fork_parent();
	pressure_fork_done();
}

static void fork_child(void)
{
	pool_fork_child();
	region_fork_child();
	vfile_fork_child();
	purge_fork_child();
	cache_fork_child();
	uffd_fork_child();
	pressure_fork_done();
}

static void init_basic_once(void)
{
	long ps = sysconf(_SC_PAGESIZE);

	if (ps > 0 && (ps & (ps - 1)) == 0)
		vr_page_size = (size_t)ps;
	vr_page_shift = (unsigned int)__builtin_ctzl(vr_page_size);
	read_env();
	find_vdso_clock();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void init_full_once(void)
{
	vr_init_basic();
	if (vr_env.budget)
		pressure_set_budget(vr_env.budget);
	if (vr_env.monitor)
		pressure_autostart();
}

/* Set once each init has run: the hot paths test a flag, not call out. */
static _Atomic bool full_done;
_Atomic bool vr_basic_done;

void vr_init_basic_once(void)
{
	pthread_once(&basic_once, init_basic_once);
	atomic_store_explicit(&vr_basic_done, true, memory_order_release);
}

void vr_init(void)
{
	if (atomic_load_explicit(&full_done, memory_order_acquire))
		return;
	pthread_once(&full_once, init_full_once);
	atomic_store_explicit(&full_done, true, memory_order_release);
}

void vr_debug(const char *fmt, ...)
{
	va_list ap;

	if (!vr_env.debug)
		return;
	va_start(ap, fmt);
	fputs("libvrange: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}
