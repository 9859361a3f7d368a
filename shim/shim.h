/* SPDX-License-Identifier: MIT */
/*
 * shim.h - the ashmem emulation behind LD_PRELOAD=libvrange-ashmem.so
 * (internal to the shim).
 *
 * An emulated ashmem fd is an fd of an unlinked tmpfs file (O_TMPFILE in
 * /dev/shm).  The driver's per-area state (name, size, prot mask, whether
 * the area was mapped yet) lives in one xattr on that file, so that every
 * process holding the file - over fork, SCM_RIGHTS or exec - sees one
 * state, as with the driver; the volatile (unpinned) state lives with the
 * file too, in libvrange's shared-file format once the area is mapped.
 *
 * In this process an area is a struct ash_obj (one per file), reached from
 * the fd table.  The table also marks the shim's own private descriptors
 * so that the wrappers never disturb them.
 */
#ifndef VRANGE_SHIM_H
#define VRANGE_SHIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#define SHIM_HIDDEN __attribute__((visibility("hidden")))

/* The driver's ABI (include/uapi/linux/ashmem.h), defined here as clients do. */
#define ASH_NAME_LEN 256
#define ASH_NAME_DEF "dev/ashmem"
#define ASH_IOC 0x77
struct ash_pin {
	uint32_t offset;
	uint32_t len;
};
#define ASH_NOT_PURGED 0
#define ASH_WAS_PURGED 1
#define ASH_IS_UNPINNED 0
#define ASH_IS_PINNED 1
#define ASH_SET_NAME _IOW(ASH_IOC, 1, char[ASH_NAME_LEN])
#define ASH_GET_NAME _IOR(ASH_IOC, 2, char[ASH_NAME_LEN])
#define ASH_SET_SIZE _IOW(ASH_IOC, 3, size_t)
#define ASH_GET_SIZE _IO(ASH_IOC, 4)
#define ASH_SET_PROT_MASK _IOW(ASH_IOC, 5, unsigned long)
#define ASH_GET_PROT_MASK _IO(ASH_IOC, 6)
#define ASH_PIN _IOW(ASH_IOC, 7, struct ash_pin)
#define ASH_UNPIN _IOW(ASH_IOC, 8, struct ash_pin)
#define ASH_GET_PIN_STATUS _IO(ASH_IOC, 9)
#define ASH_PURGE_ALL_CACHES _IO(ASH_IOC, 10)
#define ASH_GET_FILE_ID _IOR(ASH_IOC, 11, unsigned long)

#define ASH_PROT_ALL 7u /* PROT_READ | PROT_WRITE | PROT_EXEC */
/* The misc device's numbers: char 10:58 as on a kernel with the driver. */
#define ASH_RDEV_MAJOR 10
#define ASH_RDEV_MINOR 58

/* The per-file state, kept in the xattr ASH_XATTR of the backing file. */
#define ASH_XATTR "user.vrange.ashmem"
#define ASH_MAGIC 0x4d485341u /* "ASHM" */
#define ASH_MAPPED 1u
struct ash_meta {
	uint32_t magic;
	uint32_t flags;      /* ASH_MAPPED once the first mmap fixed the size */
	uint64_t size;       /* SET_SIZE, bytes */
	uint32_t prot_mask;
	uint32_t reserved;
	char name[ASH_NAME_LEN];
};

struct vfile;

struct ash_obj {
	struct ash_obj *next;  /* all areas, under shim_lock */
	unsigned int refs;     /* fds + mappings + calls in flight; shim_lock */
	dev_t dev;
	ino_t ino;
	int pfd;               /* private descriptor, own open file description */
	bool xattr;            /* meta lives on the file (else in .local) */
	bool layer;            /* the file layer holds state for the file */
	pthread_mutex_t lock;  /* serialises this process's meta updates */
	struct ash_meta local; /* meta when the file takes no xattr */
	/* Fixed once mapped: the size cannot change any more. */
	_Atomic bool mapped;
	uint64_t mapped_size;
	/* The library's state of the mapped area, held while this process
	 * holds the area (o->lock): purges here see it, and this process
	 * stays one of its holders however the ioctls come and go. */
	struct vfile *vf;
	/* Another process may hold the file: it came from elsewhere (not
	 * this process's open), was sent over a socket, or a fork happened.
	 * Until then a first mmap keeps the state private (state_pool.h);
	 * sending it or forking makes it shared (vfile_share).  shim_lock. */
	bool escaped;
	bool fresh_private;    /* the first mmap here kept the state private:
				* hold_state makes it (o->lock) */
};

