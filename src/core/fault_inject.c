/* SPDX-License-Identifier: MIT */
/*
 * fault_inject.c - the __wrap_ side of -Wl,--wrap (see fault_inject.h).
 *
 * Compiled only with -Dfault_injection=true, into libvrange_fault.so.  Each
 * wrapper counts its call under a site and either fails it (when it is the
 * armed call) or passes it to the real function.  A failed call looks like
 * the kernel's own failure: -1 and errno (the pointer-returning calls NULL
 * or MAP_FAILED; pthread_create the error number), and it has no effect -
 * except close, which on Linux always releases the descriptor, so the real
 * close runs first.
 */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "fault_inject.h"

/* name, errnos worth trying (what the kernel or libc can really return) */
#define SITES(X)                                                               \
	X(MALLOC, "malloc", ENOMEM)                                            \
	X(CALLOC, "calloc", ENOMEM)                                            \
	X(STRDUP, "strdup", ENOMEM)                                            \
	X(ASPRINTF, "asprintf", ENOMEM)                                        \
	X(REALLOC, "realloc", ENOMEM)                                          \
	X(ALIGNED_ALLOC, "aligned_alloc", ENOMEM)                              \
	X(MEMFD_CREATE, "memfd_create", EMFILE, ENOMEM)                        \
	X(FTRUNCATE, "ftruncate", EINTR, ENOSPC)                               \
	X(MMAP, "mmap", ENOMEM, EAGAIN)                                        \
	X(MREMAP, "mremap", ENOMEM, EAGAIN)                                    \
	X(MUNMAP, "munmap", ENOMEM)                                            \
	X(FALLOCATE, "fallocate", EINTR, EIO, ENOMEM)                          \
	X(MADVISE, "madvise", ENOMEM, EAGAIN)                                  \
	X(MINCORE, "mincore", ENOMEM, EAGAIN)                                  \
	X(SYS_USERFAULTFD, "syscall:userfaultfd", EMFILE, EPERM, ENOMEM)       \
	X(SYS_FUTEX, "syscall:futex", EINTR, EAGAIN, ETIMEDOUT)                \
	X(SYS_OTHER, "syscall:other", )                                        \
	X(IOC_NEW, "ioctl:USERFAULTFD_IOC_NEW", EMFILE, ENOMEM)                \
	X(IOC_API, "ioctl:UFFDIO_API", EINVAL, ENOMEM)                         \
	X(IOC_REGISTER, "ioctl:UFFDIO_REGISTER", ENOMEM, EBUSY)                \
	X(IOC_UNREGISTER, "ioctl:UFFDIO_UNREGISTER", ENOMEM)                   \
	X(IOC_WAKE, "ioctl:UFFDIO_WAKE", ENOMEM)                               \
	X(IOC_COPY, "ioctl:UFFDIO_COPY", EAGAIN, ENOMEM, EEXIST)               \
	X(IOC_ZEROPAGE, "ioctl:UFFDIO_ZEROPAGE", EAGAIN, ENOMEM, EEXIST)       \
	X(IOC_WRITEPROTECT, "ioctl:UFFDIO_WRITEPROTECT", EAGAIN, ENOMEM)       \
	X(IOC_POISON, "ioctl:UFFDIO_POISON", EAGAIN, ENOMEM)                   \
	X(IOC_UFFD_OTHER, "ioctl:UFFDIO_other", ENOMEM)                        \
	X(IOC_PROCMAP, "ioctl:PROCMAP_QUERY", ENOMEM, EINTR)                   \
	X(IOC_OTHER, "ioctl:other", EINVAL)                                    \
	X(OPEN, "open", EMFILE, ENOENT, EACCES, EINTR)                         \
	X(READ, "read", EINTR, EIO, EAGAIN)                                    \
	X(PREAD, "pread", EINTR, EIO)                                          \
	X(WRITE, "write", EINTR, ENOSPC, EAGAIN)                               \
	X(CLOSE, "close", EINTR, EIO)                                          \
	X(DUP, "dup", EMFILE)                                                  \
	X(FCNTL, "fcntl", EINTR, ENOLCK, EMFILE)                               \
	X(EVENTFD, "eventfd", EMFILE, ENOMEM)                                  \
	X(POLL, "poll", EINTR, ENOMEM)                                         \
	X(FSTAT, "fstat", ENOMEM, EIO)                                         \
	X(FSTATFS, "fstatfs", ENOMEM, EIO)                                     \
	X(PIPE2, "pipe2", EMFILE, ENFILE)                                      \
	X(OPENDIR, "opendir", EMFILE, ENOMEM)                                  \
	X(FOPEN, "fopen", EMFILE, ENOMEM)                                      \
	X(STAT, "stat", ENOMEM, EACCES)                                        \
	X(SEM_WAIT, "sem_wait", EINTR)                                         \
	X(FGETXATTR, "fgetxattr", EIO, ENOMEM)                                 \
	X(FSETXATTR, "fsetxattr", ENOSPC, EPERM)                               \
	X(FDOPEN, "fdopen", ENOMEM)                                            \
	X(GETDELIM, "getline", ENOMEM, EIO)                                    \
	X(FGETS, "fgets", EIO)                                                 \
	X(NANOSLEEP, "nanosleep", EINTR)                                       \
	X(SOCKET, "socket", EMFILE, ENOBUFS)                                   \
	X(CONNECT, "connect", EAGAIN, EINTR)                                   \
	X(GETSOCKOPT, "getsockopt", ENOBUFS)                                   \
	X(READLINK, "readlink", ENOMEM, EACCES)                                 \
	X(INOTIFY_INIT1, "inotify_init1", EMFILE, ENOMEM)                      \
	X(INOTIFY_ADD_WATCH, "inotify_add_watch", ENOSPC, ENOMEM)              \
	X(PTHREAD_CREATE, "pthread_create", EAGAIN)

