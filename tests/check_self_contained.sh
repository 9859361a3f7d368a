#!/bin/sh
# The project documents itself: nothing in it may send the reader to a
# contract in a "shared" folder beside the repository, which a clone, a
# tarball or an installed system does not have.  Build directories (they
# hold meson-private) and .git are not the project's text.
set -eu
cd "$1"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
find . -name .git -prune -o -type d -exec test -e '{}/meson-private' \; -prune \
	-o -type f -print | xargs grep -Il '\.\./shared' >"$out" || true
if [ -s "$out" ]; then
	echo "FAIL: these files refer to a folder outside the project:"
	cat "$out"
	exit 1
fi
echo "no file refers outside the project"
