#!/bin/sh
# Fails when the shared library exports anything but vrange/vrange_*, when
# the functions exported and the functions the header declares disagree, or
# when the version script and the exported versions disagree.
#
# Two kinds of export (docs/abi.md):
#  - NAME@@NODE, the default version: what a program links to now.  The
#    header declares exactly these names as functions.
#  - NAME@NODE, a compatibility version kept for binaries linked against an
#    older release.  Its name is in the header either as a function still
#    exported by default, or as a static inline wrapper (vrange_get_stats).
# The map lists every name explicitly, in the node that first exported it;
# each exported symbol carries the node the map gives it.
set -eu
lib=$1 map=$2 header=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Type A entries are the version nodes (LIBVRANGE_0.1), not symbols.
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' >"$tmp/raw"
sed 's/@.*//' "$tmp/raw" | sort -u >"$tmp/exported"
grep -Ev '^(vrange|vrange_[a-z0-9_]+)$' "$tmp/exported" >"$tmp/leaked" || true
if [ -s "$tmp/leaked" ]; then
	echo "symbols leak out of $lib:"; cat "$tmp/leaked"; exit 1
fi
grep '@@' "$tmp/raw" | sed 's/@@/ /' | sort >"$tmp/default"
grep -v '@@' "$tmp/raw" | grep '@' | sed 's/@/ /' | sort >"$tmp/compat" || true
if grep -v '@' "$tmp/raw" >"$tmp/unversioned"; then
	echo "exported without a version node:"; cat "$tmp/unversioned"; exit 1
fi

# Declarations in the header: a line starting with a type, naming vrange*( .
# A "static inline" definition is no declaration of an export.
grep -Eo '^[a-z][a-z_ ]*[ *]+(vrange|vrange_[a-z0-9_]+)\(' "$header" |
	grep -v '^static' |
	grep -Eo '(vrange|vrange_[a-z0-9_]+)\($' | tr -d '(' | sort -u >"$tmp/declared"
grep -Eo '^static inline [a-z][a-z_ ]*[ *]+(vrange|vrange_[a-z0-9_]+)\(' "$header" |
	grep -Eo '(vrange|vrange_[a-z0-9_]+)\($' | tr -d '(' | sort -u >"$tmp/inline"
cut -d' ' -f1 "$tmp/default" | sort -u >"$tmp/default_names"
if ! diff -u "$tmp/declared" "$tmp/default_names"; then
	echo "header (-) and exported symbols (+) disagree"; exit 1
fi
cut -d' ' -f1 "$tmp/compat" | sort -u >"$tmp/compat_names"
sort -u "$tmp/declared" "$tmp/inline" >"$tmp/known"
if [ -n "$(comm -23 "$tmp/compat_names" "$tmp/known")" ]; then
	echo "compatibility symbols the header no longer names:"
	comm -23 "$tmp/compat_names" "$tmp/known"; exit 1
fi

# The map: "NAME NODE" for every name listed; no patterns but "local: *".
sed 's,/\*.*\*/,,; s,#.*,,' "$map" | tr -d '\t' | awk '
	/\/\*/ { incomment = 1 }
	incomment { if ($0 ~ /\*\//) incomment = 0; next }
	/^[A-Za-z0-9_.]+ *\{/ { node = $1; next }
	/^ *(global|local): *$/ { next }
	/^ *\*; *$/ { next }
	/^ *\}/ { next }
	/;/ { n = split($0, a, ";")
	      for (i = 1; i <= n; i++) {
		      gsub(/ /, "", a[i]); if (a[i] != "") print a[i], node } }
' | sort >"$tmp/mapped"
if grep -E '[*?[]' "$tmp/mapped"; then
	echo "the map lists a pattern, not a name: list names explicitly"; exit 1
fi
sort "$tmp/default" "$tmp/compat" >"$tmp/versioned"
if ! diff -u "$tmp/mapped" "$tmp/versioned"; then
	echo "map (-) and exported versions (+) disagree"; exit 1
fi
grep -q 'LIBVRANGE_0.1' "$map" || { echo "map lacks its version node"; exit 1; }
echo "$(wc -l <"$tmp/exported") symbols exported, all declared, none leaked;" \
	"$(wc -l <"$tmp/versioned") versions as the map says" \
	"($(wc -l <"$tmp/compat") compatibility)"
