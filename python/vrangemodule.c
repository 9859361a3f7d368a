/* SPDX-License-Identifier: MIT */
/*
 * vrangemodule.c - `import vrange`: libvrange for Python (docs/python.md).
 *
 * This file only translates: Python arguments in, the library's call, its
 * result or -errno out as a Python value or exception.  What the calls do
 * is the library's (include/vrange.h, the manual).
 *
 * Threads.  Every call runs with the GIL held, except the purges, which may
 * take long and release it.  Holding the GIL is what keeps a call on an
 * object from racing that object's close().  A region purge that has let
 * the GIL go holds the region's `lock` instead; close() takes the same
 * lock, so a region is never destroyed under a purge (the purge that finds
 * it closed when it gets the lock raises ValueError).  A cache has no call
 * that drops the GIL.  The library is thread-safe by itself: a module-wide
 * purge may run while other threads mark, read, put and close.
 *
 * Memory handed out.  A buffer exported from a Region points into the
 * region's mapping: close() refuses (BufferError) while one is exported,
 * and each exported buffer keeps the object alive.  A value got from a
 * Cache is held in the library (never purged, never moved) for as long as
 * a buffer of it is exported; see HeldValue below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <vrange.h>

#define MAX_KEY 4096 /* the library's key length limit (contract §7) */

/* A -errno result as OSError (or its subclass for that errno). */
static PyObject *raise_errno(long err)
{
	errno = (int)-err;
	return PyErr_SetFromErrno(PyExc_OSError);
}

/* "O&" converter: an int >= 0.  TypeError if not an int, ValueError if
 * negative or too large. */
static int conv_size(PyObject *o, void *out)
{
	Py_ssize_t v = PyNumber_AsSsize_t(o, PyExc_ValueError);

	if (v == -1 && PyErr_Occurred())
		return 0;
	if (v < 0) {
		PyErr_SetString(PyExc_ValueError, "must not be negative");
		return 0;
	}
	*(Py_ssize_t *)out = v;
	return 1;
}

/* The same, or None (stored as -1). */
static int conv_size_or_none(PyObject *o, void *out)
{
	if (o == Py_None) {
		*(Py_ssize_t *)out = -1;
		return 1;
	}
	return conv_size(o, out);
}

/* "O&" converter: a re-creation cost, None or 1 .. 2**32 - 1 (None stored as
 * 0: the default of the call).  TypeError if not an int, ValueError if 0,
 * negative or too large. */
static int conv_cost(PyObject *o, void *out)
{
	unsigned long long v;

	if (o == Py_None) {
		*(uint32_t *)out = 0;
		return 1;
	}
	if (!PyLong_Check(o) && !PyIndex_Check(o)) {
		PyErr_Format(PyExc_TypeError, "cost must be an int or None, not %.100s",
			     Py_TYPE(o)->tp_name);
		return 0;
	}
	o = PyNumber_Index(o);
	if (!o)
		return 0;
	v = PyLong_AsUnsignedLongLong(o);
	Py_DECREF(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear(); /* negative (OverflowError) or too large */
		v = 0;
	}
	if (v == 0 || v > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError,
				"cost must be between 1 and 4294967295 (or None)");
		return 0;
	}
	*(uint32_t *)out = (uint32_t)v;
	return 1;
}

/* ------------------------------------------------------------------------ */
/* Counters: one row per field of the library's structs, so that a field
 * appended to them is one more row here. */

struct field {
	const char *name;
	size_t off;
	size_t strsize; /* 0: uint64_t; else the size of a char array */
};
#define U64(s, f) { #f, offsetof(struct s, f), 0 }
#define STR(s, f) { #f, offsetof(struct s, f), sizeof(((struct s *)0)->f) }

static const struct field stats_fields[] = {
	U64(vrange_stats, regions),
	U64(vrange_stats, files),
	U64(vrange_stats, volatile_bytes),
	U64(vrange_stats, purged_bytes),
	U64(vrange_stats, purges),
	U64(vrange_stats, purged_total),
	U64(vrange_stats, pressure_events),
	U64(vrange_stats, refills),
	STR(vrange_stats, pressure_source),
	STR(vrange_stats, access_fallback),
	U64(vrange_stats, sigbus_fallbacks),
	STR(vrange_stats, sigbus_fallback),
	U64(vrange_stats, disk_volatile_bytes),
	U64(vrange_stats, disk_purged_bytes),
	U64(vrange_stats, disk_purges),
	U64(vrange_stats, disk_freed_total),
	U64(vrange_stats, disk_unpunchable),
	STR(vrange_stats, disk_unpunchable_why),
	U64(vrange_stats, purged_cost),
	{ NULL, 0, 0 }
};

static const struct field cache_stats_fields[] = {
	U64(vrange_cache_stats, entries),
	U64(vrange_cache_stats, value_bytes),
	U64(vrange_cache_stats, resident_bytes),
	U64(vrange_cache_stats, hits),
	U64(vrange_cache_stats, misses),
	U64(vrange_cache_stats, purged_entries),
	U64(vrange_cache_stats, evictions),
	{ NULL, 0, 0 }
};

