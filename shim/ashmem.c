/* SPDX-License-Identifier: MIT */
/*
 * ashmem.c - the driver's semantics (drivers/staging/android/ashmem.c as
 * of its removal in 5.18): ioctls, mmap rules, the backing file's read and
 * llseek, and the character device that stat reports.  Everything returns
 * -errno; the wrappers turn that into -1 + errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim.h"
#include "vrange.h"

static uint64_t page_align(uint64_t v)
{
	return (v + shim_page - 1) & ~(uint64_t)(shim_page - 1);
}

/*
 * copy_from_user / copy_to_user: the kernel reads our own memory for us,
 * so a bad pointer is EFAULT instead of a crash.  Returns the bytes copied
 * (fewer when the range runs into unmapped memory), or -EFAULT.
 */
static ssize_t user_read(void *dst, const void *src, size_t n)
{
	struct iovec l = { dst, n }, r = { (void *)src, n };
	ssize_t k = process_vm_readv(getpid(), &l, 1, &r, 1, 0);

	if (k < 0 && (errno == ENOSYS || errno == EPERM)) {
		/* Seccomp or an old kernel: trust the pointer as libc would. */
		memcpy(dst, src, n);
		return (ssize_t)n;
	}
	return k < 0 ? -EFAULT : k;
}

/*
 * The data goes through a pipe: read(2) into dst makes the kernel do the
 * copy_to_user, so a bad or read-only dst is EFAULT, and tools that model
 * read(2) (valgrind) see dst as written - process_vm_writev they do not.
 */
static int user_write(void *dst, const void *src, size_t n)
{
	struct iovec l = { (void *)src, n }, r = { dst, n };
	int p[2];
	ssize_t k;

	if (pipe2(p, O_CLOEXEC) == 0) {
		k = shim_real.write(p[1], src, n);
		if (k == (ssize_t)n)
			k = shim_real.read(p[0], dst, n);
		shim_real.close(p[0]);
		shim_real.close(p[1]);
		return k == (ssize_t)n ? 0 : -EFAULT;
	}
	k = process_vm_writev(getpid(), &l, 1, &r, 1, 0);
	if (k < 0 && (errno == ENOSYS || errno == EPERM)) {
		memcpy(dst, src, n);
		return 0;
	}
	return k == (ssize_t)n ? 0 : -EFAULT;
}

static bool cap_sys_admin(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	return (d[CAP_SYS_ADMIN / 32].effective >> (CAP_SYS_ADMIN % 32)) & 1u;
}

static int set_name(struct ash_obj *o, const char *uname)
{
	char buf[ASH_NAME_LEN];
	struct ash_meta m;
	ssize_t k = user_read(buf, uname, sizeof(buf));
	size_t len;
	int r;

	if (k <= 0)
		return -EFAULT;
	len = strnlen(buf, (size_t)k);
	/* No terminator before the memory ended: strncpy_from_user faults. */
	if (len == (size_t)k && k < ASH_NAME_LEN)
		return -EFAULT;
	if (len >= ASH_NAME_LEN)
		len = ASH_NAME_LEN - 1;
	r = ash_meta_lock(o, &m);
	if (r < 0)
		return r;
	if (m.flags & ASH_MAPPED) {
		ash_meta_unlock(o, &m, false);
		return -EINVAL;
	}
	memcpy(m.name, buf, len);
	m.name[len] = '\0';
	return ash_meta_unlock(o, &m, true);
}

static int get_name(struct ash_obj *o, char *uname)
{
	struct ash_meta m;
	const char *name;
	int r = ash_meta_read(o, &m);

	if (r < 0)
		return r;
	name = m.name[0] ? m.name : ASH_NAME_DEF;
	return user_write(uname, name, strlen(name) + 1);
}

