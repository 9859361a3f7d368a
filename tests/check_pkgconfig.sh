#!/bin/sh
# Install into a scratch tree, then build and run a consumer the way an
# outside program would: with nothing but pkg-config's flags.
set -eu
build=$1 consumer=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT

meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >/dev/null
pc=$(find "$dest" -name vrange.pc | head -n 1)
[ -n "$pc" ] || { echo "vrange.pc not installed"; exit 1; }
pcdir=$(dirname "$pc")
prefix=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=prefix vrange)
pcflags() {
	PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR= \
		pkg-config --define-variable=prefix="$dest$prefix" "$@" vrange
}
libdir=$(pcflags --variable=libdir)
extra=
# A sanitized library needs its runtime linked into the consumer too.
if ldd "$libdir/libvrange.so" | grep -q libasan; then
	extra="-fsanitize=address,undefined"
fi
# shellcheck disable=SC2046
cc $extra -DEXPECTED_VERSION="\"$(pcflags --modversion)\"" \
	-o "$dest/consumer" "$consumer" $(pcflags --cflags --libs)
LD_LIBRARY_PATH=$libdir VRANGE_MONITOR=0 "$dest/consumer"