static PyObject *fields_to_dict(const void *st, const struct field *fields)
{
	PyObject *d = PyDict_New();

	for (const struct field *f = fields; d && f->name; f++) {
		const char *p = (const char *)st + f->off;
		PyObject *v;
		uint64_t n;

		if (f->strsize) {
			v = PyUnicode_DecodeUTF8(p, strnlen(p, f->strsize), "replace");
		} else {
			memcpy(&n, p, sizeof(n));
			v = PyLong_FromUnsignedLongLong(n);
		}
		if (!v || PyDict_SetItemString(d, f->name, v) < 0)
			Py_CLEAR(d);
		Py_XDECREF(v);
	}
	return d;
}

/* ------------------------------------------------------------------------ */
/* vrange.Region */

typedef struct {
	PyObject_HEAD
	vrange_region *r;        /* NULL once closed */
	Py_ssize_t exports;      /* buffers handed out, not yet released */
	PyThread_type_lock lock; /* held by a purge without the GIL, and by close() */
} Region;

static PyTypeObject RegionType;

static vrange_region *region_open(Region *self)
{
	if (!self->r)
		PyErr_SetString(PyExc_ValueError, "operation on a closed vrange.Region");
	return self->r;
}

/* Take the region's lock, letting the GIL go while waiting for it. */
static void region_lock(Region *self)
{
	if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
		Py_BEGIN_ALLOW_THREADS
		PyThread_acquire_lock(self->lock, WAIT_LOCK);
		Py_END_ALLOW_THREADS
	}
}

/* offset=0, length=None (to the end) -> [*off, *off + *len), inside the
 * region (ValueError if not). */
static int region_check_span(Region *self, Py_ssize_t o, Py_ssize_t l,
			     size_t *off, size_t *len)
{
	size_t size = vrange_region_size(self->r);

	if ((size_t)o > size || (l >= 0 && (size_t)l > size - (size_t)o)) {
		PyErr_Format(PyExc_ValueError,
			     "range runs past the end of the region (%zu bytes)", size);
		return -1;
	}
	*off = (size_t)o;
	*len = l < 0 ? size - (size_t)o : (size_t)l;
	return 0;
}

static int region_span(Region *self, PyObject *args, PyObject *kw,
		       const char *fmt, size_t *off, size_t *len)
{
	static char *kwlist[] = { "offset", "length", NULL };
	Py_ssize_t o = 0, l = -1;

	if (!region_open(self) ||
	    !PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, conv_size, &o,
					 conv_size_or_none, &l))
		return -1;
	return region_check_span(self, o, l, off, len);
}

static PyObject *Region_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "size", "name", "access", NULL };
	const char *name = NULL, *access = "zero";
	unsigned int flags;
	Py_ssize_t size;
	Region *self;
	int err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|zs:Region", kwlist,
					 conv_size, &size, &name, &access))
		return NULL;
	if (!strcmp(access, "zero")) {
		flags = VRANGE_ACCESS_ZERO;
	} else if (!strcmp(access, "sigbus")) {
		flags = VRANGE_ACCESS_SIGBUS;
	} else {
		PyErr_Format(PyExc_ValueError,
			     "access must be \"zero\" or \"sigbus\", not \"%s\"", access);
		return NULL;
	}
	if (size == 0) {
		PyErr_SetString(PyExc_ValueError, "size must be at least 1");
		return NULL;
	}
	self = (Region *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	self->lock = PyThread_allocate_lock();
	if (!self->lock) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	err = vrange_region_create(name, (size_t)size, flags, &self->r);
	if (err < 0) {
		Py_DECREF(self);
		return raise_errno(err);
	}
	return (PyObject *)self;
}