/* Real libc functions, resolved with dlsym(RTLD_NEXT). */
struct shim_real {
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
	int (*open_2)(const char *, int);
	int (*open64_2)(const char *, int);
	int (*openat_2)(int, const char *, int);
	int (*openat64_2)(int, const char *, int);
	int (*stat)(const char *, struct stat *);
	int (*lstat)(const char *, struct stat *);
	int (*fstat)(int, struct stat *);
	int (*fstatat)(int, const char *, struct stat *, int);
	int (*xstat)(int, const char *, struct stat *);
	int (*lxstat)(int, const char *, struct stat *);
	int (*fxstat)(int, int, struct stat *);
	int (*fxstatat)(int, int, const char *, struct stat *, int);
	int (*statx)(int, const char *, int, unsigned int, struct statx *);
	int (*ioctl)(int, unsigned long, ...);
	void *(*mmap)(void *, size_t, int, int, int, off_t);
	int (*munmap)(void *, size_t);
	void *(*mremap)(void *, size_t, size_t, int, ...);
	int (*mprotect)(void *, size_t, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*pread)(int, void *, size_t, off_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*pwrite)(int, const void *, size_t, off_t);
	off_t (*lseek)(int, off_t, int);
	int (*close)(int);
	int (*close_range)(unsigned int, unsigned int, int);
	void (*closefrom)(int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*ftruncate)(int, off_t);
	int (*fallocate)(int, int, off_t, off_t);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
};
extern struct shim_real shim_real SHIM_HIDDEN;
void shim_init(void) SHIM_HIDDEN;
extern size_t shim_page SHIM_HIDDEN;

/* ---- fd table and areas (objects.c) ---- */

/*
 * Entry values: an area pointer (an application's ashmem fd), the area
 * pointer | PRIVATE (the shim's own descriptor of that area's file), or
 * LIBRARY alone (a descriptor the shim's copy of libvrange opened on one of
 * those files: never adopted, never faked, closed without fuss).
 */
#define SHIM_FD_PRIVATE ((uintptr_t)1)
#define SHIM_FD_LIBRARY ((uintptr_t)2)
#define SHIM_FD_TAGS ((uintptr_t)3)
#define SHIM_L2_BITS 10
#define SHIM_L1_SIZE 1024
#define SHIM_MAX_FD (SHIM_L1_SIZE << SHIM_L2_BITS)

extern _Atomic(_Atomic(uintptr_t) *) shim_fdtab[SHIM_L1_SIZE] SHIM_HIDDEN;
extern _Atomic unsigned int shim_nmaps SHIM_HIDDEN;

/* Lock-free look-up: 0 for an fd the shim knows nothing about. */
static inline uintptr_t shim_fd_entry(int fd)
{
	_Atomic(uintptr_t) *chunk;

	if ((unsigned int)fd >= SHIM_MAX_FD)
		return 0;
	chunk = atomic_load_explicit(&shim_fdtab[(unsigned int)fd >> SHIM_L2_BITS],
				     memory_order_acquire);
	if (!chunk)
		return 0;
	return atomic_load_explicit(&chunk[fd & ((1 << SHIM_L2_BITS) - 1)],
				    memory_order_acquire);
}

/*
 * The area behind an application fd, with a reference taken (put it with
 * ash_put), or NULL when fd is no ashmem fd.  An fd the table does not know
 * is adopted when its file carries our xattr (received over a socket,
 * inherited over exec) if adopt is set.  A stale entry (the fd was closed
 * behind our back and its number reused) is dropped.
 */
