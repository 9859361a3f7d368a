#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""image_cache - decoded images kept in a vrange.Cache against a dict.

A program serves lookups of "decoded images" (256 KiB each, made from their
id and carrying a checksum), caching what it decodes.  7 lookups in 10 go
to a hot set of 192 images (48 MiB, which fits), 1 to an image seen
before, 2 to a new one: 1 GiB of images is offered in all.  Inside a memory
cgroup limited to 256 MiB:

- with a vrange.Cache, the library purges released images when the cgroup
  runs short; a lookup of a purged image misses (KeyError) and decodes it
  again, every hit is checked against its checksum, and the program lives;
- the same program keeping the images in a dict is killed by the kernel's
  OOM killer.

    image_cache.py            both runs in fresh memory cgroups, side by side
    image_cache.py --vrange   one run with vrange.Cache, in this process
    image_cache.py --dict     one run with a dict, in this process
    options: --limit MiB (256)  --offer MiB (1024)

The side-by-side run needs root and a memory cgroup (cgroup v1's memory
controller, or cgroup v2 with it enabled); it exits 77 when none can be
made, 1 when the vrange.Cache run did not survive.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
import zlib

import vrange

IMG = 256 << 10
HOT = 192


def decode(image_id):
    """"Decode" an image: bytes from a stream seeded by its id, their
    checksum in the first 8 bytes."""
    body = random.Random(image_id).randbytes(IMG - 8)
    return zlib.adler32(body).to_bytes(8, "little") + body


def intact(view):
    return zlib.adler32(view[8:]) == int.from_bytes(view[:8], "little")


def serve(kind, offer_bytes):
    """The workload; prints progress and a final report as JSON lines."""
    rng = random.Random(1)
    seen = 0            # images decoded at least once: ids 0 .. seen-1
    rep = dict(kind=kind, lookups=0, hits=0, decoded=0, purged=0, damaged=0,
               offered_mib=0)
    cache = vrange.Cache(name="image_cache") if kind == "vrange" else {}
    key = "image-{}".format if kind == "dict" else lambda i: b"image-%d" % i
    next_report = 64 << 20
    while seen * IMG < offer_bytes:
        x = rng.random()
        if x < 0.7 and seen >= HOT:
            image_id = rng.randrange(HOT)
        elif x < 0.8 and seen:
            image_id = rng.randrange(seen)
        else:
            image_id, seen = seen, seen + 1
        rep["lookups"] += 1
        k = key(image_id)
        if kind == "vrange":
            try:
                with cache.get(k) as view:
                    rep["hits"] += 1
                    rep["damaged"] += not intact(view)
                continue
            except KeyError:  # new, or purged: decode it (again)
                pass
            cache.put(k, decode(image_id))
        else:
            img = cache.get(k)
            if img is not None:
                rep["hits"] += 1
                rep["damaged"] += not intact(img)
                continue
            cache[k] = decode(image_id)
        rep["decoded"] += 1
        if seen * IMG >= next_report:
            rep["offered_mib"] = seen * IMG >> 20
            print(json.dumps(dict(rep, progress=True)), flush=True)
            next_report += 64 << 20
    rep["offered_mib"] = seen * IMG >> 20
    rep["purged"] = rep["decoded"] - seen   # decoded again after a purge
    if kind == "vrange":
        rep["purges"] = vrange.stats()["purges"]
        rep["pressure_source"] = vrange.stats()["pressure_source"]
    print(json.dumps(rep), flush=True)


# -- a memory cgroup, as examples/demo_cgroup.h makes one --------------------

def find_mount(v2):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, super_opts = (right.split() + ["", "", ""])[:3]
            if v2 and fstype == "cgroup2":
                return left.split()[4]
            if not v2 and fstype == "cgroup" and "memory" in super_opts:
                return left.split()[4]
    return None


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def make_cgroup(limit, tag):
    """A fresh memory cgroup limited to limit bytes: its directory, or
    (None, why)."""
    why = "no memory cgroup hierarchy mounted"
    for v2 in (False, True):
        mnt = find_mount(v2)
        if not mnt:
            continue
        path = os.path.join(mnt, "image-cache-%s-%d" % (tag, os.getpid()))
        try:
            if v2:
                try:
                    write(os.path.join(mnt, "cgroup.subtree_control"), "+memory")
                except OSError:
                    pass
            os.mkdir(path)
        except OSError as e:
            why = "mkdir %s: %s" % (path, e.strerror)
            continue
        try:
            write(os.path.join(path, "memory.max" if v2 else "memory.limit_in_bytes"),
                  str(limit))
            if v2:
                write(os.path.join(path, "memory.swap.max"), "0")
            return path, None
        except OSError as e:
            why = "%s: cannot set the limit: %s" % (path, e.strerror)
            os.rmdir(path)
    return None, why


def remove_cgroup(path):
    for _ in range(100):  # a killed child is uncharged asynchronously
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.02)


def run_in_cgroup(kind, args):
    """Run one workload in its own cgroup: (exit status, last report)."""
    path, why = make_cgroup(args.limit << 20, kind)
    if not path:
        return None, why
    procs = os.path.join(path, "cgroup.procs")
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--" + kind,
         "--offer", str(args.offer)],
        stdout=subprocess.PIPE, text=True,
        preexec_fn=lambda: write(procs, str(os.getpid())))
    out, _ = child.communicate()
    remove_cgroup(path)
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return child.returncode, lines[-1] if lines else {}


def describe(status, rep):
    if status == 0:
        how = "survived"
    elif status == -9:
        how = "KILLED (SIGKILL: out of memory)"
    else:
        how = "failed (status %s)" % status
    return "%-32s offered %5d MiB, %6d lookups, %6d hits, %5d decoded, %4d damaged" % (
        how, rep.get("offered_mib", 0), rep.get("lookups", 0),
        rep.get("hits", 0), rep.get("decoded", 0), rep.get("damaged", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vrange", action="store_true", help="one run with vrange.Cache")
    ap.add_argument("--dict", action="store_true", help="one run with a dict")
    ap.add_argument("--limit", type=int, default=256, help="cgroup limit, MiB")
    ap.add_argument("--offer", type=int, default=1024, help="images offered, MiB")
    args = ap.parse_args()
    if args.vrange or args.dict:
        serve("vrange" if args.vrange else "dict", args.offer << 20)
        return 0
    print("a %d MiB memory cgroup, %d KiB images, %d MiB offered (hot set %d MiB)"
          % (args.limit, IMG >> 10, args.offer, HOT * IMG >> 20))
    results = {}
    for kind in ("vrange", "dict"):
        status, rep = run_in_cgroup(kind, args)
        if status is None:
            print("no memory cgroup can be made here:", rep)
            return 77
        results[kind] = (status, rep)
        label = "vrange.Cache" if kind == "vrange" else "dict"
        print("  %-13s %s" % (label, describe(status, rep)))
    status, rep = results["vrange"]
    if status == 0:
        print("  vrange.Cache: %d images purged and decoded again, %d purge passes "
              "(pressure source: %s)" % (rep["purged"], rep.get("purges", 0),
                                         rep.get("pressure_source", "?")))
    return 0 if status == 0 and rep.get("damaged", 1) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
