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
#include <stdio.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "disk_file.h"
#include "disk_room.h"

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

int disk_check_writable(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	/* As fallocate(2): punching needs a descriptor open for writing. */
	if (fl < 0 || (fl & O_PATH) || (fl & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	return 0;
}

/*
 * Does punching work on fd's file system?  Asked of a file of our own
 * where one can be made (an O_TMPFILE in the file's directory: nobody
 * else writes it), else of the file itself 64 KiB past its end, where no
 * data is (at most blocks preallocated with KEEP_SIZE, which read as
 * zeros; an application appending there at this very moment could lose
 * what it wrote: only where no temporary file can be made).  0 or -errno.
 */
static int probe(int fd, const struct stat *st)
{
	int t = disk_tmpfile(fd, st->st_dev), r = 0;
	char page[4096] = { 1 };
	off_t at;

	if (t >= 0) {
		if (pwrite(t, page, sizeof(page), 0) != (ssize_t)sizeof(page) ||
		    fallocate(t, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      sizeof(page)) < 0)
			r = -errno;
		close(t);
		/* a refusal of the temporary file (no room to write it) is
		 * not the file system's answer: ask the file itself */
		if (r == 0 || r == -EOPNOTSUPP || r == -ENOSYS)
			return r;
		r = 0;
	}
	at = (off_t)(((uint64_t)st->st_size + 65535) & ~(uint64_t)65535);
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, 65536) < 0)
		r = -errno;
	return r;
}

int disk_check_fd(int fd, const struct stat *st)
{
	int k, r = 0;

	if (!S_ISREG(st->st_mode))
		return -EOPNOTSUPP;
	k = known(st->st_dev);
	if (k == 0 || (k < 0 && pseudo_fs(fd)))
		return -EOPNOTSUPP;
	if (disk_check_writable(fd) < 0)
		return -EBADF;
	if (k == 1)
		return 0;
	r = probe(fd, st);
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
		if (errno == ERANGE) /* larger than any record we write */
			return -EIO;
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

/*
 * The record's own path to the disk.  fsync of the data file would do, but
 * it writes every dirty page of the file back first - the very pages about
 * to be punched among them, which ext4 would otherwise drop unwritten.  On
 * ext4 (with a journal) and xfs every metadata change goes through one
 * ordered log: committing the log up to a later change commits every
 * earlier one.  So a change to an inode of our own on the same file system,
 * made after the attribute was written, and that inode's fsync make the
 * attribute durable without touching the data file's pages: an O_TMPFILE
 * (no name, gone with the process) in the data file's directory, one per
 * file system.  btrfs logs per inode
 * (an fsync of another file does not commit ours), ext4 without a journal
 * orders nothing: there, and wherever no such file can be made, fsync of
 * the data file.
 */
#define JOURNALS_MAX 32
static struct {
	dev_t dev;
	bool ordered; /* one ordered log: the O_TMPFILE path works */
} journals[JOURNALS_MAX];
static unsigned int njournals;
static pthread_mutex_t journal_lock = PTHREAD_MUTEX_INITIALIZER;

/* Does ext4 device dev keep a journal?  jbd2 lists each journal it runs. */
static bool ext4_has_journal(dev_t dev)
{
	char path[96];

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u", major(dev), minor(dev));
	{
		char link[256], proc[300];
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		const char *name;

		if (n <= 0)
			return false;
		link[n] = 0;
		name = strrchr(link, '/');
		name = name ? name + 1 : link;
		snprintf(proc, sizeof(proc), "/proc/fs/jbd2/%s-8", name);
		return access(proc, F_OK) == 0;
	}
}

static bool ordered_log(int fd, dev_t dev)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) < 0)
		return false;
	return sfs.f_type == XFS_SUPER_MAGIC ||
	       (sfs.f_type == EXT4_SUPER_MAGIC && ext4_has_journal(dev));
}

int disk_tmpfile(int fd, dev_t dev)
{
	char link[64], path[4096];
	struct stat st;
	ssize_t n;
	char *slash;
	int t;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return -1;
	path[n] = 0;
	slash = strrchr(path, '/');
	if (!slash || path[0] != '/')
		return -1;
	*(slash == path ? slash + 1 : slash) = 0;
	t = open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (t < 0)
		return -1;
	if (fstat(t, &st) < 0 || st.st_dev != dev) {
		close(t);
		return -1;
	}
	return t;
}

/* The file is made, committed and closed each time: no descriptor of
 * ours keeps the file system from being unmounted.  Its creation is the
 * later change the commit is forced up to. */
static int make_durable(int fd)
{
	struct stat st;
	bool ordered = false;
	unsigned int i;
	int t;

	if (fstat(fd, &st) < 0)
		return -EIO;
	pthread_mutex_lock(&journal_lock);
	for (i = 0; i < njournals && journals[i].dev != st.st_dev; i++)
		;
	if (i == njournals && njournals < JOURNALS_MAX) {
		journals[i].dev = st.st_dev;
		journals[i].ordered = ordered_log(fd, st.st_dev);
		njournals++;
	}
	if (i < njournals)
		ordered = journals[i].ordered;
	pthread_mutex_unlock(&journal_lock);
	t = ordered ? disk_tmpfile(fd, st.st_dev) : -1;
	if (t >= 0) {
		int r = fsync(t);

		close(t);
		if (r == 0)
			return 0;
	}
	return fsync(fd) < 0 ? -EIO : 0;
}

void disk_fork_prepare(void)
{
	pthread_mutex_lock(&probe_lock);
	pthread_mutex_lock(&journal_lock);
	disk_room_fork_prepare();
}

void disk_fork_done(void)
{
	disk_room_fork_done();
	pthread_mutex_unlock(&journal_lock);
	pthread_mutex_unlock(&probe_lock);
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

/*
 * The record's read-modify-write is the file's, not one state's: processes
 * that cannot share a state (other users: see docs/design.md) keep one
 * each, and a lost update of the record could leave a punched page out of
 * it.  An OFD lock far past any data (user.vrange's is the byte after)
 * makes each update whole.  Within one state the tree lock already orders
 * them (threads of one process share our descriptor's lock).
 */
static void record_lock(int fd, short type)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET,
		.l_start = INT64_MAX - 2, .l_len = 1,
	};

	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0 && errno == EINTR)
		;
}

static int record_add(int fd, const uint64_t *start, const uint64_t *end, uint32_t n);

/* The room kept on fd's file system given back (disk_room.h)? */
static bool room_given_back(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && disk_room_give_back(st.st_dev);
}

int disk_record_add(int fd, const uint64_t *start, const uint64_t *end, uint32_t n)
{
	int r;

	record_lock(fd, F_WRLCK);
	r = record_add(fd, start, end, n);
	record_lock(fd, F_UNLCK);
	return r;
}

static int record_add(int fd, const uint64_t *start, const uint64_t *end, uint32_t n)
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
	if ((r == -ENOSPC || r == -EDQUOT) && room_given_back(fd))
		r = write_record(fd, &rec);
	if (r == 0)
		r = make_durable(fd);
	if (r == 0)
		disk_test_after_record();
	return r;
}

static int record_clear(int fd, uint64_t start, uint64_t end);

int disk_record_clear(int fd, uint64_t start, uint64_t end)
{
	int r;

	record_lock(fd, F_WRLCK);
	r = record_clear(fd, start, end);
	record_lock(fd, F_UNLCK);
	return r;
}

static int record_clear(int fd, uint64_t start, uint64_t end)
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