static void Region_dealloc(Region *self)
{
	/* Nothing exported (each buffer holds a reference), no purge running
	 * (it holds one too): nothing else can be using the region. */
	vrange_region_destroy(self->r);
	if (self->lock)
		PyThread_free_lock(self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(Region_mark_volatile_doc,
"mark_volatile(offset=0, length=None, cost=None)\n--\n\n"
"Mark the whole pages inside [offset, offset + length) volatile: the library\n"
"may discard them when memory runs short.  length None means to the end.\n"
"A page only partly inside the range is left as it is.\n\n"
"cost: the relative cost of re-creating one page of the range (1 to\n"
"2**32 - 1; 1 is the default of every mark); None means the region's cost\n"
"(set_cost(), 1 unless set).  Within a priority a dearer range outlives\n"
"cheaper ones marked at the same time, but not forever.  0 is ValueError.");

static PyObject *Region_mark_volatile(Region *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "offset", "length", "cost", NULL };
	Py_ssize_t o = 0, l = -1;
	uint32_t cost = 0;
	size_t off, len;
	int err;

	if (!region_open(self) ||
	    !PyArg_ParseTupleAndKeywords(args, kw, "|O&O&O&:mark_volatile", kwlist,
					 conv_size, &o, conv_size_or_none, &l,
					 conv_cost, &cost) ||
	    region_check_span(self, o, l, &off, &len) < 0)
		return NULL;
	err = cost ? vrange_mark_volatile_cost(self->r, off, len, cost)
		   : vrange_mark_volatile(self->r, off, len);
	if (err < 0)
		return raise_errno(err);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Region_set_cost_doc,
"set_cost(cost)\n--\n\n"
"The relative cost of re-creating one page, for the region's later marks\n"
"that give none (mark_volatile() with cost None, pinned()): 1 to\n"
"2**32 - 1, 1 unless set.  Ranges already volatile keep theirs until marked\n"
"again.  0 (or None) is ValueError.");

static PyObject *Region_set_cost(Region *self, PyObject *arg)
{
	uint32_t cost;
	int err;

	if (!region_open(self) || !conv_cost(arg, &cost))
		return NULL;
	if (!cost) {
		PyErr_SetString(PyExc_ValueError, "cost must be between 1 and 4294967295");
		return NULL;
	}
	err = vrange_region_set_cost(self->r, cost);
	if (err < 0)
		return raise_errno(err);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Region_mark_nonvolatile_doc,
"mark_nonvolatile(offset=0, length=None) -> int\n--\n\n"
"Make every page touching [offset, offset + length) non-volatile again.\n"
"Returns vrange.INTACT if nothing was discarded meanwhile, vrange.PURGED if\n"
"some page was (its bytes now read as zeros).");

static PyObject *Region_mark_nonvolatile(Region *self, PyObject *args, PyObject *kw)
{
	size_t off, len;
	int err;

	if (region_span(self, args, kw, "|O&O&:mark_nonvolatile", &off, &len) < 0)
		return NULL;
	err = vrange_mark_nonvolatile(self->r, off, len);
	if (err < 0)
		return raise_errno(err);
	return PyLong_FromLong(err);
}

PyDoc_STRVAR(Region_is_volatile_doc,
"is_volatile(offset=0, length=None) -> bool\n--\n\n"
"True if any page touching [offset, offset + length) is volatile.");

static PyObject *Region_is_volatile(Region *self, PyObject *args, PyObject *kw)
{
	size_t off, len;
	int err;

	if (region_span(self, args, kw, "|O&O&:is_volatile", &off, &len) < 0)
		return NULL;
	err = vrange_is_volatile(self->r, off, len);
	if (err < 0)
		return raise_errno(err);
	return PyBool_FromLong(err);
}

PyDoc_STRVAR(Region_purge_doc,
"purge() -> int\n--\n\n"
"Discard every volatile page of the region now; returns the bytes freed.\n"
"Runs without the GIL.");

static PyObject *Region_purge(Region *self, PyObject *unused)
{
	ssize_t n = 0;
	int closed = 0;

	if (!region_open(self))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	PyThread_acquire_lock(self->lock, WAIT_LOCK);
	/* close() may have run between the check above and the lock */
	if (self->r)
		n = vrange_region_purge(self->r);
	else
		closed = 1;
	PyThread_release_lock(self->lock);
	Py_END_ALLOW_THREADS
	if (closed) {
		region_open(self); /* raises ValueError */
		return NULL;
	}
	if (n < 0)
		return raise_errno(n);
	return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(Region_close_doc,
"close()\n--\n\n"
"Unmap the region and close its memfd.  BufferError while a buffer of it\n"
"(a memoryview, a numpy array) is still alive.  Closing twice is allowed.");

static PyObject *Region_close(Region *self, PyObject *unused)
{
	if (!self->r)
		Py_RETURN_NONE;
	if (self->exports) /* fail fast, before waiting for a purge */
		goto busy;
	region_lock(self);
	/* re-checked: other threads ran while we waited for the lock */
	if (self->exports == 0) {
		vrange_region_destroy(self->r);
		self->r = NULL;
	}
	PyThread_release_lock(self->lock);
	if (!self->r)
		Py_RETURN_NONE;
busy:
	PyErr_Format(PyExc_BufferError,
		     "cannot close a vrange.Region with %zd exported buffer(s)",
		     self->exports);
	return NULL;
}

static PyObject *Region_enter(Region *self, PyObject *unused)
{
	if (!region_open(self))
		return NULL;
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *Region_exit(Region *self, PyObject *args)
{
	PyObject *r = Region_close(self, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

/* pinned(): a context manager over mark_nonvolatile / mark_volatile */

typedef struct {
	PyObject_HEAD
	Region *region;
	size_t off, len;
} Pinned;

static PyTypeObject PinnedType;

PyDoc_STRVAR(Region_pinned_doc,
"pinned(offset=0, length=None)\n--\n\n"
"A context manager: the range is non-volatile inside the with block and\n"
"volatile again after it.  It yields True if the range was intact on\n"
"entry, False if some page had been purged (and now reads zeros):\n\n"
"    with r.pinned() as intact:\n"
"        if not intact:\n"
"            rebuild(r)\n");

static PyObject *Region_pinned(Region *self, PyObject *args, PyObject *kw)
{
	Pinned *p;
	size_t off, len;

	if (region_span(self, args, kw, "|O&O&:pinned", &off, &len) < 0)
		return NULL;
	p = PyObject_New(Pinned, &PinnedType);
	if (!p)
		return NULL;
	Py_INCREF(self);
	p->region = self;
	p->off = off;
	p->len = len;
	return (PyObject *)p;
}

static void Pinned_dealloc(Pinned *p)
{
	Py_DECREF(p->region);
	PyObject_Free(p);
}

static PyObject *Pinned_enter(Pinned *p, PyObject *unused)
{
	int err;

	if (!region_open(p->region))
		return NULL;
	err = vrange_mark_nonvolatile(p->region->r, p->off, p->len);
	if (err < 0)
		return raise_errno(err);
	return PyBool_FromLong(err == VRANGE_INTACT);
}

static PyObject *Pinned_exit(Pinned *p, PyObject *args)
{
	int err;

	if (!region_open(p->region))
		return NULL;
	err = vrange_mark_volatile(p->region->r, p->off, p->len);
	if (err < 0)
		return raise_errno(err);
	Py_RETURN_FALSE;
}

static PyMethodDef Pinned_methods[] = {
	{ "__enter__", (PyCFunction)Pinned_enter, METH_NOARGS,
	  "Mark the range non-volatile; return True if it was intact." },
	{ "__exit__", (PyCFunction)Pinned_exit, METH_VARARGS,
	  "Mark the range volatile again." },
	{ 0 }
};

static PyTypeObject PinnedType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "vrange._Pinned",
	.tp_basicsize = sizeof(Pinned),
	.tp_dealloc = (destructor)Pinned_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The context manager Region.pinned() returns.",
	.tp_methods = Pinned_methods,
};

/* Region's buffer, length and attributes */

static int Region_getbuffer(Region *self, Py_buffer *view, int flags)
{
	if (!region_open(self)) {
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)self, vrange_region_base(self->r),
			      (Py_ssize_t)vrange_region_size(self->r), 0, flags) < 0)
		return -1;
	self->exports++;
	return 0;
}

static void Region_releasebuffer(Region *self, Py_buffer *view)
{
	self->exports--;
}

static Py_ssize_t Region_len(Region *self)
{
	if (!region_open(self))
		return -1;
	return (Py_ssize_t)vrange_region_size(self->r);
}

static PyObject *Region_get_fd(Region *self, void *unused)
{
	int fd;

	if (!region_open(self))
		return NULL;
	fd = vrange_region_fd(self->r);
	if (fd < 0)
		return raise_errno(fd);
	return PyLong_FromLong(fd);
}

static PyObject *Region_get_access(Region *self, void *unused)
{
	if (!region_open(self))
		return NULL;
	return PyUnicode_FromString(vrange_region_access(self->r) & VRANGE_ACCESS_SIGBUS
				    ? "sigbus" : "zero");
}

static PyObject *Region_get_closed(Region *self, void *unused)
{
	return PyBool_FromLong(self->r == NULL);
}

static PyGetSetDef Region_getset[] = {
	{ "fd", (getter)Region_get_fd, NULL,
	  "The region's memfd (owned by the region: do not close it).  Its first\n"
	  "use makes the region's state shareable with other processes.", NULL },
	{ "access", (getter)Region_get_access, NULL,
	  "The access mode in force: \"zero\" or \"sigbus\".", NULL },
	{ "closed", (getter)Region_get_closed, NULL, "True once closed.", NULL },
	{ 0 }
};

static PyMethodDef Region_methods[] = {
	{ "mark_volatile", (PyCFunction)(void (*)(void))Region_mark_volatile,
	  METH_VARARGS | METH_KEYWORDS, Region_mark_volatile_doc },
	{ "set_cost", (PyCFunction)Region_set_cost, METH_O, Region_set_cost_doc },
	{ "mark_nonvolatile", (PyCFunction)(void (*)(void))Region_mark_nonvolatile,
	  METH_VARARGS | METH_KEYWORDS, Region_mark_nonvolatile_doc },
	{ "is_volatile", (PyCFunction)(void (*)(void))Region_is_volatile,
	  METH_VARARGS | METH_KEYWORDS, Region_is_volatile_doc },
	{ "pinned", (PyCFunction)(void (*)(void))Region_pinned,
	  METH_VARARGS | METH_KEYWORDS, Region_pinned_doc },
	{ "purge", (PyCFunction)Region_purge, METH_NOARGS, Region_purge_doc },
	{ "close", (PyCFunction)Region_close, METH_NOARGS, Region_close_doc },
	{ "__enter__", (PyCFunction)Region_enter, METH_NOARGS, "Return the region." },
	{ "__exit__", (PyCFunction)Region_exit, METH_VARARGS, "Close the region." },
	{ 0 }
};

static PySequenceMethods Region_as_sequence = {
	.sq_length = (lenfunc)Region_len,
};

static PyBufferProcs Region_as_buffer = {
	.bf_getbuffer = (getbufferproc)Region_getbuffer,
	.bf_releasebuffer = (releasebufferproc)Region_releasebuffer,
};

PyDoc_STRVAR(Region_doc,
"Region(size, name=None, access=\"zero\")\n--\n\n"
"A memfd of size bytes (rounded up to pages), mapped shared and read-write,\n"
"whose pages can be marked volatile.  memoryview(region) is a writable view\n"
"of all of it, without a copy (numpy.frombuffer works on it).\n\n"
"access \"zero\" (the default): a purged volatile page reads as zeros.\n"
"access \"sigbus\": touching a purged volatile page raises SIGBUS, as for C\n"
"programs; Python cannot handle that signal, so the interpreter dies unless\n"
"the page is marked non-volatile first (OSError EOPNOTSUPP where\n"
"userfaultfd is unusable).\n\n"
"Use it as a context manager, or close() it.");

static PyTypeObject RegionType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "vrange.Region",
	.tp_basicsize = sizeof(Region),
	.tp_dealloc = (destructor)Region_dealloc,
	.tp_as_sequence = &Region_as_sequence,
	.tp_as_buffer = &Region_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = Region_doc,
	.tp_methods = Region_methods,
	.tp_getset = Region_getset,
	.tp_new = Region_new,
};

/* ------------------------------------------------------------------------ */
/* vrange.Cache */

typedef struct {
	PyObject_HEAD
	vrange_cache *c; /* NULL once closed */
	Py_ssize_t holds; /* HeldValues still holding a value */
} Cache;

static PyTypeObject CacheType;

static vrange_cache *cache_open(Cache *self)
{
	if (!self->c)
		PyErr_SetString(PyExc_ValueError, "operation on a closed vrange.Cache");
	return self->c;
}

/* A key's bytes (release with PyBuffer_Release).  TypeError if not
 * bytes-like, ValueError if not 1..4096 bytes. */
static int get_key(PyObject *key, Py_buffer *kb)
{
	if (PyObject_GetBuffer(key, kb, PyBUF_SIMPLE) < 0)
		return -1;
	if (kb->len < 1 || kb->len > MAX_KEY) {
		PyBuffer_Release(kb);
		PyErr_Format(PyExc_ValueError, "a key is 1 to %d bytes", MAX_KEY);
		return -1;
	}
	return 0;
}

/* Look key up and hold its value: 1 hit, 0 miss, -1 exception set. */
static int cache_lookup(Cache *self, PyObject *key, const void **val, size_t *vlen)
{
	Py_buffer kb;
	int err;

	if (!cache_open(self) || get_key(key, &kb) < 0)
		return -1;
	err = vrange_cache_get(self->c, kb.buf, (size_t)kb.len, val, vlen);
	PyBuffer_Release(&kb);
	if (err == -ENOENT)
		return 0;
	if (err < 0) {
		raise_errno(err);
		return -1;
	}
	return 1;
}

static PyObject *Cache_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "max_bytes", "priority", "cost", NULL };
	struct vrange_cache_opts opts = { .struct_size = sizeof(opts) };
	Py_ssize_t max_bytes = 0;
	Cache *self;
	int err;

	/* cost None: 0 in opts, the library's default (1). */
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zO&iO&:Cache", kwlist, &opts.name,
					 conv_size, &max_bytes, &opts.priority,
					 conv_cost, &opts.cost))
		return NULL;
	opts.max_bytes = (size_t)max_bytes;
	self = (Cache *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	err = vrange_cache_create(&opts, &self->c);
	if (err < 0) {
		Py_DECREF(self);
		return raise_errno(err);
	}
	return (PyObject *)self;
}

