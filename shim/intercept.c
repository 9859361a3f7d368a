/* SPDX-License-Identifier: MIT */
/*
 * intercept.c - the libc names the shim takes over (exported through
 * libvrange-ashmem.map, nothing else is).  Each wrapper decides with one
 * lock-free table look-up (or a path prefix compare) whether the call is
 * about ashmem; if not, it goes to the real function with its arguments
 * untouched, so errno and results are exactly libc's.
 *
 * Every glibc name for a call is covered: a program built with
 * -D_FILE_OFFSET_BITS=64 calls open64, fstat64, fcntl64, mmap64...; an old
 * binary calls __xstat and __fxstat; a fortified one __open_2 and
 * __read_chk.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"

/* Everything defined below is exported unless declared hidden (shim.h);
 * the version script then keeps only the libc names. */
#pragma GCC visibility push(default)

struct shim_real shim_real;
size_t shim_page = 4096;
static bool shim_debug_on;
static _Atomic bool shim_ready;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Names only some programs use; kept out of struct shim_real. */
static int (*real_fstat64)(int, struct stat64 *);
static int (*real_stat64)(const char *, struct stat64 *);
static int (*real_lstat64)(const char *, struct stat64 *);
static int (*real_fstatat64)(int, const char *, struct stat64 *, int);
static int (*real_xstat64)(int, const char *, struct stat64 *);
static int (*real_lxstat64)(int, const char *, struct stat64 *);
static int (*real_fxstat64)(int, int, struct stat64 *);
static int (*real_fxstatat64)(int, int, const char *, struct stat64 *, int);
static void *(*real_mmap64)(void *, size_t, int, int, int, off64_t);
static ssize_t (*real_pread64)(int, void *, size_t, off64_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static off64_t (*real_lseek64)(int, off64_t, int);
static int (*real_fcntl64)(int, int, ...);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fallocate64)(int, int, off64_t, off64_t);
static ssize_t (*real_read_chk)(int, void *, size_t, size_t);
static ssize_t (*real_pread_chk)(int, void *, size_t, off_t, size_t);
static ssize_t (*real_pread64_chk)(int, void *, size_t, off64_t, size_t);

