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
    "_memory",
    "_numba",
    "_streams",
    "_io",
    "_arrays",
    "_convert",
    "cuda",
    "demo",
]

# Imports of a higher layer made on use, inside a function: the Numba
# interop is an optional plug-in that Context and CudaBuffer load only when
# asked for it (importing numba is slow and needs a GPU).
DEFERRED = {("_memory", "_numba")}

PACKAGE = pathlib.Path(cuarrow.__file__).parent


def _cuarrow_imports(path):
    """(module, at top level) for each cuarrow module that `path` imports."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
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
        out.extend((n, id(node) in top) for n in names)
    return out


def test_every_module_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS), "place new modules in LAYERS (and in cuarrow/cuda.py's list)"


@pytest.mark.parametrize("module", LAYERS)
def test_imports_only_lower_layers(module):
    level = LAYERS.index(module)
    for imported, at_top in _cuarrow_imports(PACKAGE / f"{module}.py"):
        if imported == "_cuarrow":
            continue
        if not at_top and (module, imported) in DEFERRED:
            continue
        assert imported in LAYERS, f"{module} imports cuarrow.{imported}, which has no layer"
        assert LAYERS.index(imported) < level, f"{module} imports cuarrow.{imported}, a layer above it"


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