static void Cache_dealloc(Cache *self)
{
	vrange_cache_destroy(self->c); /* no holds: each holds a reference */
	Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(Cache_put_doc,
"put(key, value, cost=None)\n--\n\n"
"Copy value (bytes-like, at least 1 byte) into the cache under key\n"
"(bytes-like, 1 to 4096 bytes), replacing the key's entry.  The value is\n"
"volatile until it is got: it may be purged when memory runs short.\n"
"OSError E2BIG if it is larger than max_bytes.\n\n"
"cost: the relative cost of re-creating one page of this value (1 to\n"
"2**32 - 1); None means the cache's cost (Cache(cost=...), 1 unless set).\n"
"A dearer value outlives cheaper ones put at the same time, but not\n"
"forever; values sharing a page are purged at the dearest cost put on it.\n"
"0 is ValueError.");

static PyObject *Cache_put(Cache *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "value", "cost", NULL };
	PyObject *key, *value;
	uint32_t cost = 0;
	Py_buffer kb, vb;
	int err, empty;

	if (!cache_open(self) ||
	    !PyArg_ParseTupleAndKeywords(args, kw, "OO|O&:put", kwlist, &key, &value,
					 conv_cost, &cost) ||
	    get_key(key, &kb) < 0)
		return NULL;
	if (PyObject_GetBuffer(value, &vb, PyBUF_SIMPLE) < 0) {
		PyBuffer_Release(&kb);
		return NULL;
	}
	empty = vb.len == 0;
	if (empty)
		err = 0;
	else if (cost)
		err = vrange_cache_put_cost(self->c, kb.buf, (size_t)kb.len,
					    vb.buf, (size_t)vb.len, cost);
	else
		err = vrange_cache_put(self->c, kb.buf, (size_t)kb.len,
				       vb.buf, (size_t)vb.len);
	PyBuffer_Release(&kb);
	PyBuffer_Release(&vb);
	if (empty) {
		PyErr_SetString(PyExc_ValueError, "a value is at least 1 byte");
		return NULL;
	}
	if (err < 0)
		return raise_errno(err);
	Py_RETURN_NONE;
}