#define SITE_ENUM(id, name, ...) S_##id,
enum site { SITES(SITE_ENUM) S_COUNT };

#define SITE_NAME(id, name, ...) name,
static const char *const site_names[S_COUNT] = { SITES(SITE_NAME) };

#define SITE_ERRS(id, name, ...) static const int errs_##id[] = { 0, __VA_ARGS__ };
SITES(SITE_ERRS)
#define SITE_ERRP(id, name, ...) { errs_##id + 1, sizeof(errs_##id) / sizeof(int) - 1 },
static const struct {
	const int *e;
	unsigned n;
} site_errs[S_COUNT] = { SITES(SITE_ERRP) };

static _Atomic uint64_t counts[S_COUNT];
static _Atomic int armed_site = -1;
static _Atomic uint64_t armed_nth;
static _Atomic int armed_err;
static _Atomic bool fired;

void vrange_fault_reset(void)
{
	atomic_store(&armed_site, -1);
	for (unsigned i = 0; i < S_COUNT; i++)
		atomic_store(&counts[i], 0);
	atomic_store(&fired, false);
}

unsigned vrange_fault_nsites(void)
{
	return S_COUNT;
}

const char *vrange_fault_site_name(unsigned site)
{
	return site < S_COUNT ? site_names[site] : NULL;
}

const int *vrange_fault_site_errnos(unsigned site, unsigned *n)
{
	*n = site < S_COUNT ? site_errs[site].n : 0;
	return site < S_COUNT ? site_errs[site].e : NULL;
}

uint64_t vrange_fault_count(unsigned site)
{
	return site < S_COUNT ? atomic_load(&counts[site]) : 0;
}

void vrange_fault_arm(unsigned site, uint64_t nth, int err)
{
	atomic_store(&armed_site, -1);
	atomic_store(&fired, false);
	atomic_store(&armed_nth, nth);
	atomic_store(&armed_err, err);
	atomic_store(&armed_site, (int)site);
}

bool vrange_fault_fired(void)
{
	return atomic_load(&fired);
}

/* Count a call of site s; true (and *err set) if this one must fail. */
static bool hit(enum site s, int *err)
{
	uint64_t n = atomic_fetch_add(&counts[s], 1) + 1;

	if (atomic_load(&armed_site) != (int)s || n != atomic_load(&armed_nth))
		return false;
	if (atomic_exchange(&fired, true))
		return false;
	*err = atomic_load(&armed_err);
	if (getenv("VRANGE_FAULT_TRACE")) {
		/* Where it struck: addr2line -e libvrange_fault.so <offsets> */
		void *pcs[16];

		backtrace_symbols_fd(pcs, backtrace(pcs, 16), 2);
	}
	return true;
}