void shim_debug(const char *fmt, ...)
{
	va_list ap;

	if (!shim_debug_on)
		return;
	va_start(ap, fmt);
	fputs("libvrange-ashmem: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

#define RESOLVE(field, name) (*(void **)&(field) = dlsym(RTLD_NEXT, name))

static void do_init(void)
{
	const char *d;
	long pg = sysconf(_SC_PAGESIZE);

	if (pg > 0)
		shim_page = (size_t)pg;
	d = secure_getenv("VRANGE_DEBUG");
	shim_debug_on = d && d[0] == '1';
	RESOLVE(shim_real.open, "open");
	RESOLVE(shim_real.open64, "open64");
	RESOLVE(shim_real.openat, "openat");
	RESOLVE(shim_real.openat64, "openat64");
	RESOLVE(shim_real.open_2, "__open_2");
	RESOLVE(shim_real.open64_2, "__open64_2");
	RESOLVE(shim_real.openat_2, "__openat_2");
	RESOLVE(shim_real.openat64_2, "__openat64_2");
	RESOLVE(shim_real.stat, "stat");
	RESOLVE(shim_real.lstat, "lstat");
	RESOLVE(shim_real.fstat, "fstat");
	RESOLVE(shim_real.fstatat, "fstatat");
	RESOLVE(shim_real.xstat, "__xstat");
	RESOLVE(shim_real.lxstat, "__lxstat");
	RESOLVE(shim_real.fxstat, "__fxstat");
	RESOLVE(shim_real.fxstatat, "__fxstatat");
	RESOLVE(shim_real.statx, "statx");
	RESOLVE(shim_real.ioctl, "ioctl");
	RESOLVE(shim_real.mmap, "mmap");
	RESOLVE(shim_real.munmap, "munmap");
	RESOLVE(shim_real.mremap, "mremap");
	RESOLVE(shim_real.mprotect, "mprotect");
	RESOLVE(shim_real.read, "read");
	RESOLVE(shim_real.pread, "pread");
	RESOLVE(shim_real.write, "write");
	RESOLVE(shim_real.pwrite, "pwrite");
	RESOLVE(shim_real.lseek, "lseek");
	RESOLVE(shim_real.close, "close");
	RESOLVE(shim_real.close_range, "close_range");
	RESOLVE(shim_real.closefrom, "closefrom");
	RESOLVE(shim_real.dup, "dup");
	RESOLVE(shim_real.dup2, "dup2");
	RESOLVE(shim_real.dup3, "dup3");
	RESOLVE(shim_real.fcntl, "fcntl");
	RESOLVE(shim_real.ftruncate, "ftruncate");
	RESOLVE(shim_real.fallocate, "fallocate");
	RESOLVE(shim_real.recvmsg, "recvmsg");
	RESOLVE(shim_real.sendmsg, "sendmsg");
	RESOLVE(shim_real.recvmmsg, "recvmmsg");
	RESOLVE(shim_real.sendmmsg, "sendmmsg");
	RESOLVE(real_fstat64, "fstat64");
	RESOLVE(real_stat64, "stat64");
	RESOLVE(real_lstat64, "lstat64");
	RESOLVE(real_fstatat64, "fstatat64");
	RESOLVE(real_xstat64, "__xstat64");
	RESOLVE(real_lxstat64, "__lxstat64");
	RESOLVE(real_fxstat64, "__fxstat64");
	RESOLVE(real_fxstatat64, "__fxstatat64");
	RESOLVE(real_mmap64, "mmap64");
	RESOLVE(real_pread64, "pread64");
	RESOLVE(real_pwrite64, "pwrite64");
	RESOLVE(real_lseek64, "lseek64");
	RESOLVE(real_fcntl64, "fcntl64");
	RESOLVE(real_ftruncate64, "ftruncate64");
	RESOLVE(real_fallocate64, "fallocate64");
	RESOLVE(real_read_chk, "__read_chk");
	RESOLVE(real_pread_chk, "__pread_chk");
	RESOLVE(real_pread64_chk, "__pread64_chk");
	atomic_store_explicit(&shim_ready, true, memory_order_release);
}

void shim_init(void)
{
	if (!atomic_load_explicit(&shim_ready, memory_order_acquire))
		pthread_once(&init_once, do_init);
}

__attribute__((constructor)) static void shim_ctor(void)
{
	shim_init();
	shim_scan_inherited();
}

/* A missing real function (an older libc) fails like an unknown syscall. */
#define CALL_REAL(fn, fail, ...)                                               \
	((fn) ? (fn)(__VA_ARGS__) : (errno = ENOSYS, (fail)))

static int fail_errno(int r)
{
	errno = -r;
	return -1;
}

/* The area of an fd the table knows; NULL for everything else. */
static struct ash_obj *known(int fd)
{
	uintptr_t e = shim_fd_entry(fd);

	if (!e || (e & SHIM_FD_TAGS))
		return NULL;
	return ash_from_fd(fd, false);
}

/* ---- open ---- */

/* Reopening one of our own descriptors through /proc is ours too. */
static int opened(const char *path, int fd)
{
	if (fd >= 0 && path && path[0] == '/' && path[1] == 'p')
		shim_fd_opened(path, fd);
	return fd;
}

#define NEEDS_MODE(fl) (((fl) & O_CREAT) || (((fl) & O_TMPFILE) == O_TMPFILE))

static int ash_open_ret(int flags)
{
	int r = ash_create(flags);

	return r < 0 ? fail_errno(r) : r;
}

#define OPEN_WRAPPER(name, realfn)                                             \
	int name(const char *path, int flags, ...)                             \
	{                                                                      \
		mode_t mode = 0;                                               \
		if (NEEDS_MODE(flags)) {                                       \
			va_list ap;                                            \
			va_start(ap, flags);                                   \
			mode = (mode_t)va_arg(ap, int);                        \
			va_end(ap);                                            \
		}                                                              \
		shim_init();                                                   \
		if (shim_is_ashmem_path(path))                                 \
			return ash_open_ret(flags);                            \
		return opened(path, CALL_REAL(realfn, -1, path, flags, mode)); \
	}
OPEN_WRAPPER(open, shim_real.open)
OPEN_WRAPPER(open64, shim_real.open64)

#define OPENAT_WRAPPER(name, realfn)                                           \
	int name(int dirfd, const char *path, int flags, ...)                  \
	{                                                                      \
		mode_t mode = 0;                                               \
		if (NEEDS_MODE(flags)) {                                       \
			va_list ap;                                            \
			va_start(ap, flags);                                   \
			mode = (mode_t)va_arg(ap, int);                        \
			va_end(ap);                                            \
		}                                                              \
		shim_init();                                                   \
		if (shim_is_ashmem_path(path))                                 \
			return ash_open_ret(flags);                            \
		return opened(path,                                            \
			      CALL_REAL(realfn, -1, dirfd, path, flags, mode)); \
	}
OPENAT_WRAPPER(openat, shim_real.openat)
OPENAT_WRAPPER(openat64, shim_real.openat64)

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

int __open_2(const char *path, int flags)
{
	shim_init();
	if (shim_is_ashmem_path(path))
		return ash_open_ret(flags);
	return opened(path, CALL_REAL(shim_real.open_2, -1, path, flags));
}

int __open64_2(const char *path, int flags)
{
	shim_init();
	if (shim_is_ashmem_path(path))
		return ash_open_ret(flags);
	return opened(path, CALL_REAL(shim_real.open64_2, -1, path, flags));
}

int __openat_2(int dirfd, const char *path, int flags)
{
	shim_init();
	if (shim_is_ashmem_path(path))
		return ash_open_ret(flags);
	return opened(path, CALL_REAL(shim_real.openat_2, -1, dirfd, path, flags));
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	shim_init();
	if (shim_is_ashmem_path(path))
		return ash_open_ret(flags);
	return opened(path, CALL_REAL(shim_real.openat64_2, -1, dirfd, path, flags));
}

/* ---- stat family ---- */

/*
 * After a real fstat of fd succeeded: is fd an ashmem fd?  Only fds in the
 * table and unlinked regular files (what our backing files are) are
 * looked at further, so ordinary files cost nothing more.
 */
static bool fd_is_ashmem(int fd, mode_t mode, unsigned long nlink)
{
	uintptr_t e = shim_fd_entry(fd);
	struct ash_obj *o;

	if (e & SHIM_FD_TAGS)
		return false;
	if (!e && !(S_ISREG(mode) && nlink == 0))
		return false;
	o = ash_from_fd(fd, true);
	ash_put(o);
	return o != NULL;
}

int stat(const char *path, struct stat *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat(st);
		return 0;
	}
	return CALL_REAL(shim_real.stat, -1, path, st);
}

int stat64(const char *path, struct stat64 *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat((struct stat *)st);
		return 0;
	}
	return CALL_REAL(real_stat64, -1, path, st);
}

