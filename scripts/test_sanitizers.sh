#!/usr/bin/env bash
# The sanitized tiers of scripts/test.sh (issue 17). Each builds only what it runs, in its own tree:
#   build-asan/  GCC -fsanitize=address,undefined: the library, the CLI, ctest, the Python module.
#                ctest; the bad-input suite's and test_cli's CLI cases through the sanitized CLI; a Python
#                subset through the sanitized module (libasan preloaded into python).
#   build-tsan/  GCC -fsanitize=thread: the library and ctest's binary; the tests where threads meet (the
#                engine and batcher, concurrent encode of one SentenceEncoder and one Tokenizer, the allocator).
#                libgomp is not built with TSan, so it cannot see OpenMP's barriers: these run with one OpenMP
#                thread per caller (ENCORE_NUM_THREADS=1, OMP_NUM_THREADS=1), the concurrency is the tests' own
#                std::threads and the engine's thread. Tests that set two OpenMP threads themselves
#                (Tokenizer.ParallelBatch*: encode_batch on parallel_for) are left out: TSan reports libgomp's
#                workers against the caller's stack (a race TSan cannot rule out without seeing libgomp's barrier).
# Every sanitizer report is written under build-*/sanitizer-reports/ and counted; any report fails the tier.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh  # PY, MODEL_DIR, LAUNCHER
COMMON=(-G Ninja "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=None -DENCORE_BUILD_BENCH=OFF -DENCORE_INSTALL=OFF
        -DENCORE_WITH_MPI=OFF -DPython3_EXECUTABLE="$(command -v "$PY")" -DENCORE_DEFAULT_MODEL_DIR="$MODEL_DIR")

# Prints the reports a run left in $1 and fails when there is any.
check_reports() {
  local dir=$1 what=$2 n
  n=$(find "$dir" -type f | wc -l)
  echo "$what: $n sanitizer report(s)"
  if [ "$n" -gt 0 ]; then
    find "$dir" -type f | head -5 | while read -r f; do echo "--- $f"; head -60 "$f"; done
    return 1
  fi
}

tier=${1:-all}

if [ "$tier" = all ] || [ "$tier" = asan ]; then
  echo "== asan+ubsan build (build-asan: library, CLI, ctest, Python module)"
  SAN="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
  cmake -S . -B build-asan "${COMMON[@]}" -DCMAKE_CXX_FLAGS="$SAN" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
        -DENCORE_PYTHON_OUTPUT_DIR="$PWD/build-asan/python/encore" >/dev/null
  cmake --build build-asan -j "$(nproc)" --target encore_cli encore_tests _encore
  # The Python package beside the sanitized module: encore/*.py from the source tree, _encore from build-asan.
  $PY - <<'EOF'
import pathlib, shutil
shutil.copytree("python/encore", "build-asan/python/encore", dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("_encore*.so", "__pycache__", "bin"))
EOF
  reports=$PWD/build-asan/sanitizer-reports
  rm -rf "$reports" && mkdir -p "$reports"
  # Reports go to files (log_path), so a report in a process whose stderr a test swallows is still counted.
  export ASAN_OPTIONS="detect_leaks=1:log_path=$reports/asan:exitcode=86"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan:exitcode=87"

  echo "== ctest (asan+ubsan)"
  (cd build-asan && ctest --output-on-failure -j 2)
  check_reports "$reports" "ctest (asan+ubsan)"

  echo "== the bad-input suite's CLI cases through the asan+ubsan CLI"
  # The Python side of the suite runs on the normal module; every `encore` it starts is the sanitized one.
  # (test_cli.py is not run here: it compares the CLI's numbers with the normal module's at 1e-7, and the -O1
  # sanitized build rounds differently, by up to 2e-7.)
  ENCORE_BIN="$PWD/build-asan/encore" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
    $PY -m pytest -q -p no:cacheprovider tests/python/test_bad_inputs.py -k "not test_python"
  check_reports "$reports" "CLI (asan+ubsan)"

  echo "== Python subset through the asan+ubsan module (libasan preloaded)"
  # Python itself and its other extensions (torch, tokenizers) are not instrumented: leak checking is off here
  # (the interpreter keeps its objects at exit); memory errors and UB in encore's code are still reported.
  # libstdc++ is preloaded too: python does not link it, and ASan resolves its __cxa_throw interceptor at start-up
  # (without it the first C++ exception aborts in the interceptor's CHECK).
  PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
  ASAN_OPTIONS="detect_leaks=0:log_path=$reports/asan:exitcode=86" LD_PRELOAD="$PRELOAD" \
    PYTHONPATH="$PWD/build-asan/python${PYTHONPATH:+:$PYTHONPATH}" \
    $PY -m pytest -q -p no:cacheprovider tests/python/test_tokenizer_parity.py tests/python/test_model_errors.py \
      tests/python/test_bad_inputs.py::test_python_errors tests/python/test_bad_inputs.py::test_python_error_classes \
      tests/python/test_bad_inputs.py::test_python_nonfinite tests/python/test_bad_inputs.py::test_python_model_format_error_names_file
  check_reports "$reports" "Python subset (asan+ubsan)"
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

if [ "$tier" = all ] || [ "$tier" = tsan ]; then
  echo "== tsan build (build-tsan: library, ctest binary)"
  cmake -S . -B build-tsan "${COMMON[@]}" -DCMAKE_CXX_FLAGS="-O1 -g -fsanitize=thread" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DENCORE_BUILD_PYTHON=OFF -DENCORE_BUILD_CLI=OFF >/dev/null
  cmake --build build-tsan -j "$(nproc)" --target encore_tests
  reports=$PWD/build-tsan/sanitizer-reports
  rm -rf "$reports" && mkdir -p "$reports"
  echo "== tsan: concurrent encode, engine, batcher, allocator (one OpenMP thread per caller)"
  # From build-tsan: the tokenizer tests read ../tests/data, as under ctest.
  (cd build-tsan && ENCORE_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    TSAN_OPTIONS="halt_on_error=1:exitcode=88:log_path=$reports/tsan" ./encore_tests \
    --gtest_filter='SentenceEncoder.Concurrent*:Engine.*:Batcher.*:Tokenizer.Concurrent*:Allocator.Concurrent*')
  check_reports "$reports" "tsan"
fi
