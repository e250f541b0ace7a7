#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build, then the three tiers:
#   C++ (ctest): every kernel against its scalar twin, tensor core, module errors;
#   Python (pytest): layers and stacks against torch 2.13 run live, padding invariance, error messages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ctest"
(cd build && ctest --output-on-failure -j 2)
echo "== the numeric parity tier with ENCORE_KERNELS=ref (the scalar reference path end to end vs torch)"
# Every kernel, GEMMs included, on its scalar *_ref twin, compared with torch by the same tolerances; the first
# line proves the mode took effect (a misspelt variable would silently rerun the fast kernels).
ENCORE_KERNELS=ref PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" ${PYTHON:-python3} -c \
  "import encore, sys; i = encore.runtime_info(); print(i); sys.exit(0 if 'kernels=ref' in i else 1)"
ENCORE_KERNELS=ref PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" ${PYTHON:-python3} -m pytest -q \
  tests/python/test_parity_encoder.py tests/python/test_parity_attention.py tests/python/test_norms.py \
  tests/python/test_activations.py tests/python/test_parity_decoder.py tests/python/test_functional.py
echo "== pytest"
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" ${PYTHON:-python3} -m pytest -q tests/python
echo "== package (cmake --install + find_package, add_subdirectory, pkg-config: examples/cpp; pip install . in a venv)"
bash scripts/test_package.sh
echo "== stubs (python/encore/_encore/*.pyi = pybind11-stubgen of the module) and mypy --strict examples/python"
bash scripts/check_stubs.sh
echo "== docs (mkdocs build --strict)"
${PYTHON:-python3} -m mkdocs build --strict -q
echo "== fuzz (tests/fuzz: each libFuzzer harness 30 s on clang + ASan/UBSan, seed 1; longer by hand: scripts/fuzz.sh)"
FUZZ_SEED=${FUZZ_SEED:-1} bash scripts/fuzz.sh "${ENCORE_FUZZ_SECONDS:-30}"
# ASan+UBSan (build-asan: ctest, the CLI under the bad-input suite, a Python subset through the sanitized module)
# and TSan (build-tsan: the concurrent tests); prints its own == sections and fails on any sanitizer report.
bash scripts/test_sanitizers.sh
