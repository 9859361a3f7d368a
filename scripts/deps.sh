# shellcheck shell=sh
# Sourced by scripts/test and scripts/demo: install what is missing, and
# only then touch the network (a machine that has everything needs none).

need_pkgs() {
	missing=
	command -v meson >/dev/null 2>&1 || missing="$missing meson"
	command -v ninja >/dev/null 2>&1 || missing="$missing ninja-build"
	command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
	command -v cc >/dev/null 2>&1 || missing="$missing gcc libc6-dev"
	pkg-config --exists check 2>/dev/null || missing="$missing check"
	for extra in "$@"; do
		case $extra in
		valgrind) command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind" ;;
		clang) command -v clang >/dev/null 2>&1 || missing="$missing clang" ;;
		asan) [ -n "$(find /usr/lib -name 'libasan.so*' 2>/dev/null | head -n 1)" ] ||
			missing="$missing libasan8" ;;
		util-linux) command -v setpriv >/dev/null 2>&1 || missing="$missing util-linux" ;;
		mandoc) command -v mandoc >/dev/null 2>&1 || missing="$missing mandoc" ;;
		man-db) command -v man >/dev/null 2>&1 || missing="$missing man-db" ;;
		sqlite) pkg-config --exists sqlite3 2>/dev/null || missing="$missing libsqlite3-dev" ;;
		json-c) pkg-config --exists json-c 2>/dev/null || missing="$missing libjson-c-dev" ;;
		# the Python module and its tests, for Debian's own interpreter
		python)
			[ -n "$(find /usr/include -path '*python3*' -name Python.h 2>/dev/null | head -n 1)" ] ||
				missing="$missing python3-dev"
			for mod in pytest:python3-pytest mesonpy:python3-mesonpy numpy:python3-numpy \
				ensurepip:python3-venv pip:python3-pip; do
				/usr/bin/python3 -c "import ${mod%%:*}" >/dev/null 2>&1 ||
					missing="$missing ${mod#*:}"
			done ;;
		abigail) command -v abidiff >/dev/null 2>&1 || missing="$missing abigail-tools" ;;
		xfsprogs) command -v mkfs.xfs >/dev/null 2>&1 || missing="$missing xfsprogs" ;;
		btrfs-progs) command -v mkfs.btrfs >/dev/null 2>&1 || missing="$missing btrfs-progs" ;;
		esac
	done
	echo "$missing"
}

ensure_deps() {
	missing=$(need_pkgs "$@")
	[ -z "$missing" ] && return 0
	echo "installing:$missing"
	sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086
	$sudo apt-get install -y --no-install-recommends $missing >/dev/null 2>&1 || {
		$sudo apt-get update >/dev/null &&
			$sudo apt-get install -y --no-install-recommends $missing >/dev/null
	}
}

# setup_build DIR [meson options...]: configure once, reconfigure after.
setup_build() {
	dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
}
