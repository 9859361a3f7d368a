/* SPDX-License-Identifier: MIT */
/*
 * vrange.c - the public entry points that are not about one region: the
 * file layer, the vrange() address form, version and statistics.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "any_mapping.h"
#include "cache.h"
#include "config.h"
#include "disk_file.h"
#include "disk_reserve.h"
#include "fd_hint.h"
#include "fd_stat.h"
#include "file_state.h"
#include "pressure.h"
#include "publish.h"
#include "purge.h"
#include "region.h"
#include "shared_file.h"
#include "shmem.h"
#include "stats_abi.h"
#include "uffd_purge.h"
#include "vrange.h"

const char *vrange_version(void)
{
	return VRANGE_VERSION;
}

/*
 * Which files the file layer takes: shared-memory files, and regular files
 * of file systems that punch holes (disk_file.h; *disk).  0, -EBADF,
 * -EOPNOTSUPP.
 */
static int file_kind(int fd, const struct stat *st, bool *disk)
{
	int r = shmem_check_kind(fd, st);

	if (r == -EOPNOTSUPP && S_ISREG(st->st_mode)) {
		r = disk_check_fd(fd, st);
		*disk = r == 0;
	}
	return r;
}

/* The end of a file-layer call on f: unpinned or its reference put. */
static void fd_layer_end(struct vfile *f, bool pinned)
{
	if (pinned)
		fd_hint_unpin();
	else
		vfile_put(f);
}

/*
 * Validate a file-layer call and find the file's state (*pinned: the
 * thread's hint, else a reference; fd_layer_end() lets go of either).  A
 * file already known was checked when it was first seen,
 * so a call on it costs one fstat.  The range is checked against the size
 * the file shows before the file layer takes its own reference, and a
 * query or unmark on a file with no state creates none (unless the state
 * lives in the file: a library file).
 * 1: go on; 0: nothing to do (len 0, or no state: not volatile / INTACT);
 * -errno.
 */
static int fd_layer_begin(int fd, off_t off, off_t len, bool marking,
			  struct vfile **out, bool *pinned, uint64_t *start,
			  uint64_t *end)
{
	struct vfile *f = NULL;
	struct stat st;
	uint64_t user_size, gen = 0;
	bool disk = false;
	int r;

	/* The caller's fd first: start-up opens descriptors of its own (the
	 * monitor's), and one of them could take the number of an fd the
	 * caller has just closed - examined after it, that fd would not be
	 * -EBADF but the library's own file. */
	if (fd < 0 || fd_stat(fd, &st) < 0)
		return -EBADF;
	vr_init();
	fd_hint_init();
	/* The thread's last file, if this is it (fd_hint.h); else the
	 * registry, with a reference. */
	f = fd_hint_pin(st.st_dev, st.st_ino);
	*pinned = f != NULL;
	if (!f) {
		gen = fd_hint_gen();
		f = vfile_find(st.st_dev, st.st_ino, fd);
	}
	if (f)
		/* A disk file: this descriptor must be open for writing too. */
		r = f->disk ? disk_check_writable(fd) : 0;
	else
		r = file_kind(fd, &st, &disk);
	if (r == 0 && (off < 0 || len < 0))
		r = -EINVAL;
	/* A dormant state is the file's (file_state.h): vfile_get revives it.
	 * A disk file's record of punched pages is too (disk_file.h). */
	if (r == 0 && !f && !marking && !vfile_dormant_known(st.st_dev, st.st_ino) &&
	    !(disk && disk_record_present(fd))) {
		r = vshared_probe(fd, &user_size);
		if (r == 0) { /* foreign and stateless: answer without state */
			r = vr_page_range((uint64_t)off, (uint64_t)len,
					  (uint64_t)st.st_size, false, start, end);
			return r;
		}
		r = r < 0 ? r : 0;
	}
	if (r == 0 && !f)
		r = vfile_get(fd, &st, &f);
	if (r < 0)
		goto fail;
	r = vr_page_range((uint64_t)off, (uint64_t)len, vfile_user_size(f, &st),
			  marking, start, end);
	if (r == 0 && *start < *end && marking)
		r = vfile_attach_fd_layer(f);
	if (r < 0 || *start == *end)
		goto fail;
	if (!*pinned && atomic_load_explicit(&f->fd_layer, memory_order_relaxed))
		fd_hint_note(f, st.st_dev, st.st_ino, gen);
	*out = f;
	return 1;
fail:
	fd_layer_end(f, *pinned);
	return r;
}

int vrange_fd_mark_volatile(int fd, off_t off, off_t len)
{
	struct vfile *f = NULL;
	bool pinned = false;
	uint64_t start, end;
	int r = fd_layer_begin(fd, off, len, true, &f, &pinned, &start, &end);

	if (r <= 0)
		return r;
	r = vfile_mark_volatile(f, start, end, 0);
	if (r == 0 && f->disk && !f->disk_refused)
		disk_reserve_kick();
	fd_layer_end(f, pinned);
	return r;
}