/*
 * What Cache.get() returns: one hold of a value in the library.  Its
 * __enter__ gives a read-only memoryview of the value in place.  The hold
 * ends when the with block ends and no buffer of the value is exported any
 * more: at __exit__ the memoryview is released; if something made from it
 * is still alive (numpy.frombuffer of the view), the hold lasts until that
 * goes too.  So no Python object ever sees a value's memory after it may
 * have been purged or reused.
 */
typedef struct {
	PyObject_HEAD
	Cache *cache;
	const void *val;     /* NULL once released */
	size_t vlen;
	Py_ssize_t exports;
	PyObject *view_ref;  /* weak reference to the memoryview __enter__ made */
	int ended;           /* the with block is over */
} HeldValue;

static PyTypeObject HeldValueType;

static void held_release(HeldValue *h)
{
	if (!h->val)
		return;
	vrange_cache_release(h->cache->c, h->val);
	h->val = NULL;
	h->cache->holds--;
}

PyDoc_STRVAR(Cache_get_doc,
"get(key)\n--\n\n"
"Look key up and hold its value; KeyError on a miss (absent, or purged:\n"
"a value with a lost byte is never returned).  Use the result in a with\n"
"statement, which gives a read-only memoryview of the value in place:\n\n"
"    with cache.get(key) as view:\n"
"        use(view)\n\n"
"The value is neither purged nor moved until the block ends (or, if a\n"
"buffer made from the view is alive then, until it is gone).");