int lstat(const char *path, struct stat *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat(st);
		return 0;
	}
	return CALL_REAL(shim_real.lstat, -1, path, st);
}

int lstat64(const char *path, struct stat64 *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat((struct stat *)st);
		return 0;
	}
	return CALL_REAL(real_lstat64, -1, path, st);
}

int fstat(int fd, struct stat *st)
{
	int r;

	shim_init();
	r = CALL_REAL(shim_real.fstat, -1, fd, st);
	if (r == 0 && fd_is_ashmem(fd, st->st_mode, st->st_nlink))
		ash_fake_stat(st);
	return r;
}

int fstat64(int fd, struct stat64 *st)
{
	int r;

	shim_init();
	r = CALL_REAL(real_fstat64, -1, fd, st);
	if (r == 0 && fd_is_ashmem(fd, st->st_mode, st->st_nlink))
		ash_fake_stat((struct stat *)st);
	return r;
}

static bool empty_path_fd(const char *path, int flags)
{
	return (flags & AT_EMPTY_PATH) && path && path[0] == '\0';
}

int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	int r;

	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat(st);
		return 0;
	}
	r = CALL_REAL(shim_real.fstatat, -1, dirfd, path, st, flags);
	if (r == 0 && empty_path_fd(path, flags) &&
	    fd_is_ashmem(dirfd, st->st_mode, st->st_nlink))
		ash_fake_stat(st);
	return r;
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	int r;

	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat((struct stat *)st);
		return 0;
	}
	r = CALL_REAL(real_fstatat64, -1, dirfd, path, st, flags);
	if (r == 0 && empty_path_fd(path, flags) &&
	    fd_is_ashmem(dirfd, st->st_mode, st->st_nlink))
		ash_fake_stat((struct stat *)st);
	return r;
}

