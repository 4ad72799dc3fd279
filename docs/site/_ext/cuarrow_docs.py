"""Sphinx helpers of cuarrow's documentation site.

- Pages named in ``cuarrow_doctest_pages`` (conf.py) have their ">>>" code
  blocks run by ``sphinx-build -b doctest``: the walkthrough stays one
  Markdown file (python/tests/walkthrough.md, also run by pytest), not a copy
  rewritten with doctest directives.  Blocks from the named heading on are
  skipped where no real GPU with Numba can run a kernel.
- ``<address>`` as the whole expected output matches any positive integer (a
  device address), as in python/tests/test_walkthrough.py.
- The binding's properties (``cuarrow._cuarrow``), whose nanobind docstring
  is only ``(self) -> T``, take their type from the committed stub
  python/cuarrow/_cuarrow.pyi; classes made only by factories (their
  ``__init__`` takes ``*args, **kwargs`` to refuse them) show no signature.
- The ``cuarrow-headers`` directive lists the public C++ headers with their
  top comments (no Doxygen).
"""

from __future__ import annotations

import ast
import doctest
import pathlib
import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.ext import doctest as sphinx_doctest
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

GPU_ONLY = "EMULATED or not HAVE_NUMBA"


def _mark_doctests(app: Sphinx, doctree: nodes.document) -> None:
    pages: dict[str, str] = app.config.cuarrow_doctest_pages
    docname = app.env.docname
    if docname not in pages:
        return
    gpu_heading = pages[docname]
    gpu_only = False
    for node in doctree.findall(nodes.Element):
        if isinstance(node, nodes.title) and node.astext().startswith(gpu_heading):
            gpu_only = True
        if not isinstance(node, nodes.literal_block) or "testnodetype" in node:
            continue
        if not node.astext().lstrip().startswith(">>>"):
            continue
        node["testnodetype"] = "doctest"
        node["groups"] = ["default"]
        node["options"] = {}
        node["language"] = "pycon"
        if gpu_only:
            node["skipif"] = GPU_ONLY


class _AddressChecker(doctest.OutputChecker):
    """``<address>`` stands for any device address (a positive integer)."""

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        if want.strip() == "<address>":
            return got.strip().isdigit() and int(got) > 0
        return super().check_output(want, got, optionflags)


class DocTestBuilder(sphinx_doctest.DocTestBuilder):
    """Sphinx's doctest builder with the ``<address>`` placeholder."""

    def test_group(self, group: Any) -> bool:
        self.test_runner._checker = _AddressChecker()
        return super().test_group(group)


def _stub_property_types(stub: pathlib.Path) -> dict[str, str]:
    """``Class.name`` -> the annotation of each property in the stub."""
    types: dict[str, str] = {}
    for cls in ast.parse(stub.read_text(encoding="utf-8")).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if (
                isinstance(fn, ast.FunctionDef)
                and fn.returns is not None
                and any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            ):
                types[f"{cls.name}.{fn.name}"] = ast.unparse(fn.returns)
    return types


_NB_PROPERTY_DOC = re.compile(r"^\(self\) -> .*$")


def _binding_property_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    prefix = "cuarrow._cuarrow."
    if what != "property" or not name.startswith(prefix):
        return
    stub = pathlib.Path(app.config.cuarrow_source_root) / "python" / "cuarrow" / "_cuarrow.pyi"
    types = app.env.temp_data.setdefault("cuarrow_stub_types", None) or _stub_property_types(stub)
    app.env.temp_data["cuarrow_stub_types"] = types
    annotation = types.get(name[len(prefix) :])
    if annotation is None:
        return
    rest = [line for line in lines if not _NB_PROPERTY_DOC.match(line)]
    while rest and not rest[0].strip():
        rest.pop(0)
    lines[:] = [f"``{annotation}``"] + ([""] + rest if rest else [])


def _factory_only_class_signature(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, signature: str | None, return_annotation: str | None
) -> tuple[str, str | None] | None:
    if what == "class" and signature == "(*args, **kwargs)":
        return "", return_annotation
    return None


def _top_comment(path: pathlib.Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            lines.append(stripped[2:].removeprefix(" "))
        elif stripped.startswith("/*") or stripped.startswith("*"):
            lines.append(stripped.lstrip("/*").rstrip("*/").strip())
        else:
            break
    return "\n".join(lines).strip()


class HeadersDirective(SphinxDirective):
    """The public headers under include/ with their top comments."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        include = pathlib.Path(self.config.cuarrow_source_root) / "include"
        items = nodes.definition_list()
        for path in sorted(include.rglob("*.h*")):
            self.env.note_dependency(str(path))
            name = path.relative_to(include).as_posix()
            item = nodes.definition_list_item()
            item += nodes.term("", "", nodes.literal(name, f"#include <{name}>"))
            body = nodes.definition()
            comment = _top_comment(path)
            if not comment:
                # A warning fails the build (-W): every public header says
                # what it holds.
                logger.warning("%s: a public header without a top comment", path, location=self.get_location())
            for para in comment.split("\n\n"):
                text = " ".join(para.split())
                body += nodes.paragraph(text, text)
            item += body
            items += item
        return [items]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("cuarrow_doctest_pages", {}, "env")
    app.add_config_value("cuarrow_source_root", "", "env")
    app.connect("doctree-read", _mark_doctests)
    app.connect("autodoc-process-docstring", _binding_property_docstring)
    app.connect("autodoc-process-signature", _factory_only_class_signature)
    app.add_builder(DocTestBuilder, override=True)
    app.add_directive("cuarrow-headers", HeadersDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
