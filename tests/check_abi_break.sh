#!/bin/sh
# check_abi_break.sh SRC BUILD: scripts/check-abi fails on a break and lets
# an allowed change through.  The library is built from copies of the
# sources (cc at -O0 -g: the ABI, not the speed) and compared with the
# baseline abidw makes of the unchanged copy:
#   a field inserted before the first member of struct vrange_cache_stats
#     must fail (abidiff bit 4: a layout change, no symbol removed);
#   a function dropped from the version script must fail (bit 8);
#   a field appended at the end of struct vrange_stats must pass (the sized
#     call: abi/libvrange.suppr);
#   two members of one size swapped in struct vrange_region_inline, a
#     layout the header's inline fast path reads, must fail (abidiff
#     filters that out as harmless; scripts/abi-layout --fixed does not).
# Exit 77 where check-abi cannot run (no abidiff, another architecture).
set -eu
src=$1 build=$2
command -v abidw >/dev/null 2>&1 || {
	echo "SKIP: abidw is not installed (Debian: abigail-tools)"; exit 77; }
[ "$(uname -m)" = x86_64 ] || {
	echo "SKIP: the ABI check covers x86_64 (the baseline's architecture)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

copy() {
	mkdir -p "$tmp/$1"
	cp -r "$src/include" "$src/src" "$tmp/$1/"
	rm -f "$tmp/$1/src/core/fault_inject.c"
}
# objects VARIANT: compile the copy's library sources.
objects() {
	(cd "$tmp/$1" && for f in src/*.c src/*/*.c; do
		cc -c -fPIC -g -O0 -std=gnu11 -D_GNU_SOURCE -mcx16 -pthread \
			-fvisibility=hidden -include src/public.h -Iinclude -Isrc \
			-Isrc/core -Isrc/state -Isrc/map -Isrc/purge -Isrc/cache \
			-I"$build" "$f" -o "${f%.c}.o" || exit 1
	done)
}
# link VARIANT [MAP]
link() {
	cc -shared -g -pthread -o "$tmp/$1/libvrange.so" "$tmp/$1"/src/*.o "$tmp/$1"/src/*/*.o \
		-Wl,-soname,libvrange.so.0 \
		-Wl,--version-script="${2:-$tmp/$1/src/libvrange.map}"
}

copy base
copy inserted
sed -i '/^struct vrange_cache_stats {/a\	uint64_t inserted_by_test;' \
	"$tmp/inserted/include/vrange.h"
copy appended
sed -i '/^struct vrange_stats {/,/^};/s/^};/\tuint64_t appended_by_test;\n};/' \
	"$tmp/appended/include/vrange.h"
copy swapped
sed -i '/int32_t prio;.*vrange_region_set_priority/{h;d}; /uint32_t cost;.*vrange_region_set_cost/G' \
	"$tmp/swapped/include/vrange.h"
grep -q inserted_by_test "$tmp/inserted/include/vrange.h"
grep -q appended_by_test "$tmp/appended/include/vrange.h"
grep -A1 'uint32_t cost;.*vrange_region_set_cost' "$tmp/swapped/include/vrange.h" |
	grep -q 'int32_t prio;'

# Two at a time: the machine has two cores and other work.
objects base & p1=$!
objects inserted & p2=$!
wait $p1 && wait $p2
objects appended & p1=$!
objects swapped & p2=$!
wait $p1 && wait $p2
link base
link inserted
link appended
link swapped
sed '/^[[:space:]]*vrange_region_size;/d' "$tmp/base/src/libvrange.map" \
	>"$tmp/removed.map"
mkdir -p "$tmp/removed"
cc -shared -g -pthread -o "$tmp/removed/libvrange.so" "$tmp/base"/src/*.o "$tmp/base"/src/*/*.o \
	-Wl,-soname,libvrange.so.0 -Wl,--version-script="$tmp/removed.map"

abidw --headers-dir "$tmp/base/include" --drop-private-types \
	--no-corpus-path --no-comp-dir-path --no-show-locs \
	--out-file "$tmp/base.abi" "$tmp/base/libvrange.so"

status=0
# expect VARIANT RESULT(0 pass, 1 fail) WHAT
expect() {
	rc=0
	"$src/scripts/check-abi" "$tmp/$1/libvrange.so" "$tmp/base.abi" \
		"$tmp/base/include" "$tmp/base/src/libvrange.map" \
		>"$tmp/$1.out" 2>&1 || rc=$?
	if [ "$rc" -eq "$2" ]; then
		echo "ok: $3: check-abi exit $rc"
	else
		echo "FAIL: $3: check-abi exit $rc, expected $2"
		status=1
	fi
	sed 's/^/    /' "$tmp/$1.out"
}
expect base 0 "the unchanged library"
expect inserted 1 "a field inserted inside struct vrange_cache_stats"
expect removed 1 "vrange_region_size dropped from the version script"
expect appended 0 "a field appended to struct vrange_stats"
expect swapped 1 "prio and cost swapped in struct vrange_region_inline"
exit $status