static int set_size(struct ash_obj *o, unsigned long size)
{
	struct ash_meta m;
	int r = ash_meta_lock(o, &m);

	if (r < 0)
		return r;
	if (m.flags & ASH_MAPPED) {
		ash_meta_unlock(o, &m, false);
		return -EINVAL;
	}
	m.size = size;
	return ash_meta_unlock(o, &m, true);
}

static int set_prot_mask(struct ash_obj *o, unsigned long prot)
{
	struct ash_meta m;
	int r = ash_meta_lock(o, &m);

	if (r < 0)
		return r;
	/* The mask may only lose bits. */
	if ((m.prot_mask & prot) != prot) {
		ash_meta_unlock(o, &m, false);
		return -EINVAL;
	}
	if ((prot & PROT_READ) && (personality(0xffffffff) & READ_IMPLIES_EXEC))
		prot |= PROT_EXEC;
	m.prot_mask = (uint32_t)prot;
	return ash_meta_unlock(o, &m, true);
}

static int pin_unpin(struct ash_obj *o, unsigned long req, const void *upin)
{
	struct ash_pin pin;
	uint64_t size, asz;
	uint32_t off, len;
	int r;

	if (user_read(&pin, upin, sizeof(pin)) != (ssize_t)sizeof(pin))
		return -EFAULT;
	size = ash_mapped_size(o);
	if (!size)
		return -EINVAL;
	asz = page_align(size);
	off = pin.offset;
	len = pin.len;
	/* By custom, len 0 means "everything onward" (computed in 32 bits). */
	if (!len)
		len = (uint32_t)(asz - off);
	if ((off | len) & (shim_page - 1))
		return -EINVAL;
	if (UINT32_MAX - off < len)
		return -EINVAL;
	if (asz < (uint64_t)off + len)
		return -EINVAL;
	if (o->pfd < 0)
		return -EBADF;
	ash_note_layer(o);
	switch (req) {
	case ASH_PIN:
		r = vrange_fd_mark_nonvolatile(o->pfd, off, len);
		if (r < 0)
			return r;
		return r == VRANGE_PURGED ? ASH_WAS_PURGED : ASH_NOT_PURGED;
	case ASH_UNPIN:
		r = vrange_fd_mark_volatile(o->pfd, off, len);
		return r < 0 ? r : 0;
	default:
		r = vrange_fd_is_volatile(o->pfd, off, len);
		if (r < 0)
			return r;
		return r ? ASH_IS_UNPINNED : ASH_IS_PINNED;
	}
}

static int purge_all(void)
{
	struct vrange_stats st;
	uint64_t pages = 0;

	if (!cap_sys_admin())
		return -EPERM;
	/* Every area this process holds counts, as with the driver's global
	 * LRU - also one whose fd came over a socket and was never used. */
	shim_adopt_unknown();
	/* The driver answers with its LRU's length: unpinned, not yet purged. */
	if (vrange_get_stats(&st) == 0 && st.volatile_bytes > st.purged_bytes)
		pages = (st.volatile_bytes - st.purged_bytes) / shim_page;
	vrange_purge(SIZE_MAX);
	return pages > INT32_MAX ? INT32_MAX : (int)pages;
}

static int get_file_id(struct ash_obj *o, void *uid)
{
	struct stat st;
	unsigned long ino;

	if (!ash_mapped_size(o))
		return -EINVAL;
	if (o->pfd < 0 || shim_real.fstat(o->pfd, &st) < 0)
		return -EBADF;
	ino = (unsigned long)st.st_ino;
	return user_write(uid, &ino, sizeof(ino));
}

