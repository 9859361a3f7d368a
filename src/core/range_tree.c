/* SPDX-License-Identifier: MIT */
/*
 * range_tree.c - the interval tree behind all marking (see range_tree.h).
 *
 * Layout: the arena is an array of 64-byte slots.  Slot 0 holds the header;
 * slots 1..cap hold nodes, addressed by uint32 index, 0 meaning nil.  Each
 * node sits in two red-black trees at once through two link sets: the
 * address tree (every range, keyed by start) and the purge-order tree
 * (RT_VOLATILE ranges only, keyed by (prio, cost class descending, seq,
 * start): within a class keys ascend with seq, see tree_oldest).  One index-based
 * red-black implementation serves both, parameterised by the link set.
 *
 * Untrusted arena: every index read from the arena goes through node_at(),
 * which rejects 0, anything beyond the locally trusted t->cap and slots that
 * are not live ranges; every loop is bounded by RT_MAX_DEPTH (tree walks) or
 * t->cap (list and in-order walks).  So hostile content yields -EIO, never an
 * access outside the arena or a hang.
 *
 * Every change goes through one engine, apply(): it streams over the ranges
 * touching [start, end), turns them into the pieces the operation leaves
 * there, merges equal neighbours and writes the result back, reusing the old
 * nodes in address order.  It runs three times: a read-only pass that checks
 * the ranges and counts the fresh nodes needed (so -ENOMEM happens before
 * anything is written), a pass that unlinks from the order tree the nodes
 * whose order key changes, and the pass that writes.
 */
#include "range_tree.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define RT_MAGIC 0x32747672u /* "rvt2" */
#define RT_VERSION 3u /* 3: nodes carry a cost */
/* Added to the version of an arena with page words (page_words.h): a
 * reader that does not know them must not take it for a plain tree. */
#define RT_PAGED 0x10000u
/* Slack rt_arena_bytes() adds so that a full tree can still split twice. */
#define RT_SPARE 2u
/* No red-black tree of fewer than 2^32 nodes is deeper than 64. */
#define RT_MAX_DEPTH 128

enum { ADDR = 0, ORD = 1 };   /* which link set */
enum { LEFT = 0, RIGHT = 1 }; /* child direction */
enum { BLACK = 0, RED = 1 };  /* zero-filled means black, like nil */
enum { ST_NONE = 0 };         /* free slot / page in no range */

struct rt_link {
	uint32_t child[2];
	uint32_t parent;
};

struct rt_node {
	uint64_t start, end;
	uint64_t seq;
	int32_t prio;
	uint32_t cost; /* RT_VOLATILE: >= 1; else 0 */
	uint8_t state; /* ST_NONE when free */
	uint8_t color[2];
	uint8_t pad;
	struct rt_link link[2]; /* free list: link[ADDR].child[LEFT] */
};

struct rt_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t cap;
	uint32_t root[2];
	uint32_t free_head;
	uint32_t bump; /* first slot never handed out */
	uint32_t nfree;
	uint32_t nranges;
	/* The purge order's last node (0: empty).  New marks carry the
	 * largest seq and hang right of it: no walk down the right spine.
	 * Only a hint to the fast path, validated before use. */
	uint32_t ord_max;
	uint64_t vol_pages;
	uint64_t purged_pages;
};

_Static_assert(sizeof(struct rt_node) <= 64, "a range must cost <= 64 bytes");
_Static_assert(sizeof(struct rt_hdr) <= sizeof(struct rt_node),
	       "the header lives in slot 0");
_Static_assert(sizeof(struct rt_hdr) == 56, "header layout is RT_VERSION 2");

/* ------------------------------------------------------------------------ */
/* Arena access                                                              */

/* The live node at index i, or NULL if i cannot be one (nil, out of range,
 * free slot, garbage state). */
static inline struct rt_node *node_at(const struct rt_tree *t, uint32_t i)
{
	struct rt_node *n;

	if (i - 1u >= t->cap) /* i == 0 wraps; cap < UINT32_MAX */
		return NULL;
	n = &t->nodes[i];
	if ((uint8_t)(n->state - RT_VOLATILE) > RT_PURGED - RT_VOLATILE)
		return NULL;
	return n;
}

/* Header fields that operations rely on, checked against the trusted cap. */
static bool hdr_ok(const struct rt_tree *t)
{
	const struct rt_hdr *h = t->hdr;

	if (!h || h->magic != RT_MAGIC || h->version != t->ver)
		return false;
	if (h->bump == 0 || h->bump > t->cap + 1ull)
		return false;
	if (h->nfree > t->cap || h->free_head > t->cap)
		return false;
	return h->root[ADDR] <= t->cap && h->root[ORD] <= t->cap &&
	       h->ord_max <= t->cap;
}

static uint32_t cap_for(size_t arena_bytes)
{
	size_t slots = arena_bytes / sizeof(struct rt_node);

	if (slots == 0)
		return 0;
	if (slots - 1 > UINT32_MAX - 1)
		return UINT32_MAX - 1; /* keep cap + 1 representable */
	return (uint32_t)(slots - 1);
}

/* Only called after apply() saw enough free slots, so running out here means
 * the header lied: -EIO. */
static int alloc_node(struct rt_tree *t, uint32_t *out)
{
	struct rt_hdr *h = t->hdr;
	uint32_t i = h->free_head;

	if (i) {
		if (i > t->cap || t->nodes[i].state != ST_NONE || !h->nfree)
			return -EIO;
		h->free_head = t->nodes[i].link[ADDR].child[LEFT];
		h->nfree--;
	} else {
		if (h->bump == 0 || h->bump > t->cap)
			return -EIO;
		i = h->bump++;
	}
	memset(&t->nodes[i], 0, sizeof(t->nodes[i]));
	*out = i;
	return 0;
}

static void free_node(struct rt_tree *t, uint32_t i)
{
	struct rt_node *n = &t->nodes[i];

	memset(n, 0, sizeof(*n));
	n->link[ADDR].child[LEFT] = t->hdr->free_head;
	t->hdr->free_head = i;
	t->hdr->nfree++;
}

/* ------------------------------------------------------------------------ */
/* Red-black trees over index links; w selects the link set                  */

static int key_cmp(int w, const struct rt_node *a, const struct rt_node *b)
{
	if (w == ORD) {
		uint32_t ca = pw_cost_cls(a->cost), cb = pw_cost_cls(b->cost);

		if (a->prio != b->prio)
			return a->prio < b->prio ? -1 : 1;
		/* Dearer classes first: new marks are mostly of the
		 * cheapest and hang at the end (fast_insert). */
		if (ca != cb)
			return ca > cb ? -1 : 1;
		if (a->seq != b->seq)
			return a->seq < b->seq ? -1 : 1;
	}
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return 0;
}

/* Colour of index i (nil is black); -EIO if i is no node. */
static int color_of(const struct rt_tree *t, int w, uint32_t i)
{
	const struct rt_node *n;

	if (!i)
		return BLACK;
	n = node_at(t, i);
	return n ? n->color[w] : -EIO;
}

/* In parent p (0: the root slot) make the link that points to old point to
 * new. */
static inline int set_child(struct rt_tree *t, int w, uint32_t p,
			    uint32_t old, uint32_t new)
{
	struct rt_node *pn;

	if (!p) {
		t->hdr->root[w] = new;
		return 0;
	}
	pn = node_at(t, p);
	if (!pn)
		return -EIO;
	if (pn->link[w].child[LEFT] == old)
		pn->link[w].child[LEFT] = new;
	else if (pn->link[w].child[RIGHT] == old)
		pn->link[w].child[RIGHT] = new;
	else
		return -EIO;
	return 0;
}

/* x (node xn) moves down on side dir; y (node yn), its child on the other
 * side, takes its place.  Callers pass nodes they validated. */
static int rotate(struct rt_tree *t, int w, uint32_t x, struct rt_node *xn,
		  uint32_t y, struct rt_node *yn, int dir)
{
	struct rt_node *bn = NULL;
	uint32_t b, p;
	int err;

	if (xn->link[w].child[!dir] != y || y == x)
		return -EIO;
	b = yn->link[w].child[dir];
	if (b && !(bn = node_at(t, b)))
		return -EIO;
	p = xn->link[w].parent;
	err = set_child(t, w, p, x, y);
	if (err)
		return err;
	yn->link[w].parent = p;
	xn->link[w].child[!dir] = b;
	if (bn)
		bn->link[w].parent = x;
	yn->link[w].child[dir] = x;
	xn->link[w].parent = y;
	return 0;
}

