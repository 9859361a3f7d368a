#!/bin/sh
# Fails when the shared library exports anything but vrange/vrange_*, or when
# the functions exported and the functions the header declares disagree.
set -eu
lib=$1 map=$2 header=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Type A entries are the version nodes (LIBVRANGE_0.1), not symbols.
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' |
	sort -u >"$tmp/exported"
grep -Ev '^(vrange|vrange_[a-z0-9_]+)$' "$tmp/exported" >"$tmp/leaked" || true
if [ -s "$tmp/leaked" ]; then
	echo "symbols leak out of $lib:"; cat "$tmp/leaked"; exit 1
fi

# Declarations in the header: a line starting with a type, naming vrange*( .
grep -Eo '^[a-z][a-z_ ]*[ *]+(vrange|vrange_[a-z0-9_]+)\(' "$header" |
	grep -Eo '(vrange|vrange_[a-z0-9_]+)\($' | tr -d '(' | sort -u >"$tmp/declared"
if ! diff -u "$tmp/declared" "$tmp/exported"; then
	echo "header (-) and exported symbols (+) disagree"; exit 1
fi
grep -q 'LIBVRANGE_0.1' "$map" || { echo "map lacks its version node"; exit 1; }
nm -D --defined-only "$lib" | grep -q 'LIBVRANGE_0.1' ||
	{ echo "exports carry no version node"; exit 1; }
echo "$(wc -l <"$tmp/exported") symbols exported, all declared, none leaked"
