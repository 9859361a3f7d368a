# SPDX-License-Identifier: MIT
"""Run the module's pytest suite (meson test --suite python).

Exits 77 (meson's "skipped") when pytest is not installed.  PYTHONPATH,
set by meson, points at the freshly built module.
"""
import os
import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed (python3-pytest): skipped")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", here] + sys.argv[1:]))