/* The node furthest on side dir below x (x itself if it has no such child). */
static int extreme(const struct rt_tree *t, int w, uint32_t x, int dir,
		   uint32_t *out)
{
	for (int depth = 0; depth < RT_MAX_DEPTH; depth++) {
		const struct rt_node *n = node_at(t, x);

		if (!n)
			return -EIO;
		if (!n->link[w].child[dir]) {
			*out = x;
			return 0;
		}
		x = n->link[w].child[dir];
	}
	return -EIO;
}

/* In-order neighbour of x on side dir (RIGHT: successor); 0 if none. */
static int step(const struct rt_tree *t, int w, uint32_t x, int dir,
		uint32_t *out)
{
	const struct rt_node *n = node_at(t, x);

	if (!n)
		return -EIO;
	if (n->link[w].child[dir])
		return extreme(t, w, n->link[w].child[dir], !dir, out);
	for (int depth = 0; depth < RT_MAX_DEPTH; depth++) {
		uint32_t p = n->link[w].parent;
		const struct rt_node *pn;

		if (!p) {
			*out = 0;
			return 0;
		}
		pn = node_at(t, p);
		if (!pn)
			return -EIO;
		if (pn->link[w].child[!dir] == x) {
			*out = p;
			return 0;
		}
		if (pn->link[w].child[dir] != x)
			return -EIO;
		x = p;
		n = pn;
	}
	return -EIO;
}

/* z (node zn) hangs red below p (node pn), which is red: restore the rules.
 * Each index is validated once, when first read from the arena. */
static __attribute__((noinline)) int
insert_fixup(struct rt_tree *t, int w, uint32_t z, struct rt_node *zn,
	     uint32_t p, struct rt_node *pn)
{
	for (int depth = 0; depth < RT_MAX_DEPTH; depth++) {
		struct rt_node *gn, *un;
		uint32_t g, u;
		int dir, err;

		g = pn->link[w].parent;
		gn = node_at(t, g); /* a red node is never the root */
		if (!gn)
			return -EIO;
		dir = gn->link[w].child[RIGHT] == p;
		if (gn->link[w].child[dir] != p)
			return -EIO;
		u = gn->link[w].child[!dir];
		un = NULL;
		if (u && !(un = node_at(t, u)))
			return -EIO;
		if (un && un->color[w] == RED) {
			pn->color[w] = BLACK;
			un->color[w] = BLACK;
			gn->color[w] = RED;
			z = g;
			zn = gn;
			p = zn->link[w].parent;
			if (!p) {
				zn->color[w] = BLACK;
				return 0;
			}
			pn = node_at(t, p);
			if (!pn)
				return -EIO;
			if (pn->color[w] == BLACK)
				return 0;
			continue;
		}
		if (pn->link[w].child[!dir] == z) {
			err = rotate(t, w, p, pn, z, zn, dir);
			if (err)
				return err;
			p = z; /* z took p's place */
			pn = zn;
		}
		pn->color[w] = BLACK;
		gn->color[w] = RED;
		return rotate(t, w, g, gn, p, pn, !dir);
	}
	return -EIO;
}

/* Hang fresh node z (zn) below p (pn, validated; p == 0: z becomes the
 * root) on side dir, whose slot the caller saw empty. */
static inline __attribute__((always_inline)) int
hang(struct rt_tree *t, int w, uint32_t z, struct rt_node *zn, uint32_t p,
     struct rt_node *pn, int dir)
{
	zn->link[w] = (struct rt_link){ .parent = p };
	if (!p) {
		zn->color[w] = BLACK;
		t->hdr->root[w] = z;
		return 0;
	}
	zn->color[w] = RED;
	pn->link[w].child[dir] = z;
	if (pn->color[w] == BLACK)
		return 0;
	return insert_fixup(t, w, z, zn, p, pn);
}

/* Hang fresh node z below p on side dir (p == 0: z becomes the root). */
static int link_at(struct rt_tree *t, int w, uint32_t z, uint32_t p, int dir)
{
	struct rt_node *pn = NULL;

	if (p) {
		pn = node_at(t, p);
		if (!pn || pn->link[w].child[dir])
			return -EIO;
	} else if (t->hdr->root[w]) {
		return -EIO;
	}
	return hang(t, w, z, &t->nodes[z], p, pn, dir);
}

/* Insert z by its key.  In the purge order z becomes the last node when
 * every step went right. */
static int insert_key(struct rt_tree *t, int w, uint32_t z)
{
	uint32_t x = t->hdr->root[w], p = 0;
	int dir = LEFT, err;
	bool last = true;

	for (int depth = 0; x; depth++) {
		const struct rt_node *n = node_at(t, x);
		int c;

		if (!n || depth >= RT_MAX_DEPTH)
			return -EIO;
		c = key_cmp(w, &t->nodes[z], n);
		if (!c)
			return -EIO; /* keys are unique in a sane tree */
		p = x;
		dir = c > 0;
		last &= dir == RIGHT;
		x = n->link[w].child[dir];
	}
	err = link_at(t, w, z, p, dir);
	if (!err && w == ORD && last)
		t->hdr->ord_max = z;
	return err;
}

/* Insert z right next to x in order (side RIGHT: just after), by structure
 * alone: used while keys around x are being rewritten. */
static int insert_beside(struct rt_tree *t, int w, uint32_t z, uint32_t x,
			 int side)
{
	const struct rt_node *xn = node_at(t, x);
	uint32_t y;
	int err;

	if (!xn)
		return -EIO;
	if (!xn->link[w].child[side])
		return link_at(t, w, z, x, side);
	err = extreme(t, w, xn->link[w].child[side], !side, &y);
	if (err)
		return err;
	return link_at(t, w, z, y, !side);
}

/* x (node xn, NULL for nil) below xp has one black too few on its side.
 * Each index is validated once, when first read from the arena. */
static __attribute__((noinline)) int
erase_fixup(struct rt_tree *t, int w, uint32_t x, struct rt_node *xn,
	    uint32_t xp)
{
	for (int depth = 0; depth < RT_MAX_DEPTH; depth++) {
		struct rt_node *pn, *sn, *cn = NULL, *fn = NULL;
		uint32_t s, c, f;
		int dir, err;

		if (!xp || (xn && xn->color[w] == RED)) {
			/* x is the root, or red: blacken it */
			if (xn)
				xn->color[w] = BLACK;
			return 0;
		}
		pn = node_at(t, xp);
		if (!pn)
			return -EIO;
		if (pn->link[w].child[LEFT] == x)
			dir = LEFT;
		else if (pn->link[w].child[RIGHT] == x)
			dir = RIGHT;
		else
			return -EIO;
		s = pn->link[w].child[!dir];
		if (!(sn = node_at(t, s)))
			return -EIO; /* x's side is short: s must exist */
		if (sn->color[w] == RED) {
			sn->color[w] = BLACK;
			pn->color[w] = RED;
			err = rotate(t, w, xp, pn, s, sn, dir);
			if (err)
				return err;
			s = pn->link[w].child[!dir];
			if (!(sn = node_at(t, s)))
				return -EIO;
		}
		c = sn->link[w].child[dir];
		f = sn->link[w].child[!dir];
		if ((c && !(cn = node_at(t, c))) || (f && !(fn = node_at(t, f))))
			return -EIO;
		if ((!cn || cn->color[w] == BLACK) &&
		    (!fn || fn->color[w] == BLACK)) {
			sn->color[w] = RED;
			x = xp;
			xn = pn;
			xp = pn->link[w].parent;
			continue;
		}
		if (!fn || fn->color[w] == BLACK) {
			/* the near child is red: it becomes the sibling, the
			 * old sibling its far child */
			cn->color[w] = BLACK;
			sn->color[w] = RED;
			err = rotate(t, w, s, sn, c, cn, !dir);
			if (err)
				return err;
			fn = sn;
			s = c;
			sn = cn;
		}
		sn->color[w] = pn->color[w];
		pn->color[w] = BLACK;
		if (fn)
			fn->color[w] = BLACK;
		return rotate(t, w, xp, pn, s, sn, dir);
	}
	return -EIO;
}