/* The pre-2.33 entry points old binaries still call. */
int __xstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat64 *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);

int __xstat(int ver, const char *path, struct stat *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat(st);
		return 0;
	}
	return CALL_REAL(shim_real.xstat, -1, ver, path, st);
}

int __xstat64(int ver, const char *path, struct stat64 *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat((struct stat *)st);
		return 0;
	}
	return CALL_REAL(real_xstat64, -1, ver, path, st);
}

int __lxstat(int ver, const char *path, struct stat *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat(st);
		return 0;
	}
	return CALL_REAL(shim_real.lxstat, -1, ver, path, st);
}

int __lxstat64(int ver, const char *path, struct stat64 *st)
{
	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat((struct stat *)st);
		return 0;
	}
	return CALL_REAL(real_lxstat64, -1, ver, path, st);
}

int __fxstat(int ver, int fd, struct stat *st)
{
	int r;

	shim_init();
	r = CALL_REAL(shim_real.fxstat, -1, ver, fd, st);
	if (r == 0 && fd_is_ashmem(fd, st->st_mode, st->st_nlink))
		ash_fake_stat(st);
	return r;
}

int __fxstat64(int ver, int fd, struct stat64 *st)
{
	int r;

	shim_init();
	r = CALL_REAL(real_fxstat64, -1, ver, fd, st);
	if (r == 0 && fd_is_ashmem(fd, st->st_mode, st->st_nlink))
		ash_fake_stat((struct stat *)st);
	return r;
}

int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	int r;

	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat(st);
		return 0;
	}
	r = CALL_REAL(shim_real.fxstatat, -1, ver, dirfd, path, st, flags);
	if (r == 0 && empty_path_fd(path, flags) &&
	    fd_is_ashmem(dirfd, st->st_mode, st->st_nlink))
		ash_fake_stat(st);
	return r;
}

int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
	int r;

	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_stat((struct stat *)st);
		return 0;
	}
	r = CALL_REAL(real_fxstatat64, -1, ver, dirfd, path, st, flags);
	if (r == 0 && empty_path_fd(path, flags) &&
	    fd_is_ashmem(dirfd, st->st_mode, st->st_nlink))
		ash_fake_stat((struct stat *)st);
	return r;
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
	int r;

	shim_init();
	if (shim_is_ashmem_path(path)) {
		ash_fake_statx(stx, mask);
		return 0;
	}
	r = CALL_REAL(shim_real.statx, -1, dirfd, path, flags, mask, stx);
	if (r == 0 && empty_path_fd(path, flags) &&
	    fd_is_ashmem(dirfd, stx->stx_mode, stx->stx_nlink))
		ash_fake_statx(stx, mask);
	return r;
}

/* ---- ioctl ---- */

int ioctl(int fd, unsigned long req, ...)
{
	struct ash_obj *o;
	unsigned long arg;
	va_list ap;
	uintptr_t e;
	int r;

	va_start(ap, req);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	shim_init();
	e = shim_fd_entry(fd);
	/* An fd we never saw is looked at only for ashmem's own requests. */
	if ((e & SHIM_FD_TAGS) || (!e && _IOC_TYPE(req) != ASH_IOC))
		return CALL_REAL(shim_real.ioctl, -1, fd, req, arg);
	o = ash_from_fd(fd, true);
	if (!o)
		return CALL_REAL(shim_real.ioctl, -1, fd, req, arg);
	r = ash_ioctl(o, fd, req, arg);
	ash_put(o);
	return r < 0 ? fail_errno(r) : r;
}