static PyObject *Cache_get(Cache *self, PyObject *key)
{
	const void *val;
	size_t vlen;
	HeldValue *h;
	int hit = cache_lookup(self, key, &val, &vlen);

	if (hit <= 0) {
		if (hit == 0)
			PyErr_SetObject(PyExc_KeyError, key);
		return NULL;
	}
	h = PyObject_New(HeldValue, &HeldValueType);
	if (!h) {
		vrange_cache_release(self->c, val);
		return NULL;
	}
	Py_INCREF(self);
	h->cache = self;
	h->val = val;
	h->vlen = vlen;
	h->exports = 0;
	h->view_ref = NULL;
	h->ended = 0;
	self->holds++;
	return (PyObject *)h;
}

static void HeldValue_dealloc(HeldValue *h)
{
	held_release(h); /* nothing exported: each buffer holds a reference */
	Py_XDECREF(h->view_ref);
	Py_DECREF(h->cache);
	PyObject_Free(h);
}

static PyObject *HeldValue_enter(HeldValue *h, PyObject *unused)
{
	PyObject *view;

	if (h->ended || !h->val) {
		PyErr_SetString(PyExc_ValueError, "the value was released");
		return NULL;
	}
	if (h->view_ref) {
		view = PyWeakref_GetObject(h->view_ref);
		if (view != Py_None) {
			Py_INCREF(view);
			return view;
		}
		Py_CLEAR(h->view_ref);
	}
	view = PyMemoryView_FromObject((PyObject *)h);
	if (view && !(h->view_ref = PyWeakref_NewRef(view, NULL)))
		Py_CLEAR(view);
	return view;
}

static PyObject *HeldValue_exit(HeldValue *h, PyObject *args)
{
	PyObject *view = h->view_ref ? PyWeakref_GetObject(h->view_ref) : Py_None;

	h->ended = 1;
	if (view != Py_None) {
		PyObject *r = PyObject_CallMethod(view, "release", NULL);

		/* BufferError: something made from the view is still alive;
		 * the hold ends when it goes (HeldValue_releasebuffer). */
		if (!r)
			PyErr_Clear();
		Py_XDECREF(r);
	}
	if (h->exports == 0)
		held_release(h);
	Py_RETURN_FALSE;
}

static int HeldValue_getbuffer(HeldValue *h, Py_buffer *view, int flags)
{
	if (!h->val) {
		PyErr_SetString(PyExc_ValueError, "the value was released");
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)h, (void *)h->val, (Py_ssize_t)h->vlen,
			      1, flags) < 0)
		return -1;
	h->exports++;
	return 0;
}

static void HeldValue_releasebuffer(HeldValue *h, Py_buffer *view)
{
	if (--h->exports == 0 && h->ended)
		held_release(h);
}

static PyBufferProcs HeldValue_as_buffer = {
	.bf_getbuffer = (getbufferproc)HeldValue_getbuffer,
	.bf_releasebuffer = (releasebufferproc)HeldValue_releasebuffer,
};

static PyMethodDef HeldValue_methods[] = {
	{ "__enter__", (PyCFunction)HeldValue_enter, METH_NOARGS,
	  "Return a read-only memoryview of the held value." },
	{ "__exit__", (PyCFunction)HeldValue_exit, METH_VARARGS,
	  "Release the memoryview and, once nothing uses it, the value." },
	{ 0 }
};

static PyTypeObject HeldValueType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "vrange._HeldValue",
	.tp_basicsize = sizeof(HeldValue),
	.tp_dealloc = (destructor)HeldValue_dealloc,
	.tp_as_buffer = &HeldValue_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A value held by Cache.get(); use it in a with statement.",
	.tp_methods = HeldValue_methods,
};

PyDoc_STRVAR(Cache_get_bytes_doc,
"get_bytes(key, default=None)\n--\n\n"
"A copy of key's value as bytes, or default on a miss (absent, or purged).");

/* METH_FASTCALL: the hot path of a cache hit, without building an argument
 * tuple (see python/bench_cache.py). */
