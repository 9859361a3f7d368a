/* SPDX-License-Identifier: MIT */
/* env.c - library start-up: page size, the environment, debug logging. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "disk_file.h"
#include "fd_hint.h"
#include "plain_fence.h"
#include "env.h"
#include "file_state.h"
#include "pressure.h"
#include "purge.h"
#include "region.h"
#include "shared_file.h"
#include "uffd_purge.h"

struct vr_env vr_env = { .monitor = true };
size_t vr_page_size = 4096;
unsigned int vr_page_shift = 12;

static pthread_once_t basic_once = PTHREAD_ONCE_INIT;
static pthread_once_t full_once = PTHREAD_ONCE_INIT;

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
	vr_env.plain_marks = parse_bool("VRANGE_PLAIN_MARKS", secure_getenv("VRANGE_PLAIN_MARKS"),
					true);
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
 * armed mapping: those two come after it), and last the disk layer's
 * tables and the shared state's table of unowned descriptors, taken
 * under file locks. */
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
	disk_fork_prepare();
	vshared_fork_prepare();
}

static void fork_parent(void)
{
	vshared_fork_done();
	disk_fork_done();
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
	vr_tick_attach(NULL); /* no ticker until the child's monitor starts */
	fd_hint_fork_child();
	plain_fence_init(vr_env.plain_marks);
	region_inline_start();
	vshared_fork_done();
	disk_fork_done();
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
	vr_mark_clock_init();
	plain_fence_init(vr_env.plain_marks);
	region_inline_start();
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