/* ---- memory ---- */

/* An fd to mmap: in the table, or (received, inherited) an unlinked file. */
static struct ash_obj *mmap_target(int fd, int flags)
{
	uintptr_t e;
	struct stat st;

	if (fd < 0 || (flags & MAP_ANONYMOUS))
		return NULL;
	e = shim_fd_entry(fd);
	if (e & SHIM_FD_TAGS)
		return NULL;
	if (e)
		return ash_from_fd(fd, true);
	if (!shim_real.fstat || shim_real.fstat(fd, &st) < 0 ||
	    !S_ISREG(st.st_mode) || st.st_nlink != 0)
		return NULL;
	return ash_from_fd(fd, true);
}

static void after_map(void *p, size_t len, int flags)
{
	if (p != MAP_FAILED && (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) &&
	    atomic_load_explicit(&shim_nmaps, memory_order_relaxed))
		shim_map_forget(p, len);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct ash_obj *o;
	void *p;

	shim_init();
	o = mmap_target(fd, flags);
	if (o) {
		p = ash_mmap(o, addr, len, prot, flags, fd, off);
		ash_put(o);
		return p;
	}
	p = CALL_REAL(shim_real.mmap, MAP_FAILED, addr, len, prot, flags, fd, off);
	after_map(p, len, flags);
	return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	struct ash_obj *o;
	void *p;

	shim_init();
	o = mmap_target(fd, flags);
	if (o) {
		p = ash_mmap(o, addr, len, prot, flags, fd, (off_t)off);
		ash_put(o);
		return p;
	}
	p = CALL_REAL(real_mmap64, MAP_FAILED, addr, len, prot, flags, fd, off);
	after_map(p, len, flags);
	return p;
}

int munmap(void *addr, size_t len)
{
	int r;

	shim_init();
	r = CALL_REAL(shim_real.munmap, -1, addr, len);
	if (r == 0 && atomic_load_explicit(&shim_nmaps, memory_order_relaxed))
		shim_map_forget(addr, len);
	return r;
}

int mprotect(void *addr, size_t len, int prot)
{
	shim_init();
	if (atomic_load_explicit(&shim_nmaps, memory_order_relaxed)) {
		/* The driver cleared VM_MAY* for bits outside the mask. */
		int r = shim_map_check_prot(addr, len, prot);

		if (r < 0)
			return fail_errno(r);
	}
	return CALL_REAL(shim_real.mprotect, -1, addr, len, prot);
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	struct shim_map_info info;
	struct ash_obj *o = NULL;
	void *target = NULL, *p;
	va_list ap;

	va_start(ap, flags);
	if (flags & MREMAP_FIXED)
		target = va_arg(ap, void *);
	va_end(ap);
	shim_init();
	if (atomic_load_explicit(&shim_nmaps, memory_order_relaxed)) {
		int r = shim_map_lookup(old, old_len, new_len, &o, &info);

		if (r < 0) {
			errno = -r;
			return MAP_FAILED;
		}
	}
	p = CALL_REAL(shim_real.mremap, MAP_FAILED, old, old_len, new_len, flags, target);
	if (p != MAP_FAILED && atomic_load_explicit(&shim_nmaps, memory_order_relaxed)) {
		if (!(flags & MREMAP_DONTUNMAP))
			shim_map_forget(old, old_len);
		shim_map_forget(p, new_len);
		if (o)
			shim_map_add(o, p, new_len, info.off, info.mask, info.file);
	}
	ash_put(o);
	return p;
}

/* ---- read, write, seek on the backing file ---- */