int ash_ioctl(struct ash_obj *o, int fd, unsigned long req, unsigned long arg)
{
	struct ash_meta m;
	int r;

	switch (req) {
	case ASH_SET_NAME:
		return set_name(o, (const char *)arg);
	case ASH_GET_NAME:
		return get_name(o, (char *)arg);
	case ASH_SET_SIZE:
		return set_size(o, arg);
	case ASH_GET_SIZE:
		r = ash_meta_read(o, &m);
		return r < 0 ? r : (int)m.size;
	case ASH_SET_PROT_MASK:
		return set_prot_mask(o, arg);
	case ASH_GET_PROT_MASK:
		r = ash_meta_read(o, &m);
		return r < 0 ? r : (int)m.prot_mask;
	case ASH_PIN:
	case ASH_UNPIN:
	case ASH_GET_PIN_STATUS:
		return pin_unpin(o, req, (const void *)arg);
	case ASH_PURGE_ALL_CACHES:
		return purge_all();
	case ASH_GET_FILE_ID:
		return get_file_id(o, (void *)arg);
	case FIOCLEX:
	case FIONCLEX:
	case FIONBIO:
	case FIOASYNC:
		/* The VFS answers these before any driver sees them. */
		r = shim_real.ioctl(fd, req, arg);
		return r < 0 ? -errno : r;
	default:
		return -ENOTTY;
	}
}

void *ash_mmap(struct ash_obj *o, void *addr, size_t len, int prot, int flags,
	       int fd, off_t off)
{
	struct ash_meta m;
	uint64_t size, vlen;
	void *p;
	int r;

	r = ash_meta_read(o, &m);
	if (r < 0)
		goto fail;
	size = m.size;
	vlen = page_align(len);
	r = -EINVAL;
	if (len == 0 || size == 0 || vlen > page_align(size))
		goto fail;
	r = -EPERM;
	if ((unsigned int)prot & ~m.prot_mask & ASH_PROT_ALL)
		goto fail;
	/*
	 * Stricter than the driver, which checked the length only: the
	 * library keeps its metadata after the area, and no mapping may reach it.
	 */
	r = -EINVAL;
	if (off < 0 || (uint64_t)off + vlen > page_align(size))
		goto fail;
	if (!ash_mapped_size(o)) {
		r = ash_fix_size(o, &size);
		if (r < 0)
			goto fail;
	}
	if ((flags & MAP_TYPE) == MAP_PRIVATE) {
		/* The driver made private mappings anonymous (5.x): zeros, not the file. */
		p = shim_real.mmap(addr, len, prot, flags | MAP_ANONYMOUS, -1, 0);
	} else {
		p = shim_real.mmap(addr, len, prot, flags, fd, off);
	}
	if (p == MAP_FAILED)
		return p;
	if ((flags & MAP_FIXED) && atomic_load(&shim_nmaps))
		shim_map_forget(p, len);
	/* The mask now in force is all mprotect may give this mapping later. */
	shim_map_add(o, p, (size_t)vlen, (uint64_t)off, m.prot_mask,
		     (flags & MAP_TYPE) != MAP_PRIVATE);
	return p;
fail:
	errno = -r;
	return MAP_FAILED;
}

ssize_t ash_read(struct ash_obj *o, int fd, void *buf, size_t n, off_t *pos)
{
	uint64_t size = ash_mapped_size(o);
	off_t cur;
	ssize_t k;

	if (!size) {
		struct ash_meta m;
		int r = ash_meta_read(o, &m);

		if (r < 0)
			return r;
		/* No size: always EOF; a size but no file yet: EBADF. */
		return m.size == 0 ? 0 : -EBADF;
	}
	cur = pos ? *pos : shim_real.lseek(fd, 0, SEEK_CUR);
	if (cur < 0)
		return -errno;
	/* The file may be longer (library metadata): the area ends at size. */
	if ((uint64_t)cur >= size)
		return 0;
	if (n > size - (uint64_t)cur)
		n = (size_t)(size - (uint64_t)cur);
	k = pos ? shim_real.pread(fd, buf, n, *pos) : shim_real.read(fd, buf, n);
	return k < 0 ? -errno : k;
}

