/* SPDX-License-Identifier: MIT */
/*
 * purge_all.c - vrangectl's purge: the tool becomes one more holder of
 * every library file it reaches and runs the library's own purge step on
 * them.  Everything the owners might be doing at the same moment is then
 * covered by the argument of docs/design.md ("Why INTACT holds"): the
 * discard happens under the file's shared lock, after the pages were found
 * volatile and recorded purged in the shared tree.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_state.h"
#include "purge.h"
#include "purge_all.h"

struct held {
	struct vfile *f;
	size_t proc;
};

/* Attach to one published library file; 1 if it was added to h. */
static int attach(const struct vc_proc *p, const struct vc_object *o,
		  struct held *h, size_t nh)
{
	struct stat st;
	struct vfile *f;
	int fd, r;

	/* Only what the owner itself holds open for writing is punched. */
	fd = vc_open_proc_fd(p->pid, o->pf.user_fd, O_RDWR, true, &st);
	if (fd < 0)
		return 0;
	if ((uint64_t)st.st_dev != o->pf.dev || (uint64_t)st.st_ino != o->pf.ino) {
		close(fd);
		return 0;
	}
	if (o->pf.flags & PUB_POOL) {
		/* A region only its owner holds: its state is a slot of the
		 * owner's pool, reached through the pool's descriptor. */
		struct stat pst;
		int pfd = vc_open_proc_fd(p->pid, o->pf.state_fd, O_RDWR, true, &pst);

		r = pfd < 0 ? -EBADF :
		    vfile_get_slot(fd, &st, pfd, o->pf.state_off, o->pf.state_bytes,
				   o->pf.user_size, &f);
		if (pfd >= 0)
			close(pfd);
	} else {
		r = vfile_get(fd, &st, &f);
	}
	close(fd);
	if (r < 0)
		return 0;
	for (size_t i = 0; i < nh; i++) {
		if (h[i].f == f) { /* held by an earlier process too */
			vfile_put(f);
			return 0;
		}
	}
	if (!f->shared) { /* its state is not where we can reach it */
		vfile_put(f);
		return 0;
	}
	h[nh].f = f;
	return 1;
}

static size_t owner_of(const struct held *h, size_t nh, const struct vfile *f)
{
	for (size_t i = 0; i < nh; i++)
		if (h[i].f == f)
			return h[i].proc;
	return SIZE_MAX;
}

struct credit_ctx {
	const struct held *h;
	size_t nh;
	struct vc_purge_result *res;
};

/* After each step of the pass: the bytes go to the process owning f. */
static void credit(struct vfile *f, uint64_t freed, void *arg)
{
	struct credit_ctx *c = arg;
	size_t who = owner_of(c->h, c->nh, f);

	if (who != SIZE_MAX)
		c->res->freed[who] += freed;
}

int vc_purge(const struct vc_proc *procs, size_t n, uint64_t bytes,
	     const dev_t *disk, struct vc_purge_result *res)
{
	struct credit_ctx ctx;
	size_t total = 0, nh = 0;
	struct purge_counters before, after;
	struct held *h;

	res->freed_bytes = res->unreachable_bytes = 0;
	res->freed = calloc(n ? n : 1, sizeof(*res->freed));
	for (size_t i = 0; i < n; i++)
		total += procs[i].nobj;
	h = calloc(total ? total : 1, sizeof(*h));
	if (!h || !res->freed) {
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < procs[i].nobj; k++) {
			const struct vc_object *o = &procs[i].obj[k];

			bool reach = o->pf.flags & (PUB_SHARED | PUB_FOREIGN_SHARED);

			if (reach && attach(&procs[i], o, h, nh)) {
				h[nh++].proc = i;
				continue;
			}
			if (!reach && !disk) /* disk files are all reachable */
				res->unreachable_bytes += vc_bytes(o->vol_pages);
		}
	}
	/* The library's purge pass, with the bytes credited to each owner. */
	ctx.h = h;
	ctx.nh = nh;
	ctx.res = res;
	purge_get_counters(&before);
	res->freed_bytes = disk ? purge_run_disk_each(*disk, bytes, credit, &ctx) :
				  purge_run_each(bytes, false, credit, &ctx);
	purge_get_counters(&after);
	res->purged_cost = after.purged_cost - before.purged_cost;
	for (size_t i = 0; i < nh; i++)
		vfile_put(h[i].f);
	free(h);
	return 0;
}
