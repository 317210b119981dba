"""Sphinx configuration of django-delayq's documentation.

Build it (tests/test_docs.py does the same, so ./runtests and CI build it too):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

autodoc imports django_delayq, so Django is set up first with the test settings (no
Redis or database is touched by importing the modules).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import django_delayq  # noqa: E402

project = "django-delayq"
author = "django-delayq developers"
copyright = "django-delayq developers"
release = django_delayq.__version__
version = release

extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Names that the type hints mention but the docs do not document.
nitpicky = False

exclude_patterns = ["_build"]
# Furo (the docs extra): maintained, light and dark, readable on a phone. It ships its CSS
# and JavaScript and uses the system's fonts, so the build and the pages need nothing
# downloaded (tests/test_docs.py checks the pages name no remote file).
html_theme = "furo"
html_theme_options = {
    "navigation_with_keys": True,
}
html_static_path: list[str] = []
html_title = f"django-delayq {release}"
