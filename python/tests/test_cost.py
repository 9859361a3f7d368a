# SPDX-License-Identifier: MIT
"""Costs of re-creation from Python (contract §10 through §11):
Region.mark_volatile(cost=), Region.set_cost(), Cache(cost=),
Cache.put(cost=).  The order cases run in a child interpreter, so that
nothing else of the test process is volatile: a small vrange.purge() then
takes exactly the range the library's order puts first."""
import inspect
import subprocess
import sys
import textwrap

import pytest

import vrange

PRELUDE = """
import mmap, vrange
PAGE = mmap.PAGESIZE
SIZE = 16 * PAGE
vrange.purge()

def filled():
    r = vrange.Region(SIZE, name="cost-test")
    m = memoryview(r)
    for o in range(0, SIZE, PAGE):
        m[o] = 0x5A
    m.release()
    return r
"""


def run_child(code):
    """Run PRELUDE + code in a fresh interpreter; its stdout, stripped."""
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


REGIONS = """
older, newer = filled(), filled()
{mark_older}
{mark_newer}
freed = vrange.purge(PAGE)
assert freed >= PAGE, freed
print(older.mark_nonvolatile(), newer.mark_nonvolatile())
"""


def regions(mark_older, mark_newer):
    return run_child(REGIONS.format(mark_older=mark_older, mark_newer=mark_newer))


def test_equal_costs_purge_the_older_range_first():
    # The control: without costs the least recently marked goes first, so
    # the cases below show the cost reversing that order.
    assert regions("older.mark_volatile()", "newer.mark_volatile()") == "1 0"
    assert regions("older.mark_volatile(cost=7)",
                   "newer.mark_volatile(cost=7)") == "1 0"


def test_dear_range_outlives_a_cheap_one():
    assert regions("older.mark_volatile(cost=1000)",
                   "newer.mark_volatile()") == "0 1"
    assert regions("older.mark_volatile(0, None, 1000)",
                   "newer.mark_volatile(cost=None)") == "0 1"


def test_region_set_cost_is_the_cost_of_plain_marks():
    assert regions("older.set_cost(1000); older.mark_volatile()",
                   "newer.mark_volatile()") == "0 1"
    # An explicit cost wins over the region's.
    assert regions("older.set_cost(1000); older.mark_volatile(cost=1)",
                   "newer.mark_volatile()") == "1 0"


CACHE = """
dear = bytes([0xD5]) * SIZE
cheap = bytes([0xC4]) * SIZE
{setup}
freed = vrange.purge(PAGE)
assert freed >= PAGE, freed
print(int({older_in}), int({newer_in}))
"""


def cache(setup, older_in="b'older' in c", newer_in="b'newer' in c"):
    return run_child(CACHE.format(setup=textwrap.dedent(setup),
                                  older_in=older_in, newer_in=newer_in))


def test_cache_equal_costs_purge_the_older_value_first():
    assert cache("""
c = vrange.Cache(name="cost-test")
c.put(b"older", dear)
c.put(b"newer", cheap)
""") == "0 1"


def test_cache_dear_value_outlives_a_cheap_one():
    assert cache("""
c = vrange.Cache(name="cost-test")
c.put(b"older", dear, cost=1000)
c.put(b"newer", cheap)
""") == "1 0"
    assert cache("""
c = vrange.Cache(name="cost-test")
c.put(key=b"older", value=dear, cost=1000)
c.put(b"newer", cheap, cost=None)
""") == "1 0"


def test_cache_cost_is_the_cost_of_its_puts():
    assert cache("""
dear_cache = vrange.Cache(name="dear", cost=1000)
cheap_cache = vrange.Cache(name="cheap")
dear_cache.put(b"older", dear)
cheap_cache.put(b"newer", cheap)
""", "b'older' in dear_cache", "b'newer' in cheap_cache") == "1 0"
    # put's own cost wins over the cache's.
    assert cache("""
c = vrange.Cache(name="dear", cost=1000)
c.put(b"older", dear, cost=1)
c.put(b"newer", cheap)
""") == "0 1"


def test_no_cost_protects_forever():
    # Contract §10: a dear range not marked again is purged in the end.
    # Aging is measured on the mark clock (docs/design.md, "Purge order by
    # cost"): cost 4 outlives cheap pages marked up to 3 aging units (at
    # least 1 ms each) after it, so a cheap range marked 10 ms later
    # overtakes it (typically in the first round).  No bound on the time is
    # asserted, only that it ends.
    out = run_child("""
import time
dear = filled()
dear.mark_volatile(cost=4)
rounds = 0
while rounds < 300:
    time.sleep(0.01)
    cheap = filled()
    cheap.mark_volatile()
    vrange.purge(PAGE)
    purged_cheap = cheap.mark_nonvolatile() == vrange.PURGED
    cheap.close()
    if not purged_cheap:
        break
    rounds += 1
print(dear.mark_nonvolatile(), rounds)
""")
    state, rounds = out.split()
    assert state == "1" and int(rounds) < 300, out


@pytest.mark.parametrize("bad,exc", [
    (0, ValueError), (-1, ValueError), (2**32, ValueError), (2**70, ValueError),
    ("1", TypeError), (1.5, TypeError),
])
def test_bad_costs(bad, exc):
    with vrange.Region(4096) as r:
        with pytest.raises(exc):
            r.mark_volatile(cost=bad)
        assert not r.is_volatile()
        with pytest.raises(exc):
            r.set_cost(bad)
    with pytest.raises(exc):
        vrange.Cache(cost=bad)
    with vrange.Cache() as c:
        with pytest.raises(exc):
            c.put(b"k", b"v", cost=bad)
        assert b"k" not in c


def test_cost_limits_and_closed_objects():
    with vrange.Region(4096) as r:
        r.mark_volatile(cost=2**32 - 1)
        assert r.is_volatile()
        r.set_cost(1)
        with pytest.raises(ValueError):
            r.set_cost(None)
    with pytest.raises(ValueError):
        r.set_cost(5)
    with pytest.raises(ValueError):
        r.mark_volatile(cost=5)
    with vrange.Cache(cost=2**32 - 1) as c:
        c.put(b"k", b"v", cost=2**32 - 1)
        assert c.get_bytes(b"k") == b"v"
    with pytest.raises(ValueError):
        c.put(b"k", b"v", cost=5)


def test_cost_signatures_and_docstrings():
    sig = inspect.signature
    assert str(sig(vrange.Region.mark_volatile)) == "(offset=0, length=None, cost=None)"
    assert str(sig(vrange.Region.set_cost)) == "(cost)"
    assert str(sig(vrange.Cache.put)) == "(key, value, cost=None)"
    assert "cost" in str(sig(vrange.Cache))
    for doc in (vrange.Region.mark_volatile.__doc__, vrange.Region.set_cost.__doc__,
                vrange.Cache.put.__doc__, vrange.Cache.__doc__):
        assert "re-creating one page" in doc