/* The purge order's last node z goes and its shape is unusual: its
 * in-order predecessor becomes the last. */
static __attribute__((noinline)) int ord_pred(struct rt_tree *t, uint32_t z)
{
	return step(t, ORD, z, LEFT, &t->hdr->ord_max);
}

/* erase() for z (zn) with two children zl (zln) and zr (zrn). */
static __attribute__((noinline)) int
erase_two(struct rt_tree *t, int w, uint32_t z, struct rt_node *zn,
	  struct rt_node *zln, uint32_t zr, struct rt_node *zrn)
{
	struct rt_node *yn = zrn, *xn = NULL;
	uint32_t y = zr, x, xp, zp = zn->link[w].parent;
	int removed, err, depth;

	/* y: the successor, leftmost below zr */
	for (depth = 0; yn->link[w].child[LEFT]; depth++) {
		y = yn->link[w].child[LEFT];
		if (depth >= RT_MAX_DEPTH || !(yn = node_at(t, y)))
			return -EIO;
	}
	removed = yn->color[w];
	x = yn->link[w].child[RIGHT];
	if (x && !(xn = node_at(t, x)))
		return -EIO;
	if (y == zr) {
		xp = y;
	} else {
		xp = yn->link[w].parent;
		err = set_child(t, w, xp, y, x);
		if (err)
			return err;
		if (xn)
			xn->link[w].parent = xp;
		yn->link[w].child[RIGHT] = zr;
		zrn->link[w].parent = y;
	}
	err = set_child(t, w, zp, z, y);
	if (err)
		return err;
	yn->link[w].parent = zp;
	yn->link[w].child[LEFT] = zn->link[w].child[LEFT];
	zln->link[w].parent = y;
	yn->color[w] = zn->color[w];
	zn->link[w] = (struct rt_link){ 0 };
	zn->color[w] = BLACK;
	return removed == BLACK ? erase_fixup(t, w, x, xn, xp) : 0;
}

/* Unlink z (node zn, validated) from tree w by structure (its index stays
 * the same node).  The common case, at most one child, stays inline. */
static inline __attribute__((always_inline)) int
erase_at(struct rt_tree *t, int w, uint32_t z, struct rt_node *zn)
{
	struct rt_node *zln = NULL, *zrn = NULL, *xn;
	uint32_t zl = zn->link[w].child[LEFT], zr = zn->link[w].child[RIGHT];
	uint32_t zp = zn->link[w].parent, x;
	int removed, err;

	if ((zl && !(zln = node_at(t, zl))) || (zr && !(zrn = node_at(t, zr))))
		return -EIO;
	if (w == ORD && z == t->hdr->ord_max) {
		/* The last node goes: its predecessor is last now.  In a
		 * sane tree the last node has no right child, and a lone
		 * left child is a red leaf: the predecessor is zl, or else
		 * zp (z is its right child).  Other shapes take the walk,
		 * before unlinking while z's links still lead there. */
		if (!zr && (!zl || !zln->link[ORD].child[RIGHT]))
			t->hdr->ord_max = zl ? zl : zp;
		else if ((err = ord_pred(t, z)))
			return err;
	}
	if (zln && zrn)
		return erase_two(t, w, z, zn, zln, zr, zrn);
	x = zl | zr;
	xn = zln ? zln : zrn;
	removed = zn->color[w];
	err = set_child(t, w, zp, z, x);
	if (err)
		return err;
	if (xn)
		xn->link[w].parent = zp;
	zn->link[w] = (struct rt_link){ 0 };
	zn->color[w] = BLACK;
	if (removed != BLACK)
		return 0;
	if (xn && xn->color[w] == RED) {
		xn->color[w] = BLACK;
		return 0;
	}
	return zp ? erase_fixup(t, w, x, xn, zp) : 0;
}

static int erase(struct rt_tree *t, int w, uint32_t z)
{
	struct rt_node *zn = node_at(t, z);

	return zn ? erase_at(t, w, z, zn) : -EIO;
}

