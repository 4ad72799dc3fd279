"""Sphinx configuration of cuarrow's documentation site (scripts/docs.sh builds it).

The pages are MyST Markdown; most of them include the Markdown files that
live beside the code (README.md, python/README.md, docs/*.md) rather than
copying their text.  The API reference is generated from the installed
cuarrow package's docstrings and the binding's stub.
"""

from __future__ import annotations

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE / "_ext"))

project = "cuarrow"
author = "the cuarrow developers"
copyright = "the cuarrow developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "cuarrow_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "cuarrow"

# The API reference: the installed package (scripts/docs.sh: the site copy on
# PYTHONPATH).  Signatures come from the docstrings and the binding's stub.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = True

# Doctests run on the host emulation of the CUDA driver unless a GPU is used
# on purpose; the steps that run a Numba kernel need a real GPU and are
# skipped there (cuarrow_doctest_pages marks them).
os.environ.setdefault("CUARROW_CUDA_DRIVER", "emulated")
# Only the pages' examples are doctests: the ">>>" fragments in docstrings
# (api.md) use names their docstring only describes.
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import importlib.util as _ilu
import os as _os
EMULATED = _os.environ.get("CUARROW_CUDA_DRIVER") == "emulated"
HAVE_NUMBA = _ilu.find_spec("numba") is not None
"""

# Pages whose indented ">>>" blocks are doctests (the walkthrough, kept as
# python/tests/walkthrough.md), and the heading from which on a real GPU
# with Numba is needed.
cuarrow_doctest_pages = {"walkthrough": "Numba integration"}
cuarrow_source_root = str(ROOT)