struct ash_obj *ash_from_fd(int fd, bool adopt) SHIM_HIDDEN;
void ash_put(struct ash_obj *o) SHIM_HIDDEN;

/* open("/dev/ashmem..."): a new area and its fd, or -errno. */
int ash_create(int oflags) SHIM_HIDDEN;

/* close/dup bookkeeping; called by the wrappers around the real calls. */
void shim_fd_closing(int fd) SHIM_HIDDEN;
void shim_fd_dup(int oldfd, int newfd) SHIM_HIDDEN;
void shim_fd_range_closing(unsigned int first, unsigned int last) SHIM_HIDDEN;
/* open() of path returned fd: a reopening of one of our own descriptors? */
void shim_fd_opened(const char *path, int fd) SHIM_HIDDEN;
void shim_scan_inherited(void) SHIM_HIDDEN;

/* Meta access; 0 or -errno. */
int ash_meta_read(struct ash_obj *o, struct ash_meta *m) SHIM_HIDDEN;
int ash_meta_lock(struct ash_obj *o, struct ash_meta *m) SHIM_HIDDEN;
int ash_meta_unlock(struct ash_obj *o, struct ash_meta *m, bool write) SHIM_HIDDEN;

/* The area's size once mapped (0 before): the first mmap fixes it. */
uint64_t ash_mapped_size(struct ash_obj *o) SHIM_HIDDEN;
/* First mmap: format the file for the size, mark the area mapped. */
int ash_fix_size(struct ash_obj *o, uint64_t *size) SHIM_HIDDEN;
/* The file layer now holds state for this area. */
void ash_note_layer(struct ash_obj *o) SHIM_HIDDEN;
/* PURGE_ALL_CACHES: take on every ashmem fd this process holds that the
 * table does not know yet (received over a socket and not used since). */
void shim_adopt_unknown(void) SHIM_HIDDEN;

/* Mappings made through the shim (objects.c). */
int shim_map_add(struct ash_obj *o, void *addr, size_t len, uint64_t off,
		 unsigned int prot_mask, bool file) SHIM_HIDDEN;
void shim_map_forget(void *addr, size_t len) SHIM_HIDDEN;
/* -EACCES if prot asks for more than a mapping in [addr, addr+len) allows. */
int shim_map_check_prot(void *addr, size_t len, int prot) SHIM_HIDDEN;
/*
 * mremap of [addr, addr+old) to new bytes: -EINVAL if it would reach past
 * the area of a mapping it covers, else 0 and the mapping's area (with a
 * reference), offset, mask and kind (*o NULL when the range is none of ours).
 */
struct shim_map_info {
	uint64_t off;
	unsigned int mask;
	bool file;
};
int shim_map_lookup(void *addr, size_t old, size_t new_len, struct ash_obj **o,
		    struct shim_map_info *info) SHIM_HIDDEN;

/* ---- the driver's semantics (ashmem.c) ---- */
int ash_ioctl(struct ash_obj *o, int fd, unsigned long req, unsigned long arg) SHIM_HIDDEN;
void *ash_mmap(struct ash_obj *o, void *addr, size_t len, int prot, int flags,
	       int fd, off_t off) SHIM_HIDDEN;
ssize_t ash_read(struct ash_obj *o, int fd, void *buf, size_t n, off_t *pos) SHIM_HIDDEN;
off_t ash_lseek(struct ash_obj *o, int fd, off_t off, int whence) SHIM_HIDDEN;
void ash_fake_stat(struct stat *st) SHIM_HIDDEN;
void ash_fake_statx(struct statx *stx, unsigned int mask) SHIM_HIDDEN;

void shim_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2))) SHIM_HIDDEN;

static inline bool shim_is_ashmem_path(const char *path)
{
	return path && path[0] == '/' && __builtin_strncmp(path, "/dev/ashmem", 11) == 0;
}

/* fd is about to reach another process (SCM_RIGHTS): if it is an area,
 * its state must be where that process finds it. */
void ash_escape_fd(int fd) SHIM_HIDDEN;

#endif