static PyObject *Cache_get_bytes(Cache *self, PyObject *const *args, Py_ssize_t nargs,
				 PyObject *kwnames)
{
	static const char *const names[] = { "key", "default" };
	PyObject *given[2] = { NULL, NULL }, *ret;
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	const void *val;
	size_t vlen;
	int hit;

	if (nargs > 2) {
		PyErr_SetString(PyExc_TypeError, "get_bytes() takes at most 2 arguments");
		return NULL;
	}
	for (Py_ssize_t i = 0; i < nargs; i++)
		given[i] = args[i];
	for (Py_ssize_t i = 0; i < nkw; i++) {
		PyObject *name = PyTuple_GET_ITEM(kwnames, i);
		int which = PyUnicode_CompareWithASCIIString(name, names[0]) == 0 ? 0
			  : PyUnicode_CompareWithASCIIString(name, names[1]) == 0 ? 1 : -1;

		if (which < 0 || given[which]) {
			PyErr_Format(PyExc_TypeError, "get_bytes() got an unexpected or "
				     "repeated argument '%U'", name);
			return NULL;
		}
		given[which] = args[nargs + i];
	}
	if (!given[0]) {
		PyErr_SetString(PyExc_TypeError, "get_bytes() missing its argument 'key'");
		return NULL;
	}
	hit = cache_lookup(self, given[0], &val, &vlen);
	if (hit <= 0) {
		if (hit < 0)
			return NULL;
		ret = given[1] ? given[1] : Py_None;
		Py_INCREF(ret);
		return ret;
	}
	ret = PyBytes_FromStringAndSize(val, (Py_ssize_t)vlen);
	vrange_cache_release(self->c, val);
	return ret;
}

PyDoc_STRVAR(Cache_remove_doc,
"remove(key)\n--\n\n"
"Remove key's entry; KeyError if absent.  A value held by get() stays\n"
"valid until its with block ends.");

static PyObject *Cache_remove(Cache *self, PyObject *key)
{
	Py_buffer kb;
	int err;

	if (!cache_open(self) || get_key(key, &kb) < 0)
		return NULL;
	err = vrange_cache_remove(self->c, kb.buf, (size_t)kb.len);
	PyBuffer_Release(&kb);
	if (err == -ENOENT) {
		PyErr_SetObject(PyExc_KeyError, key);
		return NULL;
	}
	if (err < 0)
		return raise_errno(err);
	Py_RETURN_NONE;
}

