/* SPDX-License-Identifier: MIT */
/*
 * disk_file.c - which disk files the file layer takes, and the durable
 * record of their punched pages (disk_file.h; the argument is in
 * docs/design.md, "Why INTACT holds on disk").
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "disk_file.h"

#define RECORD_NAME "user.vrange.purged"
#define RECORD_MAGIC "vrdisk1"

struct record {
	char magic[8];
	uint32_t version;
	uint32_t n;
	struct disk_run r[DISK_RECORD_MAX];
};

bool disk_is_disk(int fd)
{
	struct statfs sfs;

	return fstatfs(fd, &sfs) == 0 && sfs.f_type != TMPFS_MAGIC;
}

/* File systems probed: does fallocate(PUNCH_HOLE | KEEP_SIZE) work there?
 * Only the file system's answers are kept (works / EOPNOTSUPP); a file's
 * own refusal (EPERM: immutable or append-only) is asked again. */
#define PROBED_MAX 32
static struct {
	dev_t dev;
	bool punches;
} probed[PROBED_MAX];
static unsigned int nprobed;
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

static int known(dev_t dev)
{
	int r = -1;

	pthread_mutex_lock(&probe_lock);
	for (unsigned int i = 0; i < nprobed; i++)
		if (probed[i].dev == dev)
			r = probed[i].punches;
	pthread_mutex_unlock(&probe_lock);
	return r;
}

static void remember(dev_t dev, bool punches)
{
	pthread_mutex_lock(&probe_lock);
	if (nprobed < PROBED_MAX) {
		probed[nprobed].dev = dev;
		probed[nprobed++].punches = punches;
	}
	pthread_mutex_unlock(&probe_lock);
}

/* Pseudo file systems whose regular files are not data: never probed
 * (a write-open /proc or sysfs file must not even be asked). */
static bool pseudo_fs(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) < 0)
		return true;
	switch (sfs.f_type) {
	case PROC_SUPER_MAGIC:
	case SYSFS_MAGIC:
	case DEBUGFS_MAGIC:
	case TRACEFS_MAGIC:
	case SECURITYFS_MAGIC:
	case CGROUP_SUPER_MAGIC:
	case CGROUP2_SUPER_MAGIC:
	case BPF_FS_MAGIC:
	case PSTOREFS_MAGIC:
	case EFIVARFS_MAGIC:
	case DEVPTS_SUPER_MAGIC:
		return true;
	default:
		return false;
	}
}

int disk_check_fd(int fd, const struct stat *st)
{
	int fl, k, r = 0;
	off_t at;

	if (!S_ISREG(st->st_mode))
		return -EOPNOTSUPP;
	k = known(st->st_dev);
	if (k == 0 || (k < 0 && pseudo_fs(fd)))
		return -EOPNOTSUPP;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -EBADF;
	/* As fallocate(2): punching needs a descriptor open for writing. */
	if ((fl & O_PATH) || (fl & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	if (k == 1)
		return 0;
	/* The probe punches 64 KiB past the end of the file, where no data
	 * is (at most blocks the application preallocated with KEEP_SIZE,
	 * which read as zeros anyway). */
	at = (off_t)(((uint64_t)st->st_size + 65535) & ~(uint64_t)65535);
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, 65536) < 0)
		r = -errno;
	if (r == 0 || r == -EOPNOTSUPP || r == -ENOSYS)
		remember(st->st_dev, r == 0);
	if (r == -EBADF)
		return -EBADF;
	return r == 0 ? 0 : -EOPNOTSUPP;
}

static int read_record(int fd, struct record *rec)
{
	ssize_t n = fgetxattr(fd, RECORD_NAME, rec, sizeof(*rec));

	if (n < 0) {
		rec->n = 0;
		return errno == ENODATA || errno == EOPNOTSUPP ? 0 : -errno;
	}
	if ((size_t)n < offsetof(struct record, r) ||
	    memcmp(rec->magic, RECORD_MAGIC, sizeof(rec->magic)) ||
	    rec->version != 1 || rec->n > DISK_RECORD_MAX ||
	    (size_t)n != offsetof(struct record, r) + rec->n * sizeof(rec->r[0]))
		return -EIO;
	for (uint32_t i = 0; i < rec->n; i++)
		if (rec->r[i].start >= rec->r[i].end ||
		    (i && rec->r[i].start <= rec->r[i - 1].end) ||
		    rec->r[i].end > (UINT64_MAX >> 13))
			return -EIO;
	return 0;
}

