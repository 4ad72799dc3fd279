#!/usr/bin/env bash
# Style and type checks, no build needed (scripts/test.sh runs them first):
#   ruff    lint of python/, scripts/, bench/ and docs/site/ ([tool.ruff] in pyproject.toml)
#   mypy    the cuarrow package's sources ([tool.mypy]), with the binding's
#           committed stub python/cuarrow/_cuarrow.pyi for cuarrow._cuarrow
#   format  clang-format (.clang-format) over every C++ file and ruff format:
#           only with CUARROW_LINT_FORMAT=1 until the tree is reformatted
#
#   scripts/lint.sh              the checks above
#   scripts/lint.sh stub         with cuarrow installed: the committed stub is
#                                what nanobind's stubgen makes of the installed
#                                extension (after changing the binding, run:)
#   scripts/lint.sh update-stub  rewrite the committed stub from the installed
#                                extension
#
# The tools' versions are pinned in python/requirements-lint.txt and
# installed by scripts/install-deps.sh (clang-format from Debian).
set -euo pipefail
cd "$(dirname "$0")/.."

# FLIP to 1 in the commit that reformats the tree (clang-format -i over the
# files below); CUARROW_LINT_FORMAT=0/1 overrides it.
format_default=1
check_format=${CUARROW_LINT_FORMAT:-$format_default}

stub=python/cuarrow/_cuarrow.pyi

generate_stub() {  # $1: output file.  Imports the installed cuarrow._cuarrow (no driver needed).
  # Run outside the source tree, so that `cuarrow` is the installed package.
  (cd / && python3 -m nanobind.stubgen -q -P -p "$OLDPWD/python/stubgen-patterns.txt" -m cuarrow._cuarrow -o "$1")
}

case "${1:-}" in
  stub)
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    generate_stub "$tmp/_cuarrow.pyi"
    if ! diff -u "$stub" "$tmp/_cuarrow.pyi"; then
      echo "lint: $stub is not the stub of the installed extension (diff above: - committed, + generated);" \
        "after changing the binding, install it and run scripts/lint.sh update-stub" >&2
      exit 1
    fi
    echo "lint: $stub is current"
    exit 0 ;;
  update-stub)
    generate_stub "$PWD/$stub"
    echo "lint: wrote $stub"
    exit 0 ;;
  "") ;;
  *) echo "usage: scripts/lint.sh [stub|update-stub]" >&2; exit 2 ;;
esac

for tool in ruff mypy; do
  python3 -m "$tool" --version >/dev/null 2>&1 ||
    { echo "lint: $tool is missing: scripts/install-deps.sh installs it" >&2; exit 1; }
done

echo "--- ruff $(python3 -m ruff --version | cut -d' ' -f2)"
python3 -m ruff check python scripts bench docs/site
echo "--- mypy $(python3 -m mypy --version | cut -d' ' -f2)"
python3 -m mypy

if [ "$check_format" = 1 ]; then
  echo "--- $(clang-format --version)"
  git ls-files -z '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' '*.cc' '*.c' | xargs -0 clang-format --dry-run -Werror
  echo "--- ruff format"
  python3 -m ruff format --check python scripts bench docs/site
else
  echo "--- clang-format and ruff format: not checked (CUARROW_LINT_FORMAT=1 checks them)"
fi
