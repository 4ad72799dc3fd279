"""The Python facade's modules form layers: each imports only the modules
below it, so there is no import cycle (cuarrow.cuda only re-exports).

A module added to python/cuarrow must be placed in LAYERS."""

import ast
import pathlib
import subprocess
import sys

import pytest

import cuarrow

# Bottom up; cuarrow._cuarrow (the binding) is below all of them.
LAYERS = [
    "_errors",
    "_driver",
    "_device",
    "_args",
    "_protocols",
    "_ipc",
    "_numba",
    "_memory",
    "_streams",
    "_io",
    "_arrays",
    "_convert",
    "ipc",
    "_share",
    "cuda",
    "demo",
    "_cli",
    "__main__",
]

PACKAGE = pathlib.Path(cuarrow.__file__).parent


def _cuarrow_imports(path):
    """Each cuarrow module that `path` imports, wherever the import is: at
    the top, in a function (at use time), under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "cuarrow":
                names = [a.name for a in node.names]
            elif node.module.startswith("cuarrow."):
                names = [node.module.split(".")[1]]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("cuarrow.")]
        out.extend(names)
    return out


def test_every_module_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS), "place new modules in LAYERS (and in cuarrow/cuda.py's list)"


@pytest.mark.parametrize("module", LAYERS)
def test_imports_only_lower_layers(module):
    level = LAYERS.index(module)
    for imported in _cuarrow_imports(PACKAGE / f"{module}.py"):
        if imported == "_cuarrow":
            continue
        assert imported in LAYERS, f"{module} imports cuarrow.{imported}, which has no layer"
        assert LAYERS.index(imported) < level, f"{module} imports cuarrow.{imported}, a layer above it"


def _find_cycle(graph):
    """A list of modules m0, m1, ..., m0 each importing the next, or None."""
    done, path = set(), []

    def visit(module):
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            cycle = visit(imported)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return None


def test_find_cycle_finds_one():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_even_at_use_time():
    # Imports inside functions count: a module that imports another on use
    # while that one imports it back (as _memory and _numba did) is a cycle
    # whatever the layer order says.
    graph = {}
    for module in LAYERS:
        imported = set(_cuarrow_imports(PACKAGE / f"{module}.py"))
        graph[module] = imported - {"_cuarrow", module}
    assert _find_cycle(graph) is None, " -> ".join(_find_cycle(graph))


@pytest.mark.parametrize("module", [m for m in LAYERS if m != "demo"])
def test_imports_alone(module):
    # In a fresh interpreter, first: a cycle would show as a partly
    # initialised module here.
    code = f"import cuarrow.{module}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_cuda_only_reexports():
    tree = ast.parse((PACKAGE / "cuda.py").read_text())
    for node in tree.body:
        assert not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)), (
            f"cuarrow.cuda defines {node.name}; define it in the private module of its job and re-export it"
        )


def test_public_names_say_cuarrow_cuda():
    from cuarrow import cuda

    for name in cuda.__all__:
        assert getattr(cuda, name).__module__ == "cuarrow.cuda", name