off_t ash_lseek(struct ash_obj *o, int fd, off_t off, int whence)
{
	uint64_t size = ash_mapped_size(o);
	off_t r, cur;

	if (!size) {
		struct ash_meta m;
		int e = ash_meta_read(o, &m);

		if (e < 0)
			return e;
		return m.size == 0 ? -EINVAL : -EBADF;
	}
	switch (whence) {
	case SEEK_SET:
	case SEEK_CUR:
		r = shim_real.lseek(fd, off, whence);
		break;
	case SEEK_END:
		if ((off > 0 && (uint64_t)off > (uint64_t)INT64_MAX - size) ||
		    (off < 0 && (uint64_t)-(off + 1) >= size))
			return -EINVAL;
		r = shim_real.lseek(fd, (off_t)size + off, SEEK_SET);
		break;
	case SEEK_DATA:
	case SEEK_HOLE:
		if (off < 0 || (uint64_t)off >= size)
			return -ENXIO;
		cur = shim_real.lseek(fd, 0, SEEK_CUR);
		r = shim_real.lseek(fd, off, whence);
		if (r < 0)
			break;
		if ((uint64_t)r < size)
			return r;
		if (whence == SEEK_HOLE)
			/* The area's end is a hole, as i_size was for the driver. */
			return shim_real.lseek(fd, (off_t)size, SEEK_SET) < 0 ? -errno : (off_t)size;
		/* Data only past the area (metadata): none for the caller. */
		shim_real.lseek(fd, cur, SEEK_SET);
		return -ENXIO;
	default:
		return -EINVAL;
	}
	return r < 0 ? -errno : r;
}

/* ---- the character device stat reports ---- */

static struct stat dev_tmpl;
static pthread_once_t tmpl_once = PTHREAD_ONCE_INIT;

static void tmpl_init(void)
{
	/* Look like a node in /dev: its device, times; crw-rw-rw- 10:58. */
	if (shim_real.stat("/dev", &dev_tmpl) < 0) {
		memset(&dev_tmpl, 0, sizeof(dev_tmpl));
		dev_tmpl.st_dev = makedev(0, 5);
	}
	dev_tmpl.st_ino = 58;
	dev_tmpl.st_mode = S_IFCHR | 0666;
	dev_tmpl.st_nlink = 1;
	dev_tmpl.st_uid = 0;
	dev_tmpl.st_gid = 0;
	dev_tmpl.st_rdev = makedev(ASH_RDEV_MAJOR, ASH_RDEV_MINOR);
	dev_tmpl.st_size = 0;
	dev_tmpl.st_blocks = 0;
	dev_tmpl.st_blksize = 4096;
}

void ash_fake_stat(struct stat *st)
{
	pthread_once(&tmpl_once, tmpl_init);
	*st = dev_tmpl;
}

static struct statx_timestamp ts(const struct timespec *t)
{
	struct statx_timestamp s = { .tv_sec = t->tv_sec, .tv_nsec = (uint32_t)t->tv_nsec };

	return s;
}

void ash_fake_statx(struct statx *stx, unsigned int mask)
{
	struct stat st;

	(void)mask;
	ash_fake_stat(&st);
	memset(stx, 0, sizeof(*stx));
	stx->stx_mask = STATX_BASIC_STATS;
	stx->stx_blksize = (uint32_t)st.st_blksize;
	stx->stx_nlink = (uint32_t)st.st_nlink;
	stx->stx_uid = st.st_uid;
	stx->stx_gid = st.st_gid;
	stx->stx_mode = (uint16_t)st.st_mode;
	stx->stx_ino = st.st_ino;
	stx->stx_size = 0;
	stx->stx_blocks = 0;
	stx->stx_atime = ts(&st.st_atim);
	stx->stx_ctime = ts(&st.st_ctim);
	stx->stx_mtime = ts(&st.st_mtim);
	stx->stx_rdev_major = major(st.st_rdev);
	stx->stx_rdev_minor = minor(st.st_rdev);
	stx->stx_dev_major = major(st.st_dev);
	stx->stx_dev_minor = minor(st.st_dev);
}
