/* SPDX-License-Identifier: MIT */
/*
 * procs.c - read other processes' publications and the range trees they
 * name (see procs.h for the trust boundary).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "procs.h"
#include "range_tree.h"

static bool disk_file(const char *path);

const char *const vc_kind_names[] = { "region", "file", "cache", "anonymous" };

/* Limits on what another process can make us read. */
#define MAX_ARENA_BYTES (1ull << 30)
#define MAX_FD 0x7fffffff
#define PUB_TRIES 50        /* a writer at work: wait 1 ms, at most this often */
#define TREE_TRIES 5        /* a tree changing under our copy */
#define MAX_PAGEMAP_PAGES (1ull << 26)

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static uint64_t pages_to_bytes(uint64_t p)
{
	return p > (UINT64_MAX >> vr_page_shift) ? UINT64_MAX : p << vr_page_shift;
}

static bool fd_open_for_writing(pid_t pid, int fd)
{
	char path[64], buf[512];
	unsigned long flags;
	char *p;
	ssize_t n;
	int f;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)pid, fd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return false;
	n = read(f, buf, sizeof(buf) - 1);
	close(f);
	if (n <= 0)
		return false;
	buf[n] = 0;
	p = strstr(buf, "flags:");
	if (!p || sscanf(p + 6, "%lo", &flags) != 1)
		return false;
	return (flags & O_ACCMODE) == O_RDWR;
}

int vc_open_proc_fd(pid_t pid, int fd, int flags, bool need_write, struct stat *st)
{
	char path[64];
	struct stat st2;
	int opath, nfd;

	if (fd < 0 || fd > MAX_FD)
		return -EBADF;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	/* Look before opening: a FIFO or a device is never opened. */
	opath = open(path, O_PATH | O_CLOEXEC);
	if (opath < 0)
		return -errno;
	if (fstat(opath, st) < 0 || !S_ISREG(st->st_mode) ||
	    (need_write && !fd_open_for_writing(pid, fd))) {
		close(opath);
		return -EBADF;
	}
	/* Reopen what we looked at, not whatever the number names now. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", opath);
	nfd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	close(opath);
	if (nfd < 0)
		return -errno;
	if (fstat(nfd, &st2) < 0 || st2.st_dev != st->st_dev || st2.st_ino != st->st_ino) {
		close(nfd);
		return -EBADF;
	}
	*st = st2;
	return nfd;
}

static bool read_exact(int fd, void *buf, size_t n, off_t off)
{
	char *p = buf;

	while (n > 0) {
		ssize_t r = pread(fd, p, n, off);

		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
		off += r;
	}
	return true;
}

/* A library file's page words count some volatile pages in stripes at the
 * arena's end (page_words.h), which the header copy does not hold. */
static void add_fast_vol(int sfd, off_t at, uint64_t arena, struct vc_object *o)
{
	unsigned char tail[PW_HDR_BYTES];

	if (arena >= 2 * PW_HDR_BYTES &&
	    read_exact(sfd, tail, sizeof(tail), at + (off_t)(arena - PW_HDR_BYTES)) &&
	    pw_area_bytes(pw_peek_npages(tail)) <= arena)
		o->vol_pages = pw_plus(o->vol_pages, pw_peek_fast_vol(tail));
}

static bool pub_hdr_ok(const struct pub_hdr *h, pid_t pid)
{
	return !memcmp(h->magic, PUB_MAGIC, sizeof(PUB_MAGIC)) &&
	       h->version == PUB_VERSION && h->hdr_bytes == sizeof(*h) &&
	       h->entry_bytes == sizeof(struct pub_file) &&
	       h->page_size == vr_page_size && h->pid == pid &&
	       h->nfiles <= PUB_MAX_FILES;
}

/* A consistent copy of the record: 0, -EIO (malformed or never still). */
static int read_pub(int fd, pid_t pid, struct vc_proc *p, struct pub_file **ents)
{
	for (int t = 0; t < PUB_TRIES; t++) {
		struct pub_hdr h;
		struct pub_file *e;
		struct stat st;
		uint32_t seq;
		size_t n;

		if (!read_exact(fd, &h, sizeof(h), 0) || !pub_hdr_ok(&h, pid))
			return -EIO;
		if (h.seq & 1) {
			usleep(1000);
			continue;
		}
		n = h.nfiles;
		/* Entries the file cannot hold are a lie: no copy of them. */
		if (fstat(fd, &st) < 0 ||
		    (uint64_t)st.st_size < sizeof(h) + (uint64_t)n * sizeof(*e))
			return -EIO;
		e = calloc(n ? n : 1, sizeof(*e));
		if (!e)
			return -ENOMEM;
		if (read_exact(fd, e, n * sizeof(*e), sizeof(h)) &&
		    read_exact(fd, &seq, sizeof(seq), offsetof(struct pub_hdr, seq)) &&
		    seq == h.seq) {
			h.pressure_source[sizeof(h.pressure_source) - 1] = 0;
			h.access_fallback[sizeof(h.access_fallback) - 1] = 0;
			p->hdr = h;
			*ents = e;
			return 0;
		}
		free(e);
	}
	return -EIO;
}

static bool is_pub_link(const char *l)
{
	static const char want[] = "/memfd:" PUB_NAME " (deleted)";

	return !strcmp(l, want);
}

/* Find and read the publication of pid. */
static int find_pub(pid_t pid, struct vc_proc *p, struct pub_file **ents)
{
	char path[64], link[128];
	struct dirent *d;
	int r = -ESRCH;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -ESRCH;
	while (r != 0 && r != -ENOMEM && (d = readdir(dir))) {
		ssize_t n = readlinkat(dirfd(dir), d->d_name, link, sizeof(link) - 1);
		struct stat st;
		int fd;

		if (n <= 0)
			continue;
		link[n] = 0;
		if (!is_pub_link(link))
			continue;
		fd = vc_open_proc_fd(pid, atoi(d->d_name), O_RDONLY, false, &st);
		if (fd < 0)
			continue;
		r = read_pub(fd, pid, p, ents);
		close(fd);
	}
	closedir(dir);
	return r == -EIO ? -ESRCH : r;
}

static void read_comm(pid_t pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	out[0] = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, out, len - 1);
	close(fd);
	if (n < 0)
		n = 0;
	out[n] = 0;
	if (n > 0 && out[n - 1] == '\n')
		out[n - 1] = 0;
}