ssize_t read(int fd, void *buf, size_t n)
{
	struct ash_obj *o;
	ssize_t r;

	shim_init();
	o = known(fd);
	if (!o)
		return CALL_REAL(shim_real.read, -1, fd, buf, n);
	r = ash_read(o, fd, buf, n, NULL);
	ash_put(o);
	return r < 0 ? fail_errno((int)r) : r;
}

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	shim_init();
	if (n <= buflen && shim_fd_entry(fd))
		return read(fd, buf, n);
	return CALL_REAL(real_read_chk, -1, fd, buf, n, buflen);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	struct ash_obj *o;
	ssize_t r;

	shim_init();
	o = known(fd);
	if (!o)
		return CALL_REAL(shim_real.pread, -1, fd, buf, n, off);
	r = off < 0 ? -EINVAL : ash_read(o, fd, buf, n, &off);
	ash_put(o);
	return r < 0 ? fail_errno((int)r) : r;
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
	shim_init();
	if (!shim_fd_entry(fd))
		return CALL_REAL(real_pread64, -1, fd, buf, n, off);
	return pread(fd, buf, n, (off_t)off);
}

ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	shim_init();
	if (n <= buflen && shim_fd_entry(fd))
		return pread(fd, buf, n, off);
	return CALL_REAL(real_pread_chk, -1, fd, buf, n, off, buflen);
}

ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
	shim_init();
	if (n <= buflen && shim_fd_entry(fd))
		return pread(fd, buf, n, (off_t)off);
	return CALL_REAL(real_pread64_chk, -1, fd, buf, n, off, buflen);
}

/* The driver had no write: the VFS answered EINVAL. */
static bool no_write(int fd)
{
	struct ash_obj *o = known(fd);

	ash_put(o);
	return o != NULL;
}

ssize_t write(int fd, const void *buf, size_t n)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-EINVAL);
	return CALL_REAL(shim_real.write, -1, fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-EINVAL);
	return CALL_REAL(shim_real.pwrite, -1, fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-EINVAL);
	return CALL_REAL(real_pwrite64, -1, fd, buf, n, off);
}

off_t lseek(int fd, off_t off, int whence)
{
	struct ash_obj *o;
	off_t r;

	shim_init();
	o = known(fd);
	if (!o)
		return CALL_REAL(shim_real.lseek, -1, fd, off, whence);
	r = ash_lseek(o, fd, off, whence);
	ash_put(o);
	return r < 0 ? fail_errno((int)r) : r;
}

off64_t lseek64(int fd, off64_t off, int whence)
{
	shim_init();
	if (!shim_fd_entry(fd))
		return CALL_REAL(real_lseek64, -1, fd, off, whence);
	return lseek(fd, (off_t)off, whence);
}

/* A character device cannot be truncated or allocated. */
int ftruncate(int fd, off_t len)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-EINVAL);
	return CALL_REAL(shim_real.ftruncate, -1, fd, len);
}

int ftruncate64(int fd, off64_t len)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-EINVAL);
	return CALL_REAL(real_ftruncate64, -1, fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-ENODEV);
	return CALL_REAL(shim_real.fallocate, -1, fd, mode, off, len);
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	shim_init();
	if (shim_fd_entry(fd) && no_write(fd))
		return fail_errno(-ENODEV);
	return CALL_REAL(real_fallocate64, -1, fd, mode, off, len);
}

/* ---- descriptors ---- */

int close(int fd)
{
	shim_init();
	if (shim_fd_entry(fd))
		shim_fd_closing(fd);
	return CALL_REAL(shim_real.close, -1, fd);
}

int close_range(unsigned int first, unsigned int last, int flags)
{
	shim_init();
	if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= last)
		shim_fd_range_closing(first, last);
	return CALL_REAL(shim_real.close_range, -1, first, last, flags);
}

void closefrom(int low)
{
	shim_init();
	if (low >= 0)
		shim_fd_range_closing((unsigned int)low, ~0u);
	if (shim_real.closefrom)
		shim_real.closefrom(low);
}

/* Each descriptor a message carries (SCM_RIGHTS); errno as it was. */
static void each_passed_fd(const struct msghdr *msg, void (*fn)(int fd))
{
	int saved = errno;

	if (!msg || !msg->msg_control || msg->msg_controllen == 0)
		return;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c;
	     c = CMSG_NXTHDR((struct msghdr *)(uintptr_t)msg, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			if (fd >= 0)
				fn(fd);
		}
	}
	errno = saved;
}

