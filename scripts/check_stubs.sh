#!/usr/bin/env bash
# The type stubs of the extension module (python/encore/_encore/*.pyi, checked in) are what pybind11-stubgen
# generates from the built module (regenerate: bash scripts/check_stubs.sh --write), and examples/python passes
# mypy --strict against them. Needs the module built (scripts/setup.sh) in python/encore.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PYTHONPATH="$PWD/python" "$PY" -m pybind11_stubgen encore._encore -o "$out" --numpy-array-use-type-var --exit-code \
  2> >(grep -v "^pybind11_stubgen - \[  INFO\]" >&2)
if [ "${1:-}" = "--write" ]; then
  rm -rf python/encore/_encore && cp -r "$out/encore/_encore" python/encore/_encore
  echo "stubs written to python/encore/_encore"
else
  diff -ru python/encore/_encore "$out/encore/_encore" ||
    { echo "the stubs differ from the module: run bash scripts/check_stubs.sh --write and commit"; exit 1; }
  echo "stubs match the module"
fi
MYPYPATH="$PWD/python" "$PY" -m mypy --strict --no-incremental examples/python