/* The name of the user's file: a memfd's name, else its path. */
static void read_name(pid_t pid, int fd, char *out, size_t len)
{
	static const char pre[] = "/memfd:", post[] = " (deleted)";
	char path[64], link[512];
	const char *src;
	ssize_t n;
	size_t l;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		n = 0;
	link[n] = 0;
	l = (size_t)n;
	if (l >= sizeof(post) - 1 && !strcmp(link + l - (sizeof(post) - 1), post))
		link[l - (sizeof(post) - 1)] = 0;
	src = strncmp(link, pre, sizeof(pre) - 1) ? link : link + sizeof(pre) - 1;
	l = strlen(src) < len - 1 ? strlen(src) : len - 1;
	memcpy(out, src, l);
	out[l] = 0;
}

struct walk {
	struct vc_object *o;
	enum vc_depth depth;
	uint64_t oldest_seq;
	size_t cap;
	bool oom;
};

static int visit(const struct rt_range *r, void *arg)
{
	struct walk *w = arg;
	struct vc_object *o = w->o;

	o->nranges++;
	if (r->state == RT_VOLATILE && r->seq < w->oldest_seq)
		w->oldest_seq = r->seq;
	if (w->depth < VC_RANGES && !(o->pf.flags & PUB_ANON))
		return 0;
	if (o->nr == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct vc_range *n = realloc(o->ranges, cap * sizeof(*n));

		if (!n) {
			w->oom = true;
			return 1;
		}
		o->ranges = n;
		w->cap = cap;
	}
	o->ranges[o->nr++] = (struct vc_range){
		.start = pages_to_bytes(r->start), .end = pages_to_bytes(r->end),
		.purged = r->state == RT_PURGED, .prio = r->prio, .seq = r->seq,
		.cost = r->state == RT_VOLATILE ? r->cost : 0,
	};
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Copy the whole arena, check it, walk it.  0 or -EIO. */
static int read_tree(int sfd, size_t arena_bytes, off_t at, struct vc_object *o,
		     enum vc_depth depth)
{
	void *buf = aligned_alloc(64, (arena_bytes + 63) & ~(size_t)63);
	int r = -EIO;

	if (!buf)
		return -ENOMEM;
	for (int t = 0; t < TREE_TRIES && r == -EIO; t++) {
		struct walk w = { .o = o, .depth = depth, .oldest_seq = UINT64_MAX };
		struct rt_tree tree;

		free(o->ranges);
		o->ranges = NULL;
		o->nr = o->nranges = 0;
		if (!read_exact(sfd, buf, arena_bytes, at))
			break;
		if (rt_attach(&tree, buf, arena_bytes) < 0 || rt_check(&tree) < 0)
			continue;
		if (rt_visit(&tree, 0, UINT64_MAX >> 1, visit, &w) != 0)
			r = w.oom ? -ENOMEM : -EIO;
		else
			r = 0;
		o->vol_pages = rt_volatile_pages(&tree);
		o->purged_pages = rt_purged_pages(&tree);
		if (w.oldest_seq != UINT64_MAX) {
			uint64_t now = now_ns();

			o->oldest_age_ms = now > w.oldest_seq ?
				(int64_t)((now - w.oldest_seq) / 1000000) : 0;
		}
	}
	free(buf);
	return r;
}

/* Resident pages of the volatile (not purged) anonymous ranges. */
static uint64_t anon_resident(pid_t pid, const struct vc_object *o)
{
	char path[64];
	uint64_t ent[512], count = 0, budget = MAX_PAGEMAP_PAGES;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	for (size_t i = 0; i < o->nr && budget; i++) {
		uint64_t p = o->ranges[i].start >> vr_page_shift;
		uint64_t end = o->ranges[i].end >> vr_page_shift;

		if (o->ranges[i].purged)
			continue;
		while (p < end && budget) {
			uint64_t n = end - p < 512 ? end - p : 512;
			ssize_t got;

			if (n > budget)
				n = budget;
			if (p > (UINT64_MAX >> 4))
				break;
			got = pread(fd, ent, n * 8, (off_t)(p * 8));
			if (got <= 0)
				break;
			for (ssize_t k = 0; k < got / 8; k++)
				count += (ent[k] >> 63) & 1;
			p += (uint64_t)got / 8;
			budget -= (uint64_t)got / 8;
		}
	}
	close(fd);
	return pages_to_bytes(count);
}

/* The tree of one object: its totals, and more with depth. */
static void read_state(pid_t pid, struct vc_object *o, enum vc_depth depth)
{
	struct stat st;
	uint64_t arena;
	off_t at = 0;
	unsigned char hdr[RT_HDR_COPY_BYTES] __attribute__((aligned(64)));
	int sfd = vc_open_proc_fd(pid, o->pf.state_fd, O_RDONLY, false, &st);

	if (sfd < 0)
		return;
	arena = (uint64_t)st.st_size;
	/* A library file's arena comes first, a foreign file's after the
	 * header page (it grows: shared_file.h). */
	if (o->pf.flags & (PUB_SHARED | PUB_FOREIGN_SHARED))
		arena = arena > vr_page_size ? arena - vr_page_size : 0;
	if (o->pf.flags & PUB_FOREIGN_SHARED)
		at = (off_t)vr_page_size;
	if (o->pf.flags & PUB_POOL) {
		/* A slot of the process's pool: the arena is inside the file. */
		if (o->pf.state_off > (uint64_t)st.st_size ||
		    o->pf.state_bytes > (uint64_t)st.st_size - o->pf.state_off)
			goto out;
		at = (off_t)o->pf.state_off;
		arena = o->pf.state_bytes;
	}
	if (arena < RT_HDR_COPY_BYTES || arena > MAX_ARENA_BYTES)
		goto out;
	if (depth == VC_TOTALS && !(o->pf.flags & PUB_ANON)) {
		memset(hdr, 0, sizeof(hdr));
		if (read_exact(sfd, hdr, sizeof(hdr), at) &&
		    rt_peek_totals(hdr, arena, &o->vol_pages, &o->purged_pages) == 0) {
			o->readable = true;
			add_fast_vol(sfd, at, arena, o);
		}
		goto out;
	}
	o->readable = read_tree(sfd, arena, at, o, depth) == 0;
	if (o->readable && (o->pf.flags & PUB_ANON))
		o->resident_bytes = anon_resident(pid, o);
	if (depth < VC_RANGES) {
		free(o->ranges);
		o->ranges = NULL;
		o->nr = 0;
	}
out:
	close(sfd);
}

static bool entry_ok(const struct pub_file *e)
{
	const uint32_t known = PUB_SHARED | PUB_ANON | PUB_FD_LAYER | PUB_CACHE |
			       PUB_FOREIGN_SHARED | PUB_POOL;

	if (e->flags & ~known)
		return false;
	if ((e->flags & PUB_SHARED) && (e->flags & PUB_FOREIGN_SHARED))
		return false;
	if ((e->flags & PUB_POOL) && (!(e->flags & PUB_SHARED) || e->state_off % 64))
		return false;
	if (e->flags & PUB_ANON)
		return e->user_fd == -1 &&
		       !(e->flags & (PUB_SHARED | PUB_FOREIGN_SHARED));
	return e->user_fd >= 0;
}

/* One entry of the publication: identity checked against the process's
 * own descriptor, then its tree. */
static int read_object(pid_t pid, const struct pub_file *e, struct vc_object *o,
		       enum vc_depth depth)
{
	struct stat st;

	memset(o, 0, sizeof(*o));
	o->pf = *e;
	o->oldest_age_ms = -1;
	if (!entry_ok(e))
		return -EIO;
	if (e->flags & PUB_ANON) {
		o->kind = VC_ANON;
		snprintf(o->name, sizeof(o->name), "[anonymous]");
	} else {
		char path[64];

		/* stat follows the link without opening anything (a FIFO or a
		 * device is never opened); list needs no more. */
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, e->user_fd);
		if (e->user_fd > MAX_FD || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			return -EIO; /* closed since, or not what it says */
		if ((uint64_t)st.st_dev != e->dev || (uint64_t)st.st_ino != e->ino)
			return -EIO;
		o->kind = e->flags & PUB_CACHE ? VC_CACHE :
			  (e->flags & PUB_SHARED) || e->regions ? VC_REGION : VC_FILE;
		o->size = e->user_size ? e->user_size : (uint64_t)st.st_size;
		/* A disk file's blocks are disk space, not memory: the
		 * process's own stats leave them out as well (contract 9). */
		o->resident_bytes = disk_file(path) ? 0 : (uint64_t)st.st_blocks * 512;
		if (depth > VC_TOTALS)
			read_name(pid, e->user_fd, o->name, sizeof(o->name));
	}
	read_state(pid, o, depth);
	return 0;
}

static bool disk_file(const char *path)
{
	struct statfs sfs;

	return statfs(path, &sfs) == 0 && sfs.f_type != TMPFS_MAGIC;
}

static void totals(struct vc_proc *p)
{
	for (size_t i = 0; i < p->nobj; i++) {
		const struct vc_object *o = &p->obj[i];

		p->regions = sat_add(p->regions, o->pf.regions);
		p->sigbus_regions = sat_add(p->sigbus_regions, o->pf.sigbus_regions);
		p->files += !!(o->pf.flags & PUB_FD_LAYER);
		p->caches += o->kind == VC_CACHE;
		p->volatile_bytes = sat_add(p->volatile_bytes,
			pages_to_bytes(sat_add(o->vol_pages, o->purged_pages)));
		p->purged_bytes = sat_add(p->purged_bytes, pages_to_bytes(o->purged_pages));
		p->resident_bytes = sat_add(p->resident_bytes, o->resident_bytes);
	}
}

int vc_read_proc(pid_t pid, enum vc_depth depth, struct vc_proc *out)
{
	struct pub_file *ents = NULL;
	int r;

	memset(out, 0, sizeof(*out));
	if (pid <= 0)
		return -ESRCH;
	vr_init_basic();
	out->pid = pid;
	r = find_pub(pid, out, &ents);
	if (r < 0)
		return r;
	read_comm(pid, out->comm, sizeof(out->comm));
	out->obj = calloc(out->hdr.nfiles ? out->hdr.nfiles : 1, sizeof(*out->obj));
	if (!out->obj) {
		free(ents);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < out->hdr.nfiles; i++)
		if (read_object(pid, &ents[i], &out->obj[out->nobj], depth) == 0)
			out->nobj++;
	free(ents);
	totals(out);
	return 0;
}

void vc_proc_free(struct vc_proc *p)
{
	for (size_t i = 0; p->obj && i < p->nobj; i++)
		free(p->obj[i].ranges);
	free(p->obj);
	p->obj = NULL;
	p->nobj = 0;
}

static int by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct vc_proc *)a)->pid, y = ((const struct vc_proc *)b)->pid;

	return (x > y) - (x < y);
}

int vc_read_all(enum vc_depth depth, struct vc_proc **out, size_t *n)
{
	struct vc_proc *v = NULL;
	size_t cap = 0, cnt = 0;
	pid_t self = getpid();
	struct dirent *d;
	DIR *dir = opendir("/proc");

	if (!dir)
		return -errno;
	while ((d = readdir(dir))) {
		char *end;
		long pid = strtol(d->d_name, &end, 10);
		struct vc_proc p;

		if (*end || pid <= 0 || pid == self)
			continue;
		if (vc_read_proc((pid_t)pid, depth, &p) < 0)
			continue;
		if (cnt == cap) {
			struct vc_proc *nv = realloc(v, (cap ? cap * 2 : 32) * sizeof(*v));

			if (!nv) {
				vc_proc_free(&p);
				break;
			}
			v = nv;
			cap = cap ? cap * 2 : 32;
		}
		v[cnt++] = p;
	}
	closedir(dir);
	if (cnt)
		qsort(v, cnt, sizeof(*v), by_pid);
	*out = v;
	*n = cnt;
	return 0;
}

void vc_procs_free(struct vc_proc *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		vc_proc_free(&p[i]);
	free(p);
}