/* An ashmem fd about to leave over a socket: its state must be where the
 * receiver finds it (an area's state is private until then). */
static void escaping(int fd)
{
	if (shim_fd_entry(fd))
		ash_escape_fd(fd);
}

/* An ashmem fd that arrived over a socket is an area this process now
 * holds: take it on at once, so that its state lives on here (a holder of
 * the shared state) even if the sender exits before this process uses it. */
static void arrived(int fd)
{
	if (!shim_fd_entry(fd))
		ash_put(ash_from_fd(fd, true));
}

ssize_t sendmsg(int sock, const struct msghdr *msg, int flags)
{
	shim_init();
	each_passed_fd(msg, escaping);
	return CALL_REAL(shim_real.sendmsg, -1, sock, msg, flags);
}

/* Every message of the vector, whichever the kernel gets to send. */
int sendmmsg(int sock, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	shim_init();
	for (unsigned int i = 0; vec && i < vlen; i++)
		each_passed_fd(&vec[i].msg_hdr, escaping);
	return CALL_REAL(shim_real.sendmmsg, -1, sock, vec, vlen, flags);
}

ssize_t recvmsg(int sock, struct msghdr *msg, int flags)
{
	ssize_t r;

	shim_init();
	r = CALL_REAL(shim_real.recvmsg, -1, sock, msg, flags);
	if (r >= 0)
		each_passed_fd(msg, arrived);
	return r;
}

/* The messages received: the first r of the vector. */
int recvmmsg(int sock, struct mmsghdr *vec, unsigned int vlen, int flags,
	     struct timespec *timeout)
{
	int r;

	shim_init();
	r = CALL_REAL(shim_real.recvmmsg, -1, sock, vec, vlen, flags, timeout);
	for (int i = 0; i < r; i++)
		each_passed_fd(&vec[i].msg_hdr, arrived);
	return r;
}

int dup(int fd)
{
	int r;

	shim_init();
	r = CALL_REAL(shim_real.dup, -1, fd);
	if (r >= 0 && shim_fd_entry(fd))
		shim_fd_dup(fd, r);
	return r;
}

/* dup2/dup3 onto one of our fds closes it first, as the kernel will. */
static void before_dup_onto(int oldfd, int newfd)
{
	if (oldfd != newfd && shim_fd_entry(newfd) &&
	    shim_real.fcntl(oldfd, F_GETFD) >= 0)
		shim_fd_closing(newfd);
}

int dup2(int oldfd, int newfd)
{
	int r;

	shim_init();
	before_dup_onto(oldfd, newfd);
	r = CALL_REAL(shim_real.dup2, -1, oldfd, newfd);
	if (r >= 0 && oldfd != newfd && shim_fd_entry(oldfd))
		shim_fd_dup(oldfd, r);
	return r;
}

int dup3(int oldfd, int newfd, int flags)
{
	int r;

	shim_init();
	before_dup_onto(oldfd, newfd);
	r = CALL_REAL(shim_real.dup3, -1, oldfd, newfd, flags);
	if (r >= 0 && shim_fd_entry(oldfd))
		shim_fd_dup(oldfd, r);
	return r;
}

#define FCNTL_WRAPPER(name, realfn)                                            \
	int name(int fd, int cmd, ...)                                         \
	{                                                                      \
		unsigned long arg;                                             \
		va_list ap;                                                    \
		int r;                                                         \
		va_start(ap, cmd);                                             \
		arg = va_arg(ap, unsigned long);                               \
		va_end(ap);                                                    \
		shim_init();                                                   \
		r = CALL_REAL(realfn, -1, fd, cmd, arg);                       \
		if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) &&    \
		    shim_fd_entry(fd))                                         \
			shim_fd_dup(fd, r);                                    \
		return r;                                                      \
	}
FCNTL_WRAPPER(fcntl, shim_real.fcntl)
FCNTL_WRAPPER(fcntl64, real_fcntl64)