/* The common shape: fail as "-1 and errno", else call through. */
#define FAIL_OR(s, call)                                                       \
	do {                                                                   \
		int e_;                                                        \
		if (hit(s, &e_)) {                                             \
			errno = e_;                                            \
			return -1;                                             \
		}                                                              \
		return call;                                                   \
	} while (0)

#define WRAP_HIDDEN __attribute__((visibility("hidden")))

/* ---- allocation ---------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
char *__real_strdup(const char *s);
WRAP_HIDDEN void *__wrap_malloc(size_t n);
WRAP_HIDDEN void *__wrap_calloc(size_t n, size_t m);
WRAP_HIDDEN char *__wrap_strdup(const char *s);
WRAP_HIDDEN int __wrap_asprintf(char **out, const char *fmt, ...);

void *__wrap_malloc(size_t n)
{
	int e;

	if (hit(S_MALLOC, &e)) {
		errno = e;
		return NULL;
	}
	return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
	int e;

	if (hit(S_CALLOC, &e)) {
		errno = e;
		return NULL;
	}
	return __real_calloc(n, m);
}

char *__wrap_strdup(const char *s)
{
	int e;

	if (hit(S_STRDUP, &e)) {
		errno = e;
		return NULL;
	}
	return __real_strdup(s);
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	int e, r;

	if (hit(S_ASPRINTF, &e)) {
		errno = e;
		return -1;
	}
	va_start(ap, fmt);
	r = vasprintf(out, fmt, ap);
	va_end(ap);
	return r;
}

/* ---- memory -------------------------------------------------------------- */

int __real_memfd_create(const char *name, unsigned flags);
int __real_ftruncate64(int fd, off64_t len);
void *__real_mmap64(void *a, size_t len, int prot, int flags, int fd, off64_t off);
void *__real_mremap(void *a, size_t old, size_t len, int flags, ...);
int __real_munmap(void *a, size_t len);
int __real_fallocate64(int fd, int mode, off64_t off, off64_t len);
int __real_madvise(void *a, size_t len, int advice);
int __real_mincore(void *a, size_t len, unsigned char *vec);
WRAP_HIDDEN int __wrap_memfd_create(const char *name, unsigned flags);
WRAP_HIDDEN int __wrap_ftruncate64(int fd, off64_t len);
WRAP_HIDDEN void *__wrap_mmap64(void *a, size_t len, int prot, int flags, int fd,
				off64_t off);
WRAP_HIDDEN void *__wrap_mremap(void *a, size_t old, size_t len, int flags, ...);
WRAP_HIDDEN int __wrap_munmap(void *a, size_t len);
WRAP_HIDDEN int __wrap_fallocate64(int fd, int mode, off64_t off, off64_t len);
WRAP_HIDDEN int __wrap_madvise(void *a, size_t len, int advice);
WRAP_HIDDEN int __wrap_mincore(void *a, size_t len, unsigned char *vec);

int __wrap_memfd_create(const char *name, unsigned flags)
{
	FAIL_OR(S_MEMFD_CREATE, __real_memfd_create(name, flags));
}

int __wrap_ftruncate64(int fd, off64_t len)
{
	FAIL_OR(S_FTRUNCATE, __real_ftruncate64(fd, len));
}

void *__wrap_mmap64(void *a, size_t len, int prot, int flags, int fd, off64_t off)
{
	int e;

	if (hit(S_MMAP, &e)) {
		errno = e;
		return MAP_FAILED;
	}
	return __real_mmap64(a, len, prot, flags, fd, off);
}

void *__wrap_mremap(void *a, size_t old, size_t len, int flags, ...)
{
	void *to = NULL;
	va_list ap;
	int e;

	if (hit(S_MREMAP, &e)) {
		errno = e;
		return MAP_FAILED;
	}
	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		to = va_arg(ap, void *);
		va_end(ap);
	}
	return __real_mremap(a, old, len, flags, to);
}

int __wrap_munmap(void *a, size_t len)
{
	FAIL_OR(S_MUNMAP, __real_munmap(a, len));
}

int __wrap_fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	FAIL_OR(S_FALLOCATE, __real_fallocate64(fd, mode, off, len));
}

