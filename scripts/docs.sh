#!/usr/bin/env bash
# Build the documentation site (docs/site/, Sphinx + MyST) into
# build/docs/html, from scratch (-E: its local extension is not tracked) and
# with warnings as errors, then run its examples as doctests, on the host
# emulation of the CUDA driver.  Needs cuarrow importable (the
# API reference and the doctests import it: installed, or on PYTHONPATH) and
# python/requirements-docs.txt (scripts/install-deps.sh installs it).
#
#   scripts/docs.sh            HTML (build/docs/html/index.html) and doctests
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m sphinx --version >/dev/null 2>&1 ||
  { echo "docs: sphinx is missing: scripts/install-deps.sh installs python/requirements-docs.txt" >&2; exit 1; }

export CUARROW_CUDA_DRIVER=emulated
export CUARROW_EMULATED_DEVICES=${CUARROW_EMULATED_DEVICES:-2}
out=build/docs
# Outside the source tree, so that `cuarrow` is the installed package (or
# PYTHONPATH's), never the uncompiled python/cuarrow.
src=$PWD/docs/site

echo "--- sphinx $(python3 -m sphinx --version | cut -d' ' -f2): HTML, warnings as errors"
(cd / && python3 -m sphinx -q -E -W --keep-going -b html -d "$OLDPWD/$out/doctrees" "$src" "$OLDPWD/$out/html")
echo "--- doctests"
(cd / && python3 -m sphinx -q -W --keep-going -b doctest -d "$OLDPWD/$out/doctrees" "$src" "$OLDPWD/$out/doctest")
# Sphinx's summary ("N tests", "F failures in tests") as one closing line.
summary=$out/doctest/output.txt
tests=$(awk '$2 == "tests" && NF == 2 {print $1}' "$summary" | tail -n 1)
failed=$(awk '/failures in tests/ {print $1}' "$summary" | tail -n 1)
if [ -z "$tests" ] || [ "$tests" -eq 0 ]; then
  echo "docs: no doctest ran (see $summary)" >&2
  exit 1
fi
echo "docs: $out/html/index.html"
echo "doctests: $((tests - failed)) passed, $failed failed"
