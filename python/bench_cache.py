# SPDX-License-Identifier: MIT
"""A vrange.Cache hit from Python against a dict hit and a functools.lru_cache
hit, in the same run (meson test --benchmark python-cache).

Each lookup returns the value as bytes: dict[key], an lru_cache'd function
of key, Cache.get_bytes(key) (a copy out of the cache), and, for reading in
place, `with cache.get(key) as view`; `key in cache` (the library's get and
release, nothing copied) shows what the lookup itself costs.  Printed: ns per lookup (best of 5)
and the ratio to the dict."""
import functools
import os
import time

import vrange

KEYS = 1000
ROUNDS = 5


def best_ns(fn, keys):
    """Best ns per lookup over ROUNDS passes of fn over keys."""
    best = float("inf")
    for _ in range(ROUNDS):
        t = time.perf_counter_ns()
        fn(keys)
        best = min(best, (time.perf_counter_ns() - t) / len(keys))
    return best


def run(size):
    keys = [b"key-%06d" % i for i in range(KEYS)] * 20
    values = {k: os.urandom(size) for k in keys[:KEYS]}
    cache = vrange.Cache(name="bench")
    for k, v in values.items():
        cache.put(k, v)

    @functools.lru_cache(maxsize=None)
    def lru(k):
        return values[k]

    for k in keys[:KEYS]:
        lru(k)

    def dict_hits(ks, d=values):
        for k in ks:
            d[k]

    def lru_hits(ks, f=lru):
        for k in ks:
            f(k)

    def cache_hits(ks, get=cache.get_bytes):
        for k in ks:
            if get(k) is None:
                raise SystemExit("a miss: the cache was purged during the bench")

    def contains_hits(ks, c=cache):
        for k in ks:
            k in c

    def view_hits(ks, get=cache.get):
        for k in ks:
            with get(k) as view:
                view[0]

    base = best_ns(dict_hits, keys)
    print("value %6d bytes: dict %6.0f ns" % (size, base), end="")
    for name, fn in (("lru_cache", lru_hits), ("key in Cache", contains_hits),
                     ("Cache.get_bytes", cache_hits),
                     ("with Cache.get", view_hits)):
        ns = best_ns(fn, keys)
        print(" | %s %6.0f ns (%.1fx)" % (name, ns, ns / base), end="")
    print()
    cache.close()


if __name__ == "__main__":
    print("vrange", vrange.__version__, "- cache hits from Python, %d keys" % KEYS)
    for size in (64, 4096, 65536):
        run(size)