int __wrap_madvise(void *a, size_t len, int advice)
{
	FAIL_OR(S_MADVISE, __real_madvise(a, len, advice));
}

int __wrap_mincore(void *a, size_t len, unsigned char *vec)
{
	FAIL_OR(S_MINCORE, __real_mincore(a, len, vec));
}

/* ---- syscall() and ioctl(): one site per number -------------------------- */

long __real_syscall(long nr, ...);
int __real_ioctl(int fd, unsigned long req, ...);
WRAP_HIDDEN long __wrap_syscall(long nr, ...);
WRAP_HIDDEN int __wrap_ioctl(int fd, unsigned long req, ...);

long __wrap_syscall(long nr, ...)
{
	enum site s = nr == SYS_userfaultfd ? S_SYS_USERFAULTFD :
		      nr == SYS_futex	    ? S_SYS_FUTEX :
						      S_SYS_OTHER;
	/* Only what the caller passed: the first five come from the register
	 * save area whatever the count, a sixth from the caller's stack. */
	int nargs = nr == SYS_futex ? 6 : 5;
	long a[6] = { 0 };
	va_list ap;
	int e;

	va_start(ap, nr);
	for (int i = 0; i < nargs; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (hit(s, &e)) {
		errno = e;
		return -1;
	}
	return __real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static enum site ioctl_site(unsigned long req)
{
	if (_IOC_TYPE(req) == 'f' && _IOC_NR(req) == 17)
		return S_IOC_PROCMAP;
	if (_IOC_TYPE(req) != 0xAA)
		return S_IOC_OTHER;
	if (_IOC_DIR(req) == _IOC_NONE && _IOC_NR(req) == 0)
		return S_IOC_NEW; /* USERFAULTFD_IOC_NEW */
	switch (_IOC_NR(req)) {
	case 0x00: return S_IOC_REGISTER;
	case 0x01: return S_IOC_UNREGISTER;
	case 0x02: return S_IOC_WAKE;
	case 0x03: return S_IOC_COPY;
	case 0x04: return S_IOC_ZEROPAGE;
	case 0x06: return S_IOC_WRITEPROTECT;
	case 0x08: return S_IOC_POISON;
	case 0x3F: return S_IOC_API;
	default: return S_IOC_UFFD_OTHER;
	}
}

int __wrap_ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int e;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (hit(ioctl_site(req), &e)) {
		errno = e;
		return -1;
	}
	return __real_ioctl(fd, req, arg);
}

/* ---- descriptors --------------------------------------------------------- */

int __real_open64(const char *path, int flags, ...);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __real_pread64(int fd, void *buf, size_t n, off64_t off);
ssize_t __real_write(int fd, const void *buf, size_t n);
int __real_close(int fd);
int __real_dup(int fd);
int __real_fcntl64(int fd, int cmd, ...);
int __real_eventfd(unsigned v, int flags);
int __real_poll(struct pollfd *p, nfds_t n, int ms);
int __real_fstat64(int fd, struct stat64 *st);
int __real_fstatfs64(int fd, struct statfs64 *st);
ssize_t __real_fgetxattr(int fd, const char *name, void *v, size_t n);
int __real_fsetxattr(int fd, const char *name, const void *v, size_t n, int fl);
FILE *__real_fdopen(int fd, const char *mode);
ssize_t __real___getdelim(char **line, size_t *n, int delim, FILE *f);
char *__real_fgets(char *s, int n, FILE *f);
int __real_nanosleep(const struct timespec *t, struct timespec *rem);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a,
			  void *(*fn)(void *), void *arg);
WRAP_HIDDEN int __wrap_open64(const char *path, int flags, ...);
WRAP_HIDDEN ssize_t __wrap_read(int fd, void *buf, size_t n);
WRAP_HIDDEN ssize_t __wrap_pread64(int fd, void *buf, size_t n, off64_t off);
WRAP_HIDDEN ssize_t __wrap_write(int fd, const void *buf, size_t n);
WRAP_HIDDEN int __wrap_close(int fd);
WRAP_HIDDEN int __wrap_dup(int fd);
WRAP_HIDDEN int __wrap_fcntl64(int fd, int cmd, ...);
WRAP_HIDDEN int __wrap_eventfd(unsigned v, int flags);
WRAP_HIDDEN int __wrap_poll(struct pollfd *p, nfds_t n, int ms);
WRAP_HIDDEN int __wrap_fstat64(int fd, struct stat64 *st);
WRAP_HIDDEN int __wrap_fstatfs64(int fd, struct statfs64 *st);
WRAP_HIDDEN ssize_t __wrap_fgetxattr(int fd, const char *name, void *v, size_t n);
WRAP_HIDDEN int __wrap_fsetxattr(int fd, const char *name, const void *v,
				 size_t n, int fl);
