# SPDX-License-Identifier: MIT
"""The Python module against contract §11: every call, its errors, numpy
without a copy, purges without the GIL, threads.  Cases that could kill
the interpreter run in a child interpreter, so a crash fails one test."""
import ctypes
import errno
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import vrange

PAGE = mmap.PAGESIZE


def run_child(code, timeout=120):
    """Run code in a fresh interpreter with the same module; its result."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)


def touch(view, off=0, length=None, byte=0x5A):
    """Write byte to every page of view[off:off+length]."""
    end = len(view) if length is None else off + length
    for o in range(off, end, PAGE):
        view[o] = byte


# -- the module -------------------------------------------------------------

def test_version_and_constants():
    assert vrange.__version__.count(".") == 2
    assert all(p.isdigit() for p in vrange.__version__.split("."))
    assert (vrange.INTACT, vrange.PURGED) == (0, 1)


def test_docstrings_everywhere():
    assert vrange.__doc__
    for obj in (vrange.Region, vrange.Cache, vrange.purge, vrange.set_budget,
                vrange.stats):
        assert obj.__doc__, obj
    for name in ("mark_volatile", "mark_nonvolatile", "is_volatile", "pinned",
                 "purge", "close", "__enter__", "__exit__", "fd", "access"):
        assert getattr(vrange.Region, name).__doc__, name
    for name in ("put", "get", "get_bytes", "remove", "stats", "close"):
        assert getattr(vrange.Cache, name).__doc__, name


def test_stats_fields():
    st = vrange.stats()
    for key in ("regions", "files", "volatile_bytes", "purged_bytes", "purges",
                "purged_total", "pressure_events", "refills", "sigbus_fallbacks",
                "disk_volatile_bytes", "disk_purged_bytes", "disk_purges",
                "disk_freed_total", "disk_unpunchable", "purged_cost"):
        assert isinstance(st[key], int) and st[key] >= 0, key
    assert isinstance(st["pressure_source"], str)
    assert isinstance(st["access_fallback"], str)
    assert isinstance(st["disk_unpunchable_why"], str)
    with vrange.Region(PAGE):
        assert vrange.stats()["regions"] == st["regions"] + 1


def test_module_purge_and_budget():
    assert vrange.purge(0) == 0
    with vrange.Region(8 * PAGE) as r:
        touch(memoryview(r))
        r.mark_volatile()
        before = vrange.stats()["purged_total"]
        assert vrange.purge() >= 8 * PAGE
        assert vrange.stats()["purged_total"] >= before + 8 * PAGE
        assert r.mark_nonvolatile() == vrange.PURGED
    assert vrange.purge(nbytes=None) >= 0
    assert vrange.set_budget(0) is None
    with pytest.raises(ValueError):
        vrange.purge(-1)
    with pytest.raises(TypeError):
        vrange.purge("all")
    with pytest.raises(ValueError):
        vrange.set_budget(-1)
    with pytest.raises(TypeError):
        vrange.set_budget(None)
    with pytest.raises(ValueError):
        vrange.set_budget(1 << 70)


# -- Region -----------------------------------------------------------------

def test_region_basics():
    with vrange.Region(10000, name="py-test") as r:
        assert len(r) == -(-10000 // PAGE) * PAGE
        assert r.access == "zero"
        assert not r.closed
        fd = r.fd
        assert isinstance(fd, int) and os.fstat(fd).st_size == len(r)
        assert os.readlink("/proc/self/fd/%d" % fd).startswith("/memfd:")
    assert r.closed


def test_region_bad_arguments():
    with pytest.raises(ValueError):
        vrange.Region(0)
    with pytest.raises(ValueError):
        vrange.Region(-1)
    with pytest.raises(TypeError):
        vrange.Region("big")
    with pytest.raises(TypeError):
        vrange.Region(PAGE, name=3)
    with pytest.raises(ValueError):
        vrange.Region(PAGE, name="a\0b")
    with pytest.raises(ValueError):
        vrange.Region(PAGE, access="purple")
    with pytest.raises(TypeError):
        vrange.Region(PAGE, access=None)
    with vrange.Region(4 * PAGE) as r:
        for args in ((4 * PAGE + 1,), (0, 4 * PAGE + 1), (PAGE, 3 * PAGE + 1),
                     (-1,), (0, -1), (1 << 70,)):
            for call in (r.mark_volatile, r.mark_nonvolatile, r.is_volatile,
                         r.pinned):
                with pytest.raises(ValueError):
                    call(*args)
        with pytest.raises(TypeError):
            r.mark_volatile("0")
        with pytest.raises(TypeError):
            r.is_volatile(0, 1.5)
        # the edges themselves are fine; length 0 does nothing
        r.mark_volatile(4 * PAGE)
        r.mark_volatile(offset=PAGE, length=0)
        assert not r.is_volatile()


def test_region_sigbus_access():
    try:
        r = vrange.Region(PAGE, access="sigbus")
    except OSError as e:
        assert e.errno == errno.EOPNOTSUPP
        pytest.skip("SIGBUS access unavailable here: " +
                    vrange.stats()["access_fallback"])
    assert r.access == "sigbus"
    r.close()


def test_region_sigbus_kills_an_unprepared_interpreter():
    """What docs/python.md says of "sigbus": touching a purged volatile page
    raises SIGBUS, which Python does not survive."""
    res = run_child("""
        import sys, vrange
        try:
            r = vrange.Region(4096, access="sigbus")
        except OSError:
            sys.exit(77)
        m = memoryview(r)
        m[0] = 1
        r.mark_volatile()
        vrange.purge()
        print(m[0])
        sys.exit(0)
    """)
    if res.returncode == 77:
        pytest.skip("SIGBUS access unavailable here")
    if os.environ.get("VRANGE_UNDER_ASAN"):
        assert res.returncode != 0   # ASan reports the signal and exits
    else:
        assert res.returncode == -signal.SIGBUS, res


def test_memoryview_is_the_region_without_a_copy():
    with vrange.Region(2 * PAGE) as r:
        m = memoryview(r)
        assert not m.readonly and m.nbytes == len(r) and m.format == "B"
        m[:5] = b"hello"
        m2 = memoryview(r)
        assert bytes(m2[:5]) == b"hello"
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m2))
        assert ctypes.string_at(addr, 5) == b"hello"
        ctypes.memmove(addr + PAGE, b"world", 5)
        assert bytes(m[PAGE:PAGE + 5]) == b"world"
        m.release()
        m2.release()


def test_numpy_frombuffer_without_a_copy():
    np = pytest.importorskip("numpy")
    with vrange.Region(4 * PAGE) as r:
        a = np.frombuffer(memoryview(r), dtype=np.uint32)
        assert a.flags.writeable and a.size == len(r) // 4
        a[:] = np.arange(a.size, dtype=np.uint32)
        m = memoryview(r)
        assert bytes(m[4:8]) == (1).to_bytes(4, sys.byteorder)
        m[0:4] = (77).to_bytes(4, sys.byteorder)
        assert a[0] == 77
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert a.ctypes.data == addr
        with pytest.raises(BufferError):
            r.close()                 # the array holds the region's memory
        r.mark_volatile()
        vrange.purge()
        assert r.mark_nonvolatile() == vrange.PURGED
        assert not a.any()            # purged pages read zeros through numpy
        del a
        m.release()


def test_mark_purge_and_zeros():
    with vrange.Region(16 * PAGE) as r:
        m = memoryview(r)
        touch(m)
        assert not r.is_volatile()
        r.mark_volatile(4 * PAGE, 8 * PAGE)
        assert r.is_volatile()
        assert r.is_volatile(4 * PAGE, 1)
        assert not r.is_volatile(0, 4 * PAGE)
        assert not r.is_volatile(12 * PAGE)
        assert r.mark_nonvolatile(4 * PAGE, 8 * PAGE) == vrange.INTACT
        assert not r.is_volatile()
        # marking volatile rounds inward: no whole page, nothing volatile
        r.mark_volatile(1, PAGE)
        assert not r.is_volatile()
        r.mark_volatile(2 * PAGE, 2 * PAGE)
        assert r.purge() >= 2 * PAGE
        assert r.is_volatile(2 * PAGE, 1)      # purged, still volatile
        assert bytes(m[2 * PAGE:4 * PAGE]) == bytes(2 * PAGE)  # zeros
        assert m[PAGE] == 0x5A and m[4 * PAGE] == 0x5A          # untouched
        assert r.mark_nonvolatile() == vrange.PURGED
        assert r.mark_nonvolatile() == vrange.INTACT
        assert r.purge() == 0                  # nothing volatile any more
        assert m[0] == 0x5A
        m.release()


def test_pinned():
    with vrange.Region(4 * PAGE) as r:
        m = memoryview(r)
        touch(m)
        r.mark_volatile()
        with r.pinned() as intact:
            assert intact is True
            assert not r.is_volatile()
        assert r.is_volatile()
        vrange.purge()
        with r.pinned(PAGE, length=PAGE) as intact:
            assert intact is False
            assert not r.is_volatile(PAGE, PAGE)
            assert r.is_volatile(0, PAGE)
        assert r.is_volatile(PAGE, PAGE)
        with pytest.raises(RuntimeError):
            with r.pinned():
                raise RuntimeError("propagates")
        assert r.is_volatile()
        m.release()


def test_close_rules():
    r = vrange.Region(PAGE)
    m = memoryview(r)
    with pytest.raises(BufferError):
        r.close()
    assert not r.closed
    m.release()
    r.close()
    r.close()                         # twice is fine
    for call in (r.mark_volatile, r.mark_nonvolatile, r.is_volatile, r.purge,
                 r.pinned, r.__enter__):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError):
        len(r)
    with pytest.raises(ValueError):
        memoryview(r)
    with pytest.raises(ValueError):
        r.fd
    with pytest.raises(BufferError):
        with vrange.Region(PAGE) as r2:
            m2 = memoryview(r2)
    m2.release()
    r2.close()


def test_pinned_after_close():
    r = vrange.Region(PAGE)
    p = r.pinned()
    r.close()
    with pytest.raises(ValueError):
        with p:
            pass


# -- Cache ------------------------------------------------------------------

def test_cache_calls():
    with vrange.Cache(name="py-test", max_bytes=0, priority=0) as c:
        assert len(c) == 0
        c.put(b"k", b"value")
        c.put(bytearray(b"k2"), memoryview(b"x" * 10000))
        assert len(c) == 2
        assert b"k" in c and b"nope" not in c
        with c.get(b"k") as view:
            assert isinstance(view, memoryview) and view.readonly
            assert bytes(view) == b"value"
            with pytest.raises(TypeError):
                view[0] = 0
        with pytest.raises(ValueError):
            bytes(view)               # released when the block ended
        assert c.get_bytes(b"k2") == b"x" * 10000
        assert c.get_bytes(b"nope") is None
        assert c.get_bytes(b"nope", default=b"d") == b"d"
        c.put(b"k", b"replaced")
        assert c.get_bytes(b"k") == b"replaced"
        with pytest.raises(KeyError):
            c.get(b"nope")
        c.remove(b"k")
        with pytest.raises(KeyError):
            c.remove(b"k")
        assert b"k" not in c
        st = c.stats()
        for key in ("entries", "value_bytes", "resident_bytes", "hits",
                    "misses", "purged_entries", "evictions"):
            assert isinstance(st[key], int), key
        assert st["entries"] == 1 and st["value_bytes"] == 10000
        assert st["hits"] >= 4 and st["misses"] >= 3
    assert c.closed


def test_cache_bad_arguments():
    with pytest.raises(TypeError):
        vrange.Cache(name=1)
    with pytest.raises(ValueError):
        vrange.Cache(max_bytes=-1)
    with pytest.raises(TypeError):
        vrange.Cache(priority="low")
    with vrange.Cache(max_bytes=100) as c:
        for key in (b"", b"k" * 4097):
            with pytest.raises(ValueError):
                c.put(key, b"v")
            with pytest.raises(ValueError):
                c.get(key)
            with pytest.raises(ValueError):
                c.remove(key)
        c.put(b"k" * 4096, b"v")
        for key in ("str", 5, None):
            with pytest.raises(TypeError):
                c.put(key, b"v")
            with pytest.raises(TypeError):
                c.get_bytes(key)
            with pytest.raises(TypeError):
                key in c
        for args, kw in (((), {}), ((b"k", 1, 2), {}), ((b"k",), {"key": b"k"}),
                         ((b"k",), {"other": 1})):
            with pytest.raises(TypeError):
                c.get_bytes(*args, **kw)
        assert c.get_bytes(key=b"absent", default=3) == 3
        with pytest.raises(ValueError):
            c.put(b"k", b"")
        with pytest.raises(TypeError):
            c.put(b"k", "text")
        with pytest.raises(OSError) as e:
            c.put(b"big", b"v" * 101)    # over max_bytes
        assert e.value.errno == errno.E2BIG


def test_cache_purged_key_is_a_miss():
    with vrange.Cache() as c:
        c.put(b"img", bytes(range(256)) * 1024)
        assert c.get_bytes(b"img")[:3] == b"\0\1\2"
        assert vrange.purge() >= 256 * 1024
        with pytest.raises(KeyError):
            c.get(b"img")
        assert c.get_bytes(b"img") is None
        assert b"img" not in c
        assert c.stats()["purged_entries"] >= 1


def test_cache_held_value_survives_purge():
    with vrange.Cache() as c:
        c.put(b"a", b"\x07" * 100000)
        with c.get(b"a") as view:
            vrange.purge()
            assert bytes(view) == b"\x07" * 100000
        assert c.get_bytes(b"a") == b"\x07" * 100000


def test_cache_close_rules():
    np = pytest.importorskip("numpy")
    c = vrange.Cache()
    c.put(b"k", b"v" * 4096)
    h = c.get(b"k")
    with pytest.raises(BufferError):
        c.close()
    with h as view:
        arr = np.frombuffer(view, dtype=np.uint8)
    # the array outlives the block: the value stays held until it goes
    with pytest.raises(BufferError):
        c.close()
    vrange.purge()
    assert arr.sum() == ord("v") * 4096
    del arr, view, h
    c.close()
    c.close()
    for call, args in ((c.put, (b"k", b"v")), (c.get, (b"k",)),
                       (c.get_bytes, (b"k",)), (c.remove, (b"k",)),
                       (c.stats, ())):
        with pytest.raises(ValueError):
            call(*args)
    with pytest.raises(ValueError):
        len(c)
    with pytest.raises(ValueError):
        b"k" in c


def test_cache_get_without_with_is_released_when_dropped():
    with vrange.Cache() as c:
        c.put(b"k", b"v")
        h = c.get(b"k")
        del h                           # never entered: released by its end
    assert c.closed


# -- threads and the GIL ----------------------------------------------------

def _runs_during(prepare, call):
    """How many steps another Python thread made while call() ran.  With a
    huge switch interval the GIL changes hands only when released on
    purpose, so the count grows only if call() lets the GIL go."""
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
            os.sched_yield()            # releases the GIL between steps

    old = sys.getswitchinterval()
    sys.setswitchinterval(100)          # before the thread first waits
    t = threading.Thread(target=spin)
    t.start()
    try:
        best = 0
        for _ in range(50):            # a loaded machine may not run it at once
            prepare()
            before = count[0]
            call()
            best = max(best, count[0] - before)
            if best:
                break
    finally:
        stop.set()
        sys.setswitchinterval(old)
        t.join()
    return best


def _volatile_region_of(r):
    m = memoryview(r)
    touch(m)
    m.release()
    r.mark_volatile()


def test_region_purge_releases_the_gil():
    with vrange.Region(64 << 20) as r:
        assert _runs_during(lambda: _volatile_region_of(r), r.purge) > 0


def test_module_purge_releases_the_gil():
    with vrange.Region(64 << 20) as r:
        assert _runs_during(lambda: _volatile_region_of(r), vrange.purge) > 0


def test_threads_against_a_purging_thread():
    """Four threads use regions and a cache while a fifth purges and a
    sixth closes regions under the others; every byte read back is either
    what was written or (reported purged) zeros.  In a child interpreter:
    a crash is this test failing."""
    res = run_child("""
        import mmap, sys, threading, vrange
        PAGE = mmap.PAGESIZE
        stop = threading.Event()
        errors = []
        shared = vrange.Region(64 * PAGE)
        cache = vrange.Cache()

        def worker(n):
            try:
                pat = bytes([n + 1]) * PAGE
                with vrange.Region(32 * PAGE) as r:
                    m = memoryview(r)
                    for i in range(300):
                        # pinned() left it volatile: writing there could be
                        # torn by a purge, so take it back first.
                        r.mark_nonvolatile()
                        for p in range(32):
                            m[p * PAGE:(p + 1) * PAGE] = pat
                        r.mark_volatile()
                        with r.pinned() as intact:
                            for p in range(32):
                                page = bytes(m[p * PAGE:(p + 1) * PAGE])
                                if page != pat and (intact or page != bytes(PAGE)):
                                    errors.append((n, i, p, intact))
                        key = b"%d-%d" % (n, i % 16)
                        cache.put(key, pat * 4)
                        v = cache.get_bytes(key)
                        if v is not None and v != pat * 4:
                            errors.append(("cache", n, i))
                        try:
                            with cache.get(key) as view:
                                if bytes(view) != pat * 4:
                                    errors.append(("view", n, i))
                        except KeyError:
                            pass
                        try:
                            shared.mark_volatile(n * PAGE, PAGE)
                            shared.is_volatile()
                        except ValueError:
                            pass        # closed by the closer: allowed
                    m.release()
            except Exception as e:
                errors.append(repr(e))

        def purger():
            while not stop.is_set():
                vrange.purge()
                try:
                    shared.purge()
                except ValueError:
                    pass

        def closer():
            while not stop.is_set():
                try:
                    shared.close()
                    return
                except BufferError:
                    pass

        workers = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        others = [threading.Thread(target=purger), threading.Thread(target=closer)]
        for t in workers + others:
            t.start()
        for t in workers:
            t.join()
        stop.set()
        for t in others:
            t.join()
        cache.close()
        print("errors:", errors[:5])
        sys.exit(1 if errors else 0)
    """, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr


def test_close_waits_for_a_purge_in_another_thread():
    """close() during a purge of the same region (running without the GIL)
    neither crashes nor frees the region under it."""
    res = run_child("""
        import threading, vrange
        for i in range(20):
            r = vrange.Region(32 << 20)
            m = memoryview(r)
            m[::4096] = b"x" * (len(r) // 4096)
            m.release()
            r.mark_volatile()
            out = []
            def purge():
                try:
                    out.append(r.purge())
                except ValueError:
                    out.append("closed")
            t = threading.Thread(target=purge)
            t.start()
            r.close()
            t.join()
            assert out[0] in (32 << 20, "closed"), out
        print("ok")
    """)
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout + res.stderr