static int cache_read_stats(Cache *self, struct vrange_cache_stats *st)
{
	int err;

	if (!cache_open(self))
		return -1;
	memset(st, 0, sizeof(*st));
	st->struct_size = sizeof(*st);
	err = vrange_cache_get_stats(self->c, st);
	if (err < 0) {
		raise_errno(err);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(Cache_stats_doc,
"stats() -> dict\n--\n\n"
"The cache's counters: entries, value_bytes, resident_bytes, hits, misses,\n"
"purged_entries, evictions (see vrange_cache_get_stats(3)).");

static PyObject *Cache_stats(Cache *self, PyObject *unused)
{
	struct vrange_cache_stats st;

	if (cache_read_stats(self, &st) < 0)
		return NULL;
	return fields_to_dict(&st, cache_stats_fields);
}

static Py_ssize_t Cache_len(Cache *self)
{
	struct vrange_cache_stats st;

	if (cache_read_stats(self, &st) < 0)
		return -1;
	return (Py_ssize_t)st.entries;
}

static int Cache_contains(Cache *self, PyObject *key)
{
	const void *val;
	size_t vlen;
	int hit = cache_lookup(self, key, &val, &vlen);

	if (hit > 0)
		vrange_cache_release(self->c, val);
	return hit;
}

PyDoc_STRVAR(Cache_close_doc,
"close()\n--\n\n"
"Free the cache and every entry.  BufferError while a value is held by\n"
"get().  Closing twice is allowed.");

static PyObject *Cache_close(Cache *self, PyObject *unused)
{
	int err;

	if (!self->c)
		Py_RETURN_NONE;
	if (self->holds) {
		PyErr_Format(PyExc_BufferError,
			     "cannot close a vrange.Cache with %zd value(s) held",
			     self->holds);
		return NULL;
	}
	err = vrange_cache_destroy(self->c);
	if (err < 0)
		return raise_errno(err);
	self->c = NULL;
	Py_RETURN_NONE;
}

static PyObject *Cache_enter(Cache *self, PyObject *unused)
{
	if (!cache_open(self))
		return NULL;
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *Cache_exit(Cache *self, PyObject *args)
{
	PyObject *r = Cache_close(self, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *Cache_get_closed(Cache *self, void *unused)
{
	return PyBool_FromLong(self->c == NULL);
}

static PyGetSetDef Cache_getset[] = {
	{ "closed", (getter)Cache_get_closed, NULL, "True once closed.", NULL },
	{ 0 }
};

static PyMethodDef Cache_methods[] = {
	{ "put", (PyCFunction)(void (*)(void))Cache_put, METH_VARARGS | METH_KEYWORDS,
	  Cache_put_doc },
	{ "get", (PyCFunction)Cache_get, METH_O, Cache_get_doc },
	{ "get_bytes", (PyCFunction)(void (*)(void))Cache_get_bytes,
	  METH_FASTCALL | METH_KEYWORDS, Cache_get_bytes_doc },
	{ "remove", (PyCFunction)Cache_remove, METH_O, Cache_remove_doc },
	{ "stats", (PyCFunction)Cache_stats, METH_NOARGS, Cache_stats_doc },
	{ "close", (PyCFunction)Cache_close, METH_NOARGS, Cache_close_doc },
	{ "__enter__", (PyCFunction)Cache_enter, METH_NOARGS, "Return the cache." },
	{ "__exit__", (PyCFunction)Cache_exit, METH_VARARGS, "Close the cache." },
	{ 0 }
};

static PySequenceMethods Cache_as_sequence = {
	.sq_length = (lenfunc)Cache_len,
	.sq_contains = (objobjproc)Cache_contains,
};

PyDoc_STRVAR(Cache_doc,
"Cache(name=None, max_bytes=0, priority=0, cost=None)\n--\n\n"
"A purgeable cache: key -> value, the values copied into library memory\n"
"that is volatile whenever nobody holds them.  When memory runs short the\n"
"library may purge them; a lookup of a purged value then misses.\n\n"
"name: shown by vrangectl and in /proc.  max_bytes: cap on the value bytes\n"
"stored, 0 = none; over it the least recently used values are evicted.\n"
"priority: purge priority of its memory (lower goes first).  cost: the\n"
"relative cost of re-creating one page of its values, for put() without\n"
"one (1 to 2**32 - 1; None: 1, the default of every mark; 0 is ValueError).\n\n"
"`key in cache` is a lookup like get() (it counts as a hit or a miss);\n"
"len(cache) counts the entries not yet found purged.");

static PyTypeObject CacheType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "vrange.Cache",
	.tp_basicsize = sizeof(Cache),
	.tp_dealloc = (destructor)Cache_dealloc,
	.tp_as_sequence = &Cache_as_sequence,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = Cache_doc,
	.tp_methods = Cache_methods,
	.tp_getset = Cache_getset,
	.tp_new = Cache_new,
};

/* ------------------------------------------------------------------------ */
/* module functions */

PyDoc_STRVAR(purge_doc,
"purge(nbytes=None) -> int\n--\n\n"
"Discard volatile pages of every region and cache, oldest first, until at\n"
"least nbytes are freed (None: all of them); returns the bytes freed.\n"
"Runs without the GIL.");

static PyObject *mod_purge(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "nbytes", NULL };
	Py_ssize_t n = -1;
	ssize_t freed;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:purge", kwlist,
					 conv_size_or_none, &n))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	freed = vrange_purge(n < 0 ? SIZE_MAX : (size_t)n);
	Py_END_ALLOW_THREADS
	if (freed < 0)
		return raise_errno(freed);
	return PyLong_FromSsize_t(freed);
}

PyDoc_STRVAR(set_budget_doc,
"set_budget(nbytes)\n--\n\n"
"Cap the resident bytes of the library's memory in this process; 0 = no\n"
"cap.  Over it, the monitor purges volatile pages, oldest first.");

static PyObject *mod_set_budget(PyObject *mod, PyObject *arg)
{
	Py_ssize_t n;
	int err;

	if (!conv_size(arg, &n))
		return NULL;
	err = vrange_set_budget((size_t)n);
	if (err < 0)
		return raise_errno(err);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(stats_doc,
"stats() -> dict\n--\n\n"
"The library's counters for this process (see vrange_get_stats(3)):\n"
"regions, files, volatile_bytes, purged_bytes, purges, purged_total,\n"
"pressure_events, refills, pressure_source, access_fallback, ..., the\n"
"disk_* counters and purged_cost.");

static PyObject *mod_stats(PyObject *mod, PyObject *unused)
{
	struct vrange_stats st;
	int err;

	memset(&st, 0, sizeof(st));
	err = vrange_get_stats(&st);
	if (err < 0)
		return raise_errno(err);
	return fields_to_dict(&st, stats_fields);
}

static PyMethodDef module_methods[] = {
	{ "purge", (PyCFunction)(void (*)(void))mod_purge, METH_VARARGS | METH_KEYWORDS,
	  purge_doc },
	{ "set_budget", (PyCFunction)mod_set_budget, METH_O, set_budget_doc },
	{ "stats", (PyCFunction)mod_stats, METH_NOARGS, stats_doc },
	{ 0 }
};

PyDoc_STRVAR(module_doc,
"Volatile ranges for Python programs: memory the library may discard when\n"
"the machine runs short, and that tells you afterwards whether it did.\n\n"
"Region: a block of memory whose pages you mark volatile and non-volatile.\n"
"Cache: a key -> value cache on such memory.  purge(), set_budget(),\n"
"stats(): the process-wide calls.  See docs/python.md and libvrange(7).");

static struct PyModuleDef vrange_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "vrange",
	.m_doc = module_doc,
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit_vrange(void);

PyMODINIT_FUNC PyInit_vrange(void)
{
	PyTypeObject *types[] = { &RegionType, &PinnedType, &CacheType, &HeldValueType };
	PyObject *m;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyType_Ready(types[i]) < 0)
			return NULL;
	m = PyModule_Create(&vrange_module);
	if (!m)
		return NULL;
	if (PyModule_AddStringConstant(m, "__version__", vrange_version()) < 0 ||
	    PyModule_AddIntConstant(m, "INTACT", VRANGE_INTACT) < 0 ||
	    PyModule_AddIntConstant(m, "PURGED", VRANGE_PURGED) < 0 ||
	    PyModule_AddObjectRef(m, "Region", (PyObject *)&RegionType) < 0 ||
	    PyModule_AddObjectRef(m, "Cache", (PyObject *)&CacheType) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