WRAP_HIDDEN FILE *__wrap_fdopen(int fd, const char *mode);
WRAP_HIDDEN ssize_t __wrap___getdelim(char **line, size_t *n, int delim, FILE *f);
WRAP_HIDDEN char *__wrap_fgets(char *s, int n, FILE *f);
WRAP_HIDDEN int __wrap_nanosleep(const struct timespec *t, struct timespec *rem);
WRAP_HIDDEN int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a,
				      void *(*fn)(void *), void *arg);

int __wrap_open64(const char *path, int flags, ...)
{
	va_list ap;
	int mode;

	va_start(ap, flags);
	mode = va_arg(ap, int); /* harmless when absent: callers pass ints */
	va_end(ap);
	FAIL_OR(S_OPEN, __real_open64(path, flags, mode));
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
	FAIL_OR(S_READ, __real_read(fd, buf, n));
}

ssize_t __wrap_pread64(int fd, void *buf, size_t n, off64_t off)
{
	FAIL_OR(S_PREAD, __real_pread64(fd, buf, n, off));
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	FAIL_OR(S_WRITE, __real_write(fd, buf, n));
}

int __wrap_close(int fd)
{
	int e;

	if (hit(S_CLOSE, &e)) {
		__real_close(fd); /* Linux: the descriptor is gone either way */
		errno = e;
		return -1;
	}
	return __real_close(fd);
}

int __wrap_dup(int fd)
{
	FAIL_OR(S_DUP, __real_dup(fd));
}

int __wrap_fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	FAIL_OR(S_FCNTL, __real_fcntl64(fd, cmd, arg));
}

int __wrap_eventfd(unsigned v, int flags)
{
	FAIL_OR(S_EVENTFD, __real_eventfd(v, flags));
}

int __wrap_poll(struct pollfd *p, nfds_t n, int ms)
{
	FAIL_OR(S_POLL, __real_poll(p, n, ms));
}

int __wrap_fstat64(int fd, struct stat64 *st)
{
	FAIL_OR(S_FSTAT, __real_fstat64(fd, st));
}

int __wrap_fstatfs64(int fd, struct statfs64 *st)
{
	FAIL_OR(S_FSTATFS, __real_fstatfs64(fd, st));
}

ssize_t __wrap_fgetxattr(int fd, const char *name, void *v, size_t n)
{
	FAIL_OR(S_FGETXATTR, __real_fgetxattr(fd, name, v, n));
}

int __wrap_fsetxattr(int fd, const char *name, const void *v, size_t n, int fl)
{
	FAIL_OR(S_FSETXATTR, __real_fsetxattr(fd, name, v, n, fl));
}

FILE *__wrap_fdopen(int fd, const char *mode)
{
	int e;

	if (hit(S_FDOPEN, &e)) {
		errno = e;
		return NULL;
	}
	return __real_fdopen(fd, mode);
}

ssize_t __wrap___getdelim(char **line, size_t *n, int delim, FILE *f)
{
	FAIL_OR(S_GETDELIM, __real___getdelim(line, n, delim, f));
}

char *__wrap_fgets(char *s, int n, FILE *f)
{
	int e;

	if (hit(S_FGETS, &e)) {
		errno = e;
		return NULL;
	}
	return __real_fgets(s, n, f);
}

int __real_fstatfs(int fd, struct statfs *st);
int __real_pipe2(int fds[2], int flags);
DIR *__real_opendir(const char *path);
WRAP_HIDDEN int __wrap_fstatfs(int fd, struct statfs *st);
WRAP_HIDDEN int __wrap_pipe2(int fds[2], int flags);
WRAP_HIDDEN DIR *__wrap_opendir(const char *path);

/* The shim's own calls (its sources build without _FILE_OFFSET_BITS). */
int __wrap_fstatfs(int fd, struct statfs *st)
{
	FAIL_OR(S_FSTATFS, __real_fstatfs(fd, st));
}