static int write_record(int fd, const struct record *rec)
{
	size_t len = offsetof(struct record, r) + rec->n * sizeof(rec->r[0]);

	if (rec->n == 0)
		return fremovexattr(fd, RECORD_NAME) == 0 || errno == ENODATA ? 0 : -errno;
	return fsetxattr(fd, RECORD_NAME, rec, len, 0) < 0 ? -errno : 0;
}

int disk_record_read(int fd, struct disk_run *runs)
{
	struct record rec;
	int r = read_record(fd, &rec);

	if (r < 0)
		return r;
	memcpy(runs, rec.r, rec.n * sizeof(rec.r[0]));
	return (int)rec.n;
}

bool disk_record_present(int fd)
{
	return fgetxattr(fd, RECORD_NAME, NULL, 0) >= 0;
}

/* Insert [s, e) into the sorted, disjoint runs of rec, joining neighbours
 * and overlaps.  -E2BIG if that needs one run more than there is room for. */
static int insert(struct record *rec, uint64_t s, uint64_t e)
{
	uint32_t i = 0, j;

	while (i < rec->n && rec->r[i].end < s)
		i++;
	j = i;
	while (j < rec->n && rec->r[j].start <= e) {
		if (rec->r[j].start < s)
			s = rec->r[j].start;
		if (rec->r[j].end > e)
			e = rec->r[j].end;
		j++;
	}
	/* runs [i, j) are replaced by one */
	if (i == j) {
		if (rec->n == DISK_RECORD_MAX)
			return -E2BIG;
		memmove(&rec->r[i + 1], &rec->r[i], (rec->n - i) * sizeof(rec->r[0]));
		rec->n++;
	} else if (j > i + 1) {
		memmove(&rec->r[i + 1], &rec->r[j], (rec->n - j) * sizeof(rec->r[0]));
		rec->n -= j - i - 1;
	}
	rec->r[i].start = s;
	rec->r[i].end = e;
	return 0;
}

static int kill_after_record = -1;

void disk_test_after_record(void)
{
	if (kill_after_record < 0) {
		const char *v = getenv("VRANGE_TEST_KILL_AFTER_RECORD");

		kill_after_record = v && strcmp(v, "1") == 0;
	}
	if (kill_after_record)
		kill(getpid(), SIGKILL);
}

int disk_record_add(int fd, const uint64_t *start, const uint64_t *end, uint32_t n)
{
	struct record rec;
	int r = read_record(fd, &rec);

	/* A malformed record is not overwritten: it may name punched pages
	 * (the loader took it for "everything purged"). */
	if (r < 0)
		return r;
	memcpy(rec.magic, RECORD_MAGIC, sizeof(rec.magic));
	rec.version = 1;
	for (uint32_t i = 0; i < n && r == 0; i++)
		r = insert(&rec, start[i], end[i]);
	if (r == 0)
		r = write_record(fd, &rec);
	/* Durable before any punch: the attribute is metadata of this inode,
	 * and fsync is the one call every file system promises to make it
	 * stable with (fdatasync may skip it; a sync of another file does
	 * on btrfs).  It also writes the file's dirty pages back:
	 * docs/design.md says what that costs. */
	if (r == 0 && fsync(fd) < 0)
		r = -EIO;
	if (r == 0)
		disk_test_after_record();
	return r;
}

int disk_record_clear(int fd, uint64_t start, uint64_t end)
{
	struct record rec, out;
	int r = read_record(fd, &rec);

	if (r < 0 || rec.n == 0)
		return r;
	out = rec;
	out.n = 0;
	for (uint32_t i = 0; i < rec.n; i++) {
		struct disk_run x = rec.r[i];

		if (x.end <= start || x.start >= end) {
			out.r[out.n++] = x;
			continue;
		}
		/* a run split in two by [start, end) needs one slot more:
		 * out has the room rec had, and loses at least this one */
		if (x.start < start)
			out.r[out.n++] = (struct disk_run){ x.start, start };
		if (x.end > end && out.n < DISK_RECORD_MAX)
			out.r[out.n++] = (struct disk_run){ end, x.end };
		else if (x.end > end)
			return -E2BIG; /* kept whole: the safe side */
	}
	if (out.n == rec.n && memcmp(out.r, rec.r, rec.n * sizeof(rec.r[0])) == 0)
		return 0;
	return write_record(fd, &out);
}