/* The first range whose end is >= pos (so it overlaps or touches pos). */
static int first_touching(const struct rt_tree *t, uint64_t pos, uint32_t *out)
{
	uint32_t x = t->hdr->root[ADDR], best = 0;

	for (int depth = 0; x; depth++) {
		const struct rt_node *n = node_at(t, x);

		if (!n || depth >= RT_MAX_DEPTH)
			return -EIO;
		if (n->end >= pos) {
			best = x;
			x = n->link[ADDR].child[LEFT];
		} else {
			x = n->link[ADDR].child[RIGHT];
		}
	}
	*out = best;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The change engine                                                         */

enum op_kind { OP_VOLATILE, OP_CLEAR, OP_PURGE, OP_UNPURGE };
enum mode { M_COUNT, M_UNLINK, M_COMMIT };

/* A stretch of pages with one state (ST_NONE: in no range). */
struct seg {
	uint64_t lo, hi, seq;
	int32_t prio;
	uint32_t cost;
	uint8_t state;
};

struct pass {
	struct rt_tree *t;
	enum op_kind kind;
	enum mode mode;
	uint64_t start, end, seq;
	int32_t prio;
	uint32_t cost;

	struct seg cur;     /* output range being grown (state 0: none yet) */
	uint32_t pool;      /* first old node read but not yet rewritten */
	uint32_t npool;     /* how many such (contiguous in address order) */
	uint32_t next;      /* next old node to read */
	uint32_t last;      /* node holding the last range written */
	uint64_t pos;       /* pages below pos in [start, end) are handled */
	uint64_t prev_end;  /* end of the last old node read */
	uint32_t nold, nout, nalloc;
	uint64_t before[3]; /* pages of [start, end) by old state */
	uint64_t after[3];  /* ... and by new state */
	uint64_t changed;   /* pages whose state or age changes */
};

static bool same_age(const struct seg *a, const struct seg *b)
{
	if (a->state != b->state)
		return false;
	return a->state != RT_VOLATILE ||
	       (a->prio == b->prio && a->seq == b->seq && a->cost == b->cost);
}

static void transform(const struct pass *p, struct seg *s)
{
	bool to_vol = false;

	switch (p->kind) {
	case OP_VOLATILE:
		to_vol = s->state != RT_PURGED;
		break;
	case OP_CLEAR:
		s->state = ST_NONE;
		break;
	case OP_PURGE:
		if (s->state == RT_VOLATILE)
			s->state = RT_PURGED;
		break;
	case OP_UNPURGE:
		to_vol = s->state == RT_PURGED;
		break;
	}
	if (to_vol) {
		s->state = RT_VOLATILE;
		s->prio = p->prio;
		s->seq = p->seq;
		s->cost = p->cost;
	}
	/* Age only means something for volatile pages. */
	if (s->state != RT_VOLATILE)
		s->prio = 0, s->seq = 0, s->cost = 0;
}

/* A fresh node for s, placed in order right after the last range written. */
static int emit_new(struct pass *p, const struct seg *s)
{
	struct rt_tree *t = p->t;
	struct rt_node *n;
	uint32_t z;
	int err;

	if (p->mode == M_COUNT) {
		p->nalloc++;
		return 0;
	}
	if (p->mode == M_UNLINK)
		return 0;
	err = alloc_node(t, &z);
	if (err)
		return err;
	n = &t->nodes[z];
	n->start = s->lo;
	n->end = s->hi;
	n->seq = s->seq;
	n->prio = s->prio;
	n->cost = s->cost;
	n->state = s->state;
	/* Structural placement: keys of the old nodes around are in flux. */
	if (p->last)
		err = insert_beside(t, ADDR, z, p->last, RIGHT);
	else if (p->next)
		err = insert_beside(t, ADDR, z, p->next, LEFT);
	else
		err = insert_key(t, ADDR, z);
	if (!err && s->state == RT_VOLATILE)
		err = insert_key(t, ORD, z);
	p->last = z;
	return err;
}

/* Rewrite old node i as s.  Its place in the order tree is kept only if its
 * order key stays the same; the unlink pass took it out otherwise. */
static int reuse(struct pass *p, uint32_t i, const struct seg *s)
{
	struct rt_node *n = node_at(p->t, i);
	bool keep;

	if (!n)
		return -EIO;
	keep = n->state == RT_VOLATILE && s->state == RT_VOLATILE &&
	       n->prio == s->prio && n->seq == s->seq && n->start == s->lo &&
	       n->cost == s->cost;
	if (p->mode == M_UNLINK)
		return n->state == RT_VOLATILE && !keep ? erase(p->t, ORD, i)
							: 0;
	n->start = s->lo;
	n->end = s->hi;
	n->seq = s->seq;
	n->prio = s->prio;
	n->cost = s->cost;
	n->state = s->state;
	p->last = i;
	return s->state == RT_VOLATILE && !keep ? insert_key(p->t, ORD, i) : 0;
}

/* Take the oldest unused old node off the pool (npool > 0). */
static int pool_take(struct pass *p, uint32_t *out)
{
	*out = p->pool;
	if (--p->npool)
		return step(p->t, ADDR, p->pool, RIGHT, &p->pool);
	return 0;
}

/* One output range is complete: store it in an old node if one is free
 * for reuse, else in a fresh one. */
static int emit(struct pass *p, const struct seg *s)
{
	uint32_t i;
	int err;

	p->nout++;
	if (!p->npool)
		return emit_new(p, s);
	if (p->mode == M_COUNT) {
		p->npool--;
		return 0;
	}
	err = pool_take(p, &i);
	return err ? err : reuse(p, i, s);
}

static int flush(struct pass *p)
{
	int err = 0;

	if (p->cur.state != ST_NONE)
		err = emit(p, &p->cur);
	p->cur.state = ST_NONE;
	return err;
}

/* Feed the next stretch of the result; equal neighbours merge. */
static int piece(struct pass *p, const struct seg *s)
{
	int err;

	if (s->lo >= s->hi)
		return 0;
	if (p->cur.state != ST_NONE && p->cur.hi == s->lo &&
	    same_age(&p->cur, s)) {
		p->cur.hi = s->hi;
		return 0;
	}
	err = flush(p);
	p->cur = *s;
	return err;
}

/* Stretch [lo, hi) of [start, end) had old state s: account, transform and
 * feed it. */
static int inside(struct pass *p, struct seg s)
{
	struct seg old = s;
	uint64_t len = s.hi - s.lo;

	if (s.lo >= s.hi)
		return 0;
	transform(p, &s);
	p->before[old.state] += len;
	p->after[s.state] += len;
	if (!same_age(&old, &s))
		p->changed += len;
	return piece(p, &s);
}

/* Read old node i (the next in address order) and feed what becomes of it. */
static int consume(struct pass *p, uint32_t i)
{
	const struct rt_node *n = node_at(p->t, i);
	struct seg old, gap = { 0 }, part;
	int err;

	if (!n)
		return -EIO;
	old = (struct seg){ .lo = n->start, .hi = n->end, .seq = n->seq,
			    .prio = n->prio, .cost = n->cost, .state = n->state };
	if (old.lo >= old.hi || old.hi < p->start ||
	    (p->nold && old.lo < p->prev_end))
		return -EIO;
	p->prev_end = old.hi;
	p->nold++;
	if (!p->npool++)
		p->pool = i;
	/* Before anything is inserted behind i. */
	err = step(p->t, ADDR, i, RIGHT, &p->next);
	if (err)
		return err;

	gap.lo = p->pos;
	gap.hi = old.lo;
	err = inside(p, gap);
	part = old;
	part.hi = old.hi < p->start ? old.hi : p->start;
	if (!err && old.lo < p->start)
		err = piece(p, &part); /* the part left of start stays */
	part.lo = old.lo > p->start ? old.lo : p->start;
	part.hi = old.hi < p->end ? old.hi : p->end;
	if (!err)
		err = inside(p, part);
	if (part.hi > p->pos)
		p->pos = part.hi;
	part.lo = old.lo > p->end ? old.lo : p->end;
	part.hi = old.hi;
	if (!err && old.hi > p->end)
		err = piece(p, &part); /* the part right of end stays */
	return err;
}

/* Old nodes left over once the result is written: drop them. */
static int drop_pool(struct pass *p)
{
	while (p->npool) {
		uint32_t i;
		int err = pool_take(p, &i);

		if (err)
			return err;
		if (p->mode == M_UNLINK) {
			if (p->t->nodes[i].state == RT_VOLATILE)
				err = erase(p->t, ORD, i);
		} else {
			err = erase(p->t, ADDR, i);
			if (!err)
				free_node(p->t, i);
		}
		if (err)
			return err;
	}
	return 0;
}

static int run_pass(struct pass *p, enum mode mode)
{
	struct seg tail = { 0 };
	uint32_t i;
	int err;

	p->mode = mode;
	p->cur.state = ST_NONE;
	p->pos = p->start;
	p->npool = p->nold = p->nout = p->nalloc = 0;
	p->pool = p->last = p->next = 0;
	memset(p->before, 0, sizeof(p->before));
	memset(p->after, 0, sizeof(p->after));
	p->changed = 0;

	err = first_touching(p->t, p->start, &i);
	for (uint32_t n = 0; !err && i; n++) {
		const struct rt_node *nd = node_at(p->t, i);

		if (!nd || n >= p->t->cap)
			return -EIO;
		if (nd->start > p->end)
			break;
		err = consume(p, i);
		i = p->next;
	}
	if (err)
		return err;
	tail.lo = p->pos;
	tail.hi = p->end;
	err = inside(p, tail);
	if (!err)
		err = flush(p);
	if (!err && mode != M_COUNT)
		err = drop_pool(p);
	return err;
}

static int apply(struct rt_tree *t, struct pass *p)
{
	struct rt_hdr *h = t->hdr;
	int err;

	p->t = t;
	if (!hdr_ok(t))
		return -EIO;
	if (p->start >= p->end) {
		memset(p->before, 0, sizeof(p->before));
		return 0;
	}
	err = run_pass(p, M_COUNT);
	if (err)
		return err;
	if (!p->changed)
		return 0;
	if (p->nalloc > rt_free_nodes(t))
		return -ENOMEM;
	err = run_pass(p, M_UNLINK);
	if (!err)
		err = run_pass(p, M_COMMIT);
	if (err)
		return err;
	h->nranges += p->nout - p->nold;
	h->vol_pages += p->after[RT_VOLATILE] - p->before[RT_VOLATILE];
	h->purged_pages += p->after[RT_PURGED] - p->before[RT_PURGED];
	return 0;
}

/* ------------------------------------------------------------------------ */
/* API                                                                       */

size_t rt_arena_bytes(uint32_t nranges)
{
	return ((size_t)nranges + 1 + RT_SPARE) * sizeof(struct rt_node);
}

static bool arena_usable(const void *arena, size_t arena_bytes)
{
	return arena && (uintptr_t)arena % _Alignof(struct rt_node) == 0 &&
	       cap_for(arena_bytes) > 0;
}

/* Where the page words of a paged arena of arena_bytes begin (0: they
 * do not fit). */
static size_t words_at(size_t arena_bytes, uint32_t npages)
{
	size_t area = pw_area_bytes(npages);

	if (arena_bytes % 64 || arena_bytes < area ||
	    arena_bytes - area < 2 * sizeof(struct rt_node))
		return 0;
	return arena_bytes - area;
}

size_t rt_arena_bytes_paged(uint32_t nranges, uint32_t npages)
{
	size_t nodes = (rt_arena_bytes(nranges) + 63) & ~(size_t)63;

	return nodes + pw_area_bytes(npages);
}

static int format(struct rt_tree *t, void *arena, size_t node_bytes,
		  uint32_t ver)
{
	struct rt_hdr *h = arena;

	if (!t || !arena_usable(arena, node_bytes))
		return -EINVAL;
	memset(h, 0, sizeof(struct rt_node));
	h->magic = RT_MAGIC;
	h->version = ver;
	h->cap = cap_for(node_bytes);
	h->bump = 1;
	t->hdr = h;
	t->nodes = arena;
	t->cap = h->cap;
	t->ver = ver;
	t->pw = (struct pw){ 0 };
	return 0;
}

int rt_format(struct rt_tree *t, void *arena, size_t arena_bytes)
{
	return format(t, arena, arena_bytes, RT_VERSION);
}

int rt_format_paged(struct rt_tree *t, void *arena, size_t arena_bytes,
		    uint32_t npages)
{
	size_t at = words_at(arena_bytes, npages);
	int err;

	if (!at || !npages)
		return -EINVAL;
	err = format(t, arena, at, RT_VERSION | RT_PAGED);
	if (!err)
		pw_format(&t->pw, (char *)arena + at, npages);
	return err;
}

/* The node bytes of an arena whose header shows version ver, and its page
 * count (*npages, 0 for a plain tree); 0 if the layout cannot be. */
static size_t node_bytes_of(const void *arena, size_t arena_bytes,
			    uint32_t ver, uint32_t *npages)
{
	*npages = 0;
	if (ver == RT_VERSION)
		return arena_bytes;
	if (ver != (RT_VERSION | RT_PAGED) || arena_bytes % 64 ||
	    arena_bytes < 2 * PW_HDR_BYTES)
		return 0;
	*npages = pw_peek_npages((const char *)arena + arena_bytes - PW_HDR_BYTES);
	return *npages ? words_at(arena_bytes, *npages) : 0;
}

int rt_attach(struct rt_tree *t, void *arena, size_t arena_bytes)
{
	struct rt_tree nt = { .hdr = arena, .nodes = arena };
	uint32_t npages;
	size_t nb;

	if (!t || !arena_usable(arena, arena_bytes))
		return -EIO;
	nt.ver = nt.hdr->version;
	nb = node_bytes_of(arena, arena_bytes, nt.ver, &npages);
	if (!nb || !arena_usable(arena, nb))
		return -EIO;
	nt.cap = cap_for(nb);
	if (nt.hdr->cap != nt.cap || !hdr_ok(&nt))
		return -EIO;
	if (npages && pw_attach(&nt.pw, (char *)arena + nb, npages) < 0)
		return -EIO;
	*t = nt;
	return 0;
}

int rt_peek_totals(const void *hdr, size_t arena_bytes, uint64_t *vol,
		   uint64_t *purged)
{
	struct rt_tree t = { .hdr = (struct rt_hdr *)(uintptr_t)hdr };

	_Static_assert(sizeof(struct rt_hdr) <= RT_HDR_COPY_BYTES, "header copy");
	if (!arena_usable(hdr, arena_bytes))
		return -EIO;
	t.ver = t.hdr->version;
	t.cap = cap_for(arena_bytes);
	/* A paged arena's nodes end where its words begin, which the header
	 * alone does not tell: their count can only be smaller. */
	if (t.ver == (RT_VERSION | RT_PAGED) ? t.hdr->cap > t.cap
					      : t.hdr->cap != t.cap)
		return -EIO;
	t.cap = t.hdr->cap;
	if (t.ver != RT_VERSION && t.ver != (RT_VERSION | RT_PAGED))
		return -EIO;
	if (!hdr_ok(&t))
		return -EIO;
	*vol = t.hdr->vol_pages;
	*purged = t.hdr->purged_pages;
	return 0;
}

int rt_grow(struct rt_tree *t, void *arena, size_t arena_bytes)
{
	uint32_t cap;

	/* A paged arena's words sit at its end: it never grows. */
	if (!t || t->pw.n || !arena_usable(arena, arena_bytes))
		return -EINVAL;
	cap = cap_for(arena_bytes);
	if (cap < t->cap)
		return -EINVAL;
	t->hdr = arena;
	t->nodes = arena;
	t->cap = cap;
	t->hdr->cap = cap;
	return 0;
}

static int slow_mark_volatile(struct rt_tree *t, uint64_t start, uint64_t end,
			      int32_t prio, uint64_t seq, uint32_t cost,
			      uint64_t *newly);
static int slow_clear(struct rt_tree *t, uint64_t start, uint64_t end,
		      uint64_t *vol, uint64_t *purged);

/*
 * The node this thread last created on the fast path.  Programs mostly
 * unmark what they just marked, so fast_clear() tries this slot before
 * searching.  It is only a guess, checked against the arena like any index:
 * in a sane tree the one live node holding exactly [start, end) is the range
 * to remove, whichever tree or process made it.  Initial-exec TLS: cheap, and
 * safe to read from the SIGBUS handler that unmarks.
 */
static __thread uint32_t last_made __attribute__((tls_model("initial-exec")));

/* What the fast paths need of the header beyond indices, which they check
 * where they read them (node_at(), fast_alloc()). */
static inline bool hdr_sane(const struct rt_tree *t)
{
	const struct rt_hdr *h = t->hdr;

	return h && h->magic == RT_MAGIC && h->version == t->ver;
}

/* A slot for a fresh node, its contents left for the caller to write in
 * full (no memset); 0 with -ENOMEM or -EIO in *err if there is none. */
static inline uint32_t fast_alloc(struct rt_tree *t, int *err)
{
	struct rt_hdr *h = t->hdr;
	uint32_t i = h->free_head;

	if (i) {
		if (i - 1u < t->cap && t->nodes[i].state == ST_NONE &&
		    h->nfree - 1u < t->cap) {
			h->free_head = t->nodes[i].link[ADDR].child[LEFT];
			h->nfree--;
			return i;
		}
	} else if (h->bump - 1u < t->cap) {
		return h->bump++;
	}
	/* A full arena, or a header that lies about it. */
	*err = rt_free_nodes(t) ? -EIO : -ENOMEM;
	return 0;
}

/*
 * Fast paths for the common pair: marking a range that touches nothing,
 * and clearing a range that is exactly one node (or touches none).  They
 * give the same result as the engine, in one walk instead of three passes;
 * everything else goes through apply().  1: done; 0: not this shape.
 * Each index is validated once, when read; the nodes are then used by
 * pointer.
 */
/* Would a fresh volatile range of (prio, seq) merge with neighbour n? */
static inline bool merges_with(const struct rt_node *n, int32_t prio,
			       uint64_t seq, uint32_t cost)
{
	return n->state == RT_VOLATILE && n->prio == prio && n->seq == seq &&
	       n->cost == cost;
}

static inline __attribute__((always_inline)) int
fast_insert(struct rt_tree *t, uint64_t start, uint64_t end, int32_t prio,
	    uint64_t seq, uint32_t cost)
{
	struct rt_hdr *h = t->hdr;
	struct rt_node *zn, *pn = NULL, *rn, *bn = NULL, *ln = NULL;
	uint32_t xa, p = 0, r, z;
	int dir = LEFT, err;

	if (start >= end || !hdr_sane(t))
		return 0;
	/*
	 * One descent of the address tree finds the last range ending at or
	 * before start (ln) and the first one ending after it (bn), and the
	 * leaf slot between them where the new range hangs: ranges are
	 * disjoint, so ordering by end is ordering by start.  A neighbour
	 * that merely touches [start, end) is fine here unless it would
	 * merge (same state and age: the engine's job) - that is the page
	 * cache's pattern, single pages of different ages side by side.
	 */
	xa = h->root[ADDR];
	for (int depth = 0; xa; depth++) {
		if (depth >= RT_MAX_DEPTH || !(pn = node_at(t, xa)))
			return -EIO;
		p = xa;
		/* A branch, not a select (the empty asm keeps the compiler
		 * from turning it into one): predicted, it lets the next
		 * level's load start before this node's end arrives. */
		if (pn->end <= start) {
			dir = RIGHT;
			ln = pn;
		} else {
			__asm__ volatile("");
			dir = LEFT;
			bn = pn;
		}
		xa = pn->link[ADDR].child[dir];
	}
	if (bn && (bn->start < end ||
		   (bn->start == end && merges_with(bn, prio, seq, cost))))
		return 0; /* overlaps, or would merge on the right */
	if (ln && ln->end == start && merges_with(ln, prio, seq, cost))
		return 0; /* would merge on the left */
	err = 0;
	z = fast_alloc(t, &err);
	if (!z)
		return err;
	zn = &t->nodes[z];
	*zn = (struct rt_node){ .start = start, .end = end, .seq = seq,
				.prio = prio, .cost = cost, .state = RT_VOLATILE };
	/* A new mark's order key (seqs only grow) is normally larger than
	 * that of the purge order's last node, which the header names: it
	 * hangs right of that node without a walk.  The name is only
	 * trusted as far as it is checked here (a live volatile node with
	 * no right child and a smaller key); anything else takes the walk,
	 * which also keeps the name right. */
	err = hang(t, ADDR, z, zn, p, pn, dir);
	if (!err) {
		r = h->ord_max;
		rn = node_at(t, r);
		if (!h->root[ORD] && !r) {
			err = hang(t, ORD, z, zn, 0, NULL, RIGHT);
			h->ord_max = z;
		} else if (rn && rn->state == RT_VOLATILE &&
			   !rn->link[ORD].child[RIGHT] &&
			   key_cmp(ORD, rn, zn) < 0) {
			err = hang(t, ORD, z, zn, r, rn, RIGHT);
			if (!err)
				h->ord_max = z;
		} else {
			err = insert_key(t, ORD, z);
		}
	}
	if (err)
		return err;
	h->nranges++;
	h->vol_pages += end - start;
	last_made = z;
	return 1;
}

static inline __attribute__((always_inline)) int
fast_clear(struct rt_tree *t, uint64_t start, uint64_t end, uint64_t *vol,
	   uint64_t *purged)
{
	struct rt_hdr *h = t->hdr;
	struct rt_node *n;
	uint64_t len = end - start;
	uint32_t i = last_made;
	int err;

	*vol = *purged = 0;
	if (start >= end || !hdr_sane(t))
		return 0;
	n = node_at(t, i);
	if (!n || n->start != start || n->end != end) {
		/* The first range overlapping start or beyond it; one that
		 * merely ends at start is no business of ours (start < end:
		 * start + 1 does not overflow). */
		err = first_touching(t, start + 1, &i);
		if (err)
			return err;
		if (!i)
			return 1; /* nothing there */
		n = node_at(t, i);
		if (!n)
			return -EIO;
		if (n->start >= end)
			return 1;
		if (n->start != start || n->end != end)
			return 0;
	}
	if (n->state == RT_VOLATILE) {
		err = erase_at(t, ORD, i, n);
		*vol = len;
		h->vol_pages -= len;
	} else {
		err = 0;
		*purged = len;
		h->purged_pages -= len;
	}
	if (!err)
		err = erase_at(t, ADDR, i, n);
	if (err)
		return err;
	free_node(t, i);
	h->nranges--;
	return 1;
}

static int tree_mark_volatile(struct rt_tree *t, uint64_t start, uint64_t end,
		     int32_t prio, uint64_t seq, uint32_t cost, uint64_t *newly)
{
	int err = fast_insert(t, start, end, prio, seq, cost);

	if (err == 1) {
		if (newly)
			*newly = end - start;
		return 0;
	}
	if (err < 0) {
		if (newly)
			*newly = 0;
		return err;
	}
	return slow_mark_volatile(t, start, end, prio, seq, cost, newly);
}

/* The engine's path, kept out of line so the fast path stays small. */
static __attribute__((noinline)) int
slow_mark_volatile(struct rt_tree *t, uint64_t start, uint64_t end,
		   int32_t prio, uint64_t seq, uint32_t cost, uint64_t *newly)
{
	struct pass p = { .kind = OP_VOLATILE, .start = start, .end = end,
			  .prio = prio, .seq = seq, .cost = cost };
	int err = apply(t, &p);

	if (newly)
		*newly = err ? 0 : p.before[ST_NONE];
	return err;
}

static int tree_clear(struct rt_tree *t, uint64_t start, uint64_t end, uint64_t *vol,
	     uint64_t *purged)
{
	uint64_t fv, fp;
	int err = fast_clear(t, start, end, &fv, &fp);

	if (err == 1) {
		if (vol)
			*vol = fv;
		if (purged)
			*purged = fp;
		return 0;
	}
	if (err < 0) {
		if (vol)
			*vol = 0;
		if (purged)
			*purged = 0;
		return err;
	}
	return slow_clear(t, start, end, vol, purged);
}

static __attribute__((noinline)) int
slow_clear(struct rt_tree *t, uint64_t start, uint64_t end, uint64_t *vol,
	   uint64_t *purged)
{
	struct pass p = { .kind = OP_CLEAR, .start = start, .end = end };
	int err = apply(t, &p);

	if (vol)
		*vol = err ? 0 : p.before[RT_VOLATILE];
	if (purged)
		*purged = err ? 0 : p.before[RT_PURGED];
	return err;
}

static int tree_mark_purged(struct rt_tree *t, uint64_t start, uint64_t end,
		   uint64_t *count)
{
	struct pass p = { .kind = OP_PURGE, .start = start, .end = end };
	int err = apply(t, &p);

	if (count)
		*count = err ? 0 : p.before[RT_VOLATILE];
	return err;
}

static int tree_unpurge(struct rt_tree *t, uint64_t start, uint64_t end, int32_t prio,
	       uint64_t seq, uint32_t cost, uint64_t *count)
{
	struct pass p = { .kind = OP_UNPURGE, .start = start, .end = end,
			  .prio = prio, .seq = seq, .cost = cost };
	int err = apply(t, &p);

	if (count)
		*count = err ? 0 : p.before[RT_PURGED];
	return err;
}

static void to_range(const struct rt_node *n, struct rt_range *r)
{
	r->words = false;
	r->start = n->start;
	r->end = n->end;
	r->seq = n->seq;
	r->prio = n->prio;
	r->cost = n->cost;
	r->key = pw_key(n->seq, n->cost, pw_cost_unit());
	r->state = (enum rt_state)n->state;
}

static int tree_visit(const struct rt_tree *t, uint64_t start, uint64_t end,
	     rt_visit_fn fn, void *arg)
{
	uint64_t prev_end = 0;
	uint32_t i;
	int err;

	if (!hdr_ok(t))
		return -EIO;
	if (start >= end)
		return 0;
	err = first_touching(t, start + 1, &i); /* overlap, not touch */
	for (uint32_t n = 0; !err && i; n++) {
		const struct rt_node *nd = node_at(t, i);
		struct rt_range r;

		if (!nd || n >= t->cap || nd->start >= nd->end ||
		    (n && nd->start < prev_end))
			return -EIO;
		if (nd->start >= end)
			break;
		prev_end = nd->end;
		to_range(nd, &r);
		if (r.start < start)
			r.start = start;
		if (r.end > end)
			r.end = end;
		err = fn(&r, arg);
		if (!err)
			err = step(t, ADDR, i, RIGHT, &i);
	}
	return err;
}

static int tree_oldest_before(const struct rt_tree *t, uint64_t max_seq,
			      struct rt_range *out);

static int tree_oldest(const struct rt_tree *t, struct rt_range *out)
{
	return tree_oldest_before(t, UINT64_MAX, out);
}

/* ------------------------------------------------------------------------ */
/* The union of ranges and page words (page_words.h)                         */

static void add_delta(struct rt_tree *t, const struct pw_delta *d)
{
	t->hdr->vol_pages += (uint64_t)d->vol;
	t->hdr->purged_pages += (uint64_t)d->purged;
}

/* Does a range of the tree overlap [s, e)?  An empty tree: no descent. */
static inline int tree_overlaps(const struct rt_tree *t, uint64_t s, uint64_t e)
{
	const struct rt_node *n;
	uint32_t i;
	int err;

	if (!t->hdr->root[ADDR])
		return 0;
	err = first_touching(t, s + 1, &i);
	if (err || !i)
		return err;
	n = node_at(t, i);
	if (!n)
		return -EIO;
	return n->start < e;
}

/*
 * Move the words of [s, e) into the tree, each run with its own state and
 * age, before a tree operation covers them (a page is never in both).
 * Each run moves whole: on failure the state is as before that run.
 */
static int absorb(struct rt_tree *t, uint64_t s, uint64_t e)
{
	struct pw_run run;
	int r;

	while ((r = pw_next_run(&t->pw, s, e, &run)) == 1) {
		struct pw_delta d = { 0 };

		/* Inserting a run, then purging it, splits at most twice. */
		if (rt_free_nodes(t) < 2 * RT_SPARE + 2)
			return -ENOMEM;
		r = tree_mark_volatile(t, run.start, run.end, run.prio,
				       run.seq, run.cost ? run.cost : 1, NULL);
		if (!r && run.state == RT_PURGED)
			r = tree_mark_purged(t, run.start, run.end, NULL);
		if (!r)
			r = pw_clear(&t->pw, run.start, run.end, &d);
		if (r) {
			tree_clear(t, run.start, run.end, NULL, NULL);
			return r;
		}
		add_delta(t, &d);
		s = run.end;
	}
	return r;
}

int rt_mark_volatile_cost(struct rt_tree *t, uint64_t start, uint64_t end,
			  int32_t prio, uint64_t seq, uint32_t cost,
			  uint64_t *newly)
{
	struct pw_delta d = { 0 };
	int r;

	if (!cost)
		cost = 1;
	/* A small mark on pages no range covers: into their words. */
	if (t->pw.n && start < end && end - start <= PW_MAX_MARK &&
	    end <= t->pw.n && cost <= PW_COST_MAX) {
		if (!hdr_sane(t))
			r = -EIO;
		else if ((r = tree_overlaps(t, start, end)) == 0) {
			r = pw_mark(&t->pw, start, end, prio, seq, cost, &d);
			add_delta(t, &d);
			if (newly)
				*newly = r ? 0 : d.was_none;
			return r;
		}
		if (r < 0)
			goto fail;
	}
	/* A range may cover words from here on: lock-free changes off
	 * before any word is read (page_words.h). */
	if (t->pw.n)
		pw_fast_off(&t->pw);
	if (pw_any(&t->pw) && (r = absorb(t, start, end)) < 0)
		goto fail;
	return tree_mark_volatile(t, start, end, prio, seq, cost, newly);
fail:
	if (newly)
		*newly = 0;
	return r;
}

/* Pointwise operations: the tree first (it may refuse with -ENOMEM, and
 * must then leave everything as it was), then the words, which cannot. */
int rt_clear(struct rt_tree *t, uint64_t start, uint64_t end, uint64_t *vol,
	     uint64_t *purged)
{
	struct pw_delta d = { 0 };
	uint64_t tv = 0, tp = 0;
	int r = tree_clear(t, start, end, &tv, &tp);

	if (!r && pw_any(&t->pw)) {
		r = pw_clear(&t->pw, start, end, &d);
		add_delta(t, &d);
	}
	if (!r && t->pw.n && !t->hdr->root[ADDR])
		pw_fast_on(&t->pw); /* no range left */
	if (vol)
		*vol = r ? 0 : tv + d.was_vol;
	if (purged)
		*purged = r ? 0 : tp + d.was_purged;
	return r;
}

int rt_mark_purged(struct rt_tree *t, uint64_t start, uint64_t end,
		   uint64_t *count)
{
	struct pw_delta d = { 0 };
	uint64_t n = 0;
	int r = tree_mark_purged(t, start, end, &n);

	if (!r && t->pw.n && pw_vol(&t->pw)) {
		r = pw_purge(&t->pw, start, end, &d);
		add_delta(t, &d);
	}
	if (count)
		*count = r ? 0 : n + d.was_vol;
	return r;
}

int rt_unpurge_cost(struct rt_tree *t, uint64_t start, uint64_t end,
		    int32_t prio, uint64_t seq, uint32_t cost, uint64_t *count)
{
	struct pw_delta d = { 0 };
	uint64_t n = 0;
	int r;

	if (!cost)
		cost = 1;
	r = tree_unpurge(t, start, end, prio, seq, cost, &n);
	if (!r && t->pw.n && t->pw.h->npurged) {
		r = pw_unpurge(&t->pw, start, end, prio, seq, cost, &d);
		add_delta(t, &d);
	}
	if (count)
		*count = r ? 0 : n + d.was_purged;
	return r;
}

struct merge {
	const struct rt_tree *t;
	uint64_t pos, end; /* words below pos are reported */
	rt_visit_fn fn;
	void *arg;
};

/* Report the word runs of [m->pos, upto). */
static int words_until(struct merge *m, uint64_t upto)
{
	struct pw_run run;
	int r;

	while ((r = pw_next_run(&m->t->pw, m->pos, upto, &run)) == 1) {
		struct rt_range rr = { .start = run.start, .end = run.end,
				       .seq = run.seq, .prio = run.prio,
				       .cost = run.cost,
				       .state = (enum rt_state)run.state };

		m->pos = run.end;
		r = m->fn(&rr, m->arg);
		if (r)
			return r;
	}
	return r;
}

/* Is range a before run b in the purge order? */
static bool key_before(const struct rt_range *a, const struct pw_run *b)
{
	if (a->prio != b->prio)
		return a->prio < b->prio;
	if (a->key != b->key)
		return a->key < b->key;
	if (a->seq != b->seq)
		return a->seq < b->seq;
	return a->start < b->start;
}

static int merge_one(const struct rt_range *r, void *arg)
{
	struct merge *m = arg;
	int err = words_until(m, r->start);

	if (err)
		return err;
	m->pos = r->end;
	return m->fn(r, m->arg);
}

int rt_visit(const struct rt_tree *t, uint64_t start, uint64_t end,
	     rt_visit_fn fn, void *arg)
{
	struct merge m = { t, start, end, fn, arg };
	int err;

	if (!pw_any(&t->pw))
		return tree_visit(t, start, end, fn, arg);
	if (!hdr_ok(t))
		return -EIO;
	err = tree_visit(t, start, end, merge_one, &m);
	return err ? err : words_until(&m, end);
}

/*
 * The first in purge order of the tree's answer (a: 1 found, 0 none, or
 * -errno, in tr) and the page words' (b, in run): what rt_oldest and
 * rt_oldest_before return.
 */
static int first_of(int a, const struct rt_range *tr, int b,
		    const struct pw_run *run, struct rt_range *out)
{
	if (b < 0)
		return b;
	if (b == 1 && !(a == 1 && key_before(tr, run))) {
		*out = (struct rt_range){ .start = run->start, .end = run->end,
					  .seq = run->seq, .prio = run->prio,
					  .cost = run->cost, .key = run->key,
					  .state = RT_VOLATILE, .words = true };
		return 1;
	}
	if (a == 1)
		*out = *tr;
	return a;
}

int rt_oldest(struct rt_tree *t, struct rt_range *out)
{
	struct rt_range tr;
	struct pw_run run = { 0 };
	int a = tree_oldest(t, &tr), b = 0;

	if (a >= 0 && t->pw.n)
		b = pw_oldest(&t->pw, &run);
	return first_of(a, &tr, b, &run, out);
}

struct counts {
	uint64_t vol, purged;
};

static int count_one(const struct rt_range *r, void *arg)
{
	struct counts *c = arg;
	uint64_t len = r->end - r->start;

	if (r->state == RT_VOLATILE)
		c->vol += len;
	else
		c->purged += len;
	return 0;
}

int rt_count(const struct rt_tree *t, uint64_t start, uint64_t end,
	     uint64_t *vol, uint64_t *purged)
{
	struct counts c = { 0, 0 };
	int err = rt_visit(t, start, end, count_one, &c);

	if (err)
		c.vol = c.purged = 0;
	if (vol)
		*vol = c.vol;
	if (purged)
		*purged = c.purged;
	return err;
}

/* The first range in purge order at (prio, cost class cls) or after it
 * (classes descend within a priority): 1 (*out its index), 0 if none,
 * -EIO. */
static int first_at(const struct rt_tree *t, int64_t prio, int64_t cls,
		    uint32_t *out)
{
	uint32_t x = t->hdr->root[ORD], found = 0;

	for (int depth = 0; x; depth++) {
		const struct rt_node *n = node_at(t, x);

		if (!n || depth >= RT_MAX_DEPTH)
			return -EIO;
		if (n->prio > prio ||
		    (n->prio == prio && (int64_t)pw_cost_cls(n->cost) <= cls)) {
			found = x;
			x = n->link[ORD].child[LEFT];
		} else {
			x = n->link[ORD].child[RIGHT];
		}
	}
	*out = found;
	return found != 0;
}

/*
 * Within one priority and cost class the first range is the least
 * recently marked and has the smallest key: if it was marked after
 * max_seq, all of that class were, so the search skips to the next
 * class.  The lowest priority with a range marked before max_seq gives
 * the answer: the smallest key among its classes' first such ranges.
 * One descent per class (at most 64 per priority).
 */
static int tree_oldest_before(const struct rt_tree *t, uint64_t max_seq,
			      struct rt_range *out)
{
	int64_t prio = INT32_MIN, cls = 64;
	const struct rt_node *best = NULL;
	uint64_t bkey = 0, unit = pw_cost_unit();
	uint32_t i;
	int r;

	if (!hdr_ok(t))
		return -EIO;
	for (uint32_t tries = 0; tries <= t->cap + 64; tries++) {
		const struct rt_node *n;

		r = first_at(t, prio, cls, &i);
		if (r < 0)
			return r;
		n = r ? &t->nodes[i] : NULL;
		if (best && (!n || n->prio != best->prio))
			break; /* the best one's priority is done */
		if (!n)
			return 0;
		if (n->state != RT_VOLATILE)
			return -EIO;
		if (n->seq <= max_seq) {
			uint64_t k = pw_key(n->seq, n->cost, unit);

			if (!best || k < bkey ||
			    (k == bkey && (n->seq < best->seq ||
					   (n->seq == best->seq && n->start < best->start)))) {
				best = n;
				bkey = k;
			}
		}
		prio = n->prio;
		cls = (int64_t)pw_cost_cls(n->cost) - 1;
		if (cls < 0) {
			prio++;
			cls = 64;
		}
	}
	if (!best)
		return -EIO;
	to_range(best, out);
	return 1;
}

/* The same over ranges and page words: the older of the two answers. */
int rt_oldest_before(struct rt_tree *t, uint64_t max_seq, struct rt_range *out)
{
	struct rt_range tr;
	struct pw_run run = { 0 };
	int a = tree_oldest_before(t, max_seq, &tr), b = 0;

	if (a >= 0 && t->pw.n)
		b = pw_oldest_before(&t->pw, max_seq, &run);
	return first_of(a, &tr, b, &run, out);
}

uint64_t rt_volatile_pages(const struct rt_tree *t)
{
	return pw_plus(t->hdr->vol_pages, t->pw.n ? pw_peek_fast_vol(t->pw.h) : 0);
}

int rt_purge_exact(struct rt_tree *t, const struct rt_range *r, uint64_t *stop)
{
	struct pw_delta d = { 0 };
	int err;

	if (!r->words) {
		*stop = r->end;
		return rt_mark_purged(t, r->start, r->end, NULL);
	}
	err = pw_purge_exact(&t->pw, r->start, r->end, stop, &d);
	add_delta(t, &d);
	return err;
}

void rt_recount_words(struct rt_tree *t)
{
	int64_t dvol, dpurged;

	if (!t->pw.n || !hdr_sane(t) || pw_recount(&t->pw, &dvol, &dpurged) < 0)
		return;
	t->hdr->vol_pages += (uint64_t)dvol;
	t->hdr->purged_pages += (uint64_t)dpurged;
}

void rt_fast_off(struct rt_tree *t)
{
	if (t->pw.n)
		pw_fast_off(&t->pw);
}

uint64_t rt_purged_pages(const struct rt_tree *t)
{
	return t->hdr->purged_pages;
}

uint32_t rt_nranges(const struct rt_tree *t)
{
	return t->hdr->nranges;
}

uint32_t rt_free_nodes(const struct rt_tree *t)
{
	const struct rt_hdr *h = t->hdr;
	uint64_t n = 0;

	if (h->bump >= 1 && h->bump <= t->cap + 1ull)
		n = t->cap + 1ull - h->bump;
	if (h->nfree <= t->cap)
		n += h->nfree;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* ------------------------------------------------------------------------ */
/* Invariant check                                                           */

struct chk {
	const struct rt_tree *t;
	int w;
	uint32_t count, prev;
	uint32_t nvol;
	uint64_t vol, purged;
};

static int chk_visit(struct chk *c, uint32_t x)
{
	const struct rt_node *n = &c->t->nodes[x];
	const struct rt_node *pv = c->prev ? &c->t->nodes[c->prev] : NULL;

	c->prev = x;
	if (c->w == ORD) {
		if (n->state != RT_VOLATILE)
			return -EIO;
		return pv && key_cmp(ORD, pv, n) >= 0 ? -EIO : 0;
	}
	if (n->start >= n->end)
		return -EIO;
	if (pv) {
		struct seg a = { .state = pv->state, .prio = pv->prio,
				 .seq = pv->seq, .cost = pv->cost };
		struct seg b = { .state = n->state, .prio = n->prio,
				 .seq = n->seq, .cost = n->cost };

		if (pv->end > n->start ||
		    (pv->end == n->start && same_age(&a, &b)))
			return -EIO;
	}
	if (n->state == RT_VOLATILE) {
		c->nvol++;
		c->vol += n->end - n->start;
	} else {
		c->purged += n->end - n->start;
	}
	return 0;
}

/* Black height of the subtree at x, or -EIO; visits it in order. */
static int chk_sub(struct chk *c, uint32_t x, uint32_t parent, int depth)
{
	const struct rt_node *n;
	uint32_t l, r;
	int lh, rh, err;

	if (!x)
		return 1;
	n = node_at(c->t, x);
	if (!n || depth >= RT_MAX_DEPTH || n->link[c->w].parent != parent ||
	    ++c->count > c->t->cap)
		return -EIO;
	l = n->link[c->w].child[LEFT];
	r = n->link[c->w].child[RIGHT];
	if (l && l == r)
		return -EIO;
	if (n->color[c->w] != BLACK && n->color[c->w] != RED)
		return -EIO;
	if (n->color[c->w] == RED && (color_of(c->t, c->w, l) != BLACK ||
				      color_of(c->t, c->w, r) != BLACK))
		return -EIO;
	lh = chk_sub(c, l, x, depth + 1);
	if (lh < 0)
		return lh;
	err = chk_visit(c, x);
	if (err)
		return err;
	rh = chk_sub(c, r, x, depth + 1);
	if (rh < 0)
		return rh;
	if (lh != rh)
		return -EIO;
	return lh + (n->color[c->w] == BLACK);
}

static int chk_tree(struct chk *c, const struct rt_tree *t, int w)
{
	uint32_t root = t->hdr->root[w];
	int h;

	*c = (struct chk){ .t = t, .w = w };
	if (root && color_of(c->t, w, root) != BLACK)
		return -EIO;
	h = chk_sub(c, root, 0, 0);
	return h < 0 ? h : 0;
}

/* Every slot below bump is a range or on the free list, and the free list
 * holds exactly the free slots. */
static int chk_slots(const struct rt_tree *t, uint32_t nranges, uint32_t nvol)
{
	const struct rt_hdr *h = t->hdr;
	uint32_t nfree = 0, i = h->free_head, n;
	uint32_t cnt[3] = { 0, 0, 0 };

	for (uint32_t s = 1; s < h->bump; s++) {
		uint8_t st = t->nodes[s].state;

		if (st > RT_PURGED)
			return -EIO;
		cnt[st]++;
	}
	nfree = cnt[ST_NONE];
	if (cnt[RT_VOLATILE] != nvol ||
	    cnt[RT_VOLATILE] + cnt[RT_PURGED] != nranges || nfree != h->nfree)
		return -EIO;
	for (n = 0; i; n++) {
		if (n >= nfree || i >= h->bump || t->nodes[i].state != ST_NONE)
			return -EIO;
		i = t->nodes[i].link[ADDR].child[LEFT];
	}
	return n == nfree ? 0 : -EIO;
}

static int words_outside(const struct rt_range *r, void *arg)
{
	struct pw_run run;
	int err = pw_next_run(arg, r->start, r->end, &run);

	return err ? -EIO : 0;
}

int rt_check(const struct rt_tree *t)
{
	const struct rt_hdr *h = t->hdr;
	struct chk c;
	uint32_t nranges, nvol;
	uint64_t wvol = 0, wpurged = 0;
	int err;

	if (!hdr_ok(t) || h->cap < t->cap)
		return -EIO;
	err = chk_tree(&c, t, ADDR);
	if (err)
		return err;
	nranges = c.count;
	nvol = c.nvol;
	if (t->pw.n) {
		err = pw_check(&t->pw);
		if (err)
			return err;
		wvol = t->pw.h->nvol;
		wpurged = t->pw.h->npurged;
	}
	if (nranges != h->nranges || c.vol + wvol != h->vol_pages ||
	    c.purged + wpurged != h->purged_pages)
		return -EIO;
	/* A page is in a range or in its word, never both. */
	if (pw_any(&t->pw)) {
		err = tree_visit(t, 0, t->pw.n, words_outside,
				 (void *)(uintptr_t)&t->pw);
		if (err)
			return -EIO;
	}
	err = chk_tree(&c, t, ORD);
	if (err)
		return err;
	/* c.prev: the last node visited in order, 0 if none. */
	if (c.count != nvol || h->ord_max != c.prev)
		return -EIO;
	return chk_slots(t, nranges, nvol);
}