int vrange_fd_mark_nonvolatile(int fd, off_t off, off_t len)
{
	struct vfile *f = NULL;
	bool pinned = false;
	uint64_t start, end;
	int r = fd_layer_begin(fd, off, len, false, &f, &pinned, &start, &end);

	if (r <= 0)
		return r;
	r = vfile_mark_nonvolatile(f, start, end);
	fd_layer_end(f, pinned);
	return r;
}

int vrange_fd_is_volatile(int fd, off_t off, off_t len)
{
	struct vfile *f = NULL;
	bool pinned = false;
	uint64_t start, end;
	int r = fd_layer_begin(fd, off, len, false, &f, &pinned, &start, &end);

	if (r <= 0)
		return r;
	r = vfile_is_volatile(f, start, end);
	fd_layer_end(f, pinned);
	return r;
}

int vrange_fd_forget(int fd)
{
	struct stat st;

	vr_init_basic();
	if (fd < 0)
		return -EBADF;
	if (fd_stat(fd, &st) < 0)
		return -errno; /* -EBADF for a bad fd, else what went wrong */
	return vfile_forget(st.st_dev, st.st_ino);
}

int vrange(void *addr, size_t len, int mode, int *purged)
{
	struct vrange_region *r;
	bool partly;
	size_t off;
	int ret;

	if (mode != VRANGE_VOLATILE && mode != VRANGE_NONVOLATILE)
		return -EINVAL;
	vr_init_basic();
	if (len == 0) {
		if (mode == VRANGE_NONVOLATILE && purged)
			*purged = 0;
		return 0;
	}
	if (!addr || (uintptr_t)addr > UINTPTR_MAX - len)
		return -ENOENT;
	r = region_lookup_last(addr, len, &partly);
	if (partly)
		return -ENOENT;
	if (!r)
		return anymap_vrange(addr, len, mode, purged);
	off = (size_t)((char *)addr - r->map.base);
	/* One whole page: the region's own fast path, inline (region.h). */
	if (mode == VRANGE_VOLATILE)
		return region_fast_vol(r, off, len) ? 0 : region_mark_volatile(r, off, len);
	if (region_fast_nonvol(r, off, len)) {
		if (purged)
			*purged = 0;
		return 0;
	}
	ret = region_mark_nonvolatile(r, off, len);
	if (ret < 0)
		return ret;
	if (purged)
		*purged = ret == VRANGE_PURGED;
	return 0;
}

static void fill_stats(struct vrange_stats *out)
{
	struct purge_counters pc;
	uint64_t vol, purged, resident;

	vr_init_basic();
	pressure_check_cgroup();
	cache_flush_all(); /* released cache values count as volatile */
	memset(out, 0, sizeof(*out));
	/* A cache's regions are its own business, not the caller's. */
	out->regions = region_count() - cache_region_count();
	anymap_sweep(); /* memory unmapped since is counted no longer */
	vfile_totals(&out->files, &vol, &purged, &resident);
	out->volatile_bytes = (vol + purged) << vr_page_shift;
	out->purged_bytes = purged << vr_page_shift;
	purge_get_counters(&pc);
	out->purges = pc.purges;
	out->purged_total = pc.purged_total;
	out->pressure_events = pc.pressure_events;
	out->refills = pc.refills;
	out->purged_cost = pc.purged_cost;
	pressure_fill_stats(out);
	{
		uint64_t dvol, dpurged, refused;
		const char *why;

		vfile_disk_totals(&dvol, &dpurged, &refused, &why);
		out->disk_volatile_bytes = (dvol + dpurged) << vr_page_shift;
		out->disk_purged_bytes = dpurged << vr_page_shift;
		out->disk_freed_total = pc.disk_freed_total;
		out->disk_purges = pc.disk_purges;
		out->disk_unpunchable = refused;
		strncpy(out->disk_unpunchable_why, why,
			sizeof(out->disk_unpunchable_why) - 1);
	}
	strncpy(out->plain_marks_off, plain_marks_off_why(),
		sizeof(out->plain_marks_off) - 1);
	strncpy(out->access_fallback, uffd_fallback_reason(),
		sizeof(out->access_fallback) - 1);
	uffd_fallbacks(&out->sigbus_fallbacks, out->sigbus_fallback,
		       sizeof(out->sigbus_fallback));
	publish_status();
}

int vrange_get_stats_sized(struct vrange_stats *out, size_t size)
{
	struct vrange_stats all;

	if (!out || size < VR_STATS_SIZE_0_1)
		return -EINVAL;
	fill_stats(&all);
	/* The caller's struct holds size bytes: the fields both sides know, and
	 * zeros for those of a newer header than this library's. */
	if (size > sizeof(all)) {
		memset((char *)out + sizeof(all), 0, size - sizeof(all));
		size = sizeof(all);
	}
	memcpy(out, &all, size);
	return 0;
}
