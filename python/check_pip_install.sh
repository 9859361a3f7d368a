#!/bin/sh
# pip install --no-build-isolation of the source tree into a fresh virtual
# environment (offline: Debian's python3-mesonpy builds it), then import
# the module from there and use it.  Run by scripts/test.
set -eu
cd "$(dirname "$0")/.."
py=${PYTHON:-/usr/bin/python3}
venv=$(mktemp -d "${TMPDIR:-/tmp}/vrange-venv-$$.XXXXXX")
trap 'rm -rf "$venv"' EXIT INT TERM
"$py" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --no-build-isolation --no-index . >"$venv/pip.log" 2>&1 || {
	cat "$venv/pip.log"
	exit 1
}
rm -f .mesonpy-native-file.ini
cd "$venv"
"$venv/bin/python" - <<'PY'
import vrange
assert vrange.__file__.startswith(__import__("sys").prefix), vrange.__file__
with vrange.Region(4096) as r:
    memoryview(r)[0] = 7
    r.mark_volatile()
    assert r.mark_nonvolatile() in (vrange.INTACT, vrange.PURGED)
print("pip install: vrange", vrange.__version__, "from", vrange.__file__)
PY
