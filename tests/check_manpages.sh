#!/bin/sh
# The manual is complete and well-formed: every function libvrange.so
# exports or include/vrange.h declares has a page that names it, every page
# passes `mandoc -Tlint` without a word, `meson install` puts the pages
# where man(1) looks, and every reference to a project page resolves.
# The function list is discovered, not written down: a new function without
# a page fails here.
set -eu
build=$1 lib=$2 header=$3 src=$4 mandir=$5

for tool in mandoc man nm meson; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "SKIP: $tool is not installed (scripts/test installs it)"
		exit 77
	}
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() {
	echo "FAIL: $*"
	status=1
}

# 1. Every source page lints clean: no output at all, exit status 0; and
# groff, which renders them for man(1), has no warning either.
for page in "$src"/*.[1-9]; do
	if ! mandoc -Tlint "$page" >"$tmp/lint" 2>&1 || [ -s "$tmp/lint" ]; then
		fail "mandoc -Tlint $(basename "$page"):"
		cat "$tmp/lint"
	fi
	if command -v groff >/dev/null 2>&1 &&
		{ ! groff -man -Tutf8 -ww -z "$page" >"$tmp/lint" 2>&1 || [ -s "$tmp/lint" ]; }; then
		fail "groff -ww $(basename "$page"):"
		cat "$tmp/lint"
	fi
done

# 2. Install the manual into a scratch root, as a package build would.
if ! meson install -C "$build" --no-rebuild --quiet --tags man \
	--destdir "$tmp/root" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	echo "FAIL: meson install --destdir"
	exit 1
fi
manpath=$tmp/root$mandir
[ -d "$manpath/man3" ] || { echo "FAIL: nothing installed under $mandir/man3"; exit 1; }

# 3. The functions: exported by the library, declared by the header.
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' |
	grep -E '^vrange' >"$tmp/functions" || true
grep -Eo '^[a-z][a-z_ ]*[ *]+(vrange|vrange_[a-z0-9_]+)\(' "$header" |
	grep -Eo '(vrange|vrange_[a-z0-9_]+)\($' | tr -d '(' >>"$tmp/functions"
sort -u "$tmp/functions" -o "$tmp/functions"
[ -s "$tmp/functions" ] || { echo "FAIL: no function found in $lib or $header"; exit 1; }

# The NAME section of an installed page (links followed), one word a line.
page_names() {
	sed -n '/^\.SH NAME/,/^\.SH /p' "$1" | sed '1d;$d' | sed 's/\\-.*//' |
		tr ', ' '\n\n' | sed '/^$/d'
}

# man -w finds the page, in the section asked for, and the page names it.
check_page() { # section name
	path=$(man -M "$manpath" -w "$1" "$2" 2>/dev/null) || {
		fail "man -M DESTDIR$mandir -w $1 $2 finds no page"
		return 0
	}
	case $path in
	"$manpath"/man"$1"/*) ;;
	*) fail "$2($1) found outside the installed tree: $path"; return 0 ;;
	esac
	page_names "$path" | grep -qx "$2" ||
		fail "$path does not name $2 in its NAME section"
}

count=0
while read -r fn; do
	check_page 3 "$fn"
	count=$((count + 1))
done <"$tmp/functions"
check_page 7 libvrange
check_page 7 libvrange-ashmem
check_page 1 vrangectl

# 4. References to project pages resolve in the installed tree.
sed 's/\\-/-/g' "$src"/*.[1-9] | grep -o '\(lib\)\{0,1\}vrange[a-z0-9_-]* ([1-9])' |
	sort -u | sed 's/[()]//g' >"$tmp/refs"
while read -r name section; do
	man -M "$manpath" -w "$section" "$name" >/dev/null 2>&1 ||
		fail "a page refers to $name($section), which is not installed"
done <"$tmp/refs"

# 5. Every environment variable the library or the shim reads (they read
# theirs with secure_getenv; test hooks use getenv) is documented.
grep -rhoE 'secure_getenv\("VRANGE_[A-Z0-9_]+"\)' "$src/../src" "$src/../shim" |
	grep -oE 'VRANGE_[A-Z0-9_]+' | sort -u >"$tmp/env"
while read -r var; do
	cat "$src/libvrange.7" "$src/libvrange-ashmem.7" | grep -qE "^\.BI? $var(=| |\$)" ||
		fail "$var is read by the library but not described in libvrange(7) or libvrange-ashmem(7)"
done <"$tmp/env"

[ $status -eq 0 ] &&
	echo "$count functions, each with a page; $(ls "$src"/*.[1-9] | wc -l) pages lint clean and install under $mandir"
exit $status