int __wrap_pipe2(int fds[2], int flags)
{
	FAIL_OR(S_PIPE2, __real_pipe2(fds, flags));
}

DIR *__wrap_opendir(const char *path)
{
	int e;

	if (hit(S_OPENDIR, &e)) {
		errno = e;
		return NULL;
	}
	return __real_opendir(path);
}

void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
FILE *__real_fopen64(const char *path, const char *mode);
int __real_stat64(const char *path, struct stat64 *st);
int __real_sem_wait(sem_t *sem);
int __real_socket(int domain, int type, int proto);
int __real_connect(int fd, const struct sockaddr *sa, socklen_t len);
int __real_getsockopt(int fd, int level, int name, void *v, socklen_t *len);
ssize_t __real_readlink(const char *path, char *buf, size_t n);
int __real_inotify_init1(int flags);
int __real_inotify_add_watch(int fd, const char *path, uint32_t mask);
WRAP_HIDDEN ssize_t __wrap_readlink(const char *path, char *buf, size_t n);
WRAP_HIDDEN int __wrap_inotify_init1(int flags);
WRAP_HIDDEN int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask);
WRAP_HIDDEN int __wrap_socket(int domain, int type, int proto);
WRAP_HIDDEN int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len);
WRAP_HIDDEN int __wrap_getsockopt(int fd, int level, int name, void *v, socklen_t *len);
WRAP_HIDDEN void *__wrap_realloc(void *p, size_t n);
WRAP_HIDDEN void *__wrap_aligned_alloc(size_t align, size_t n);
WRAP_HIDDEN FILE *__wrap_fopen64(const char *path, const char *mode);
WRAP_HIDDEN int __wrap_stat64(const char *path, struct stat64 *st);
WRAP_HIDDEN int __wrap_sem_wait(sem_t *sem);

void *__wrap_realloc(void *p, size_t n)
{
	int e;

	if (hit(S_REALLOC, &e)) {
		errno = e; /* p stays valid, as with a real failure */
		return NULL;
	}
	return __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
	int e;

	if (hit(S_ALIGNED_ALLOC, &e)) {
		errno = e;
		return NULL;
	}
	return __real_aligned_alloc(align, n);
}

FILE *__wrap_fopen64(const char *path, const char *mode)
{
	int e;

	if (hit(S_FOPEN, &e)) {
		errno = e;
		return NULL;
	}
	return __real_fopen64(path, mode);
}

int __wrap_stat64(const char *path, struct stat64 *st)
{
	FAIL_OR(S_STAT, __real_stat64(path, st));
}

int __wrap_sem_wait(sem_t *sem)
{
	FAIL_OR(S_SEM_WAIT, __real_sem_wait(sem));
}

/* The watch on dormant files' deaths (file_state.c). */
ssize_t __wrap_readlink(const char *path, char *buf, size_t n)
{
	FAIL_OR(S_READLINK, __real_readlink(path, buf, n));
}

int __wrap_inotify_init1(int flags)
{
	FAIL_OR(S_INOTIFY_INIT1, __real_inotify_init1(flags));
}

int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask)
{
	FAIL_OR(S_INOTIFY_ADD_WATCH, __real_inotify_add_watch(fd, path, mask));
}

/* The coordinator check (coordinator.c): a failure reads "no coordinator",
 * and the monitor purges the library's files itself. */
int __wrap_socket(int domain, int type, int proto)
{
	FAIL_OR(S_SOCKET, __real_socket(domain, type, proto));
}

int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	FAIL_OR(S_CONNECT, __real_connect(fd, sa, len));
}

int __wrap_getsockopt(int fd, int level, int name, void *v, socklen_t *len)
{
	FAIL_OR(S_GETSOCKOPT, __real_getsockopt(fd, level, name, v, len));
}

int __wrap_nanosleep(const struct timespec *t, struct timespec *rem)
{
	FAIL_OR(S_NANOSLEEP, __real_nanosleep(t, rem));
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a,
			  void *(*fn)(void *), void *arg)
{
	int e;

	if (hit(S_PTHREAD_CREATE, &e))
		return e;
	return __real_pthread_create(t, a, fn, arg);
}
