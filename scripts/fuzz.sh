#!/usr/bin/env bash
# libFuzzer harnesses (tests/fuzz/fuzz_*.cpp), built with clang + ASan/UBSan in build-fuzz/ and run one after
# another. Each input must load, encode or answer, or fail with encore::Error; a sanitizer report, another
# exception, a harness invariant (FUZZ_ASSERT), a timeout or a runaway allocation is a finding.
#
#   bash scripts/fuzz.sh              # each harness 30 s (what scripts/test.sh runs)
#   bash scripts/fuzz.sh 600          # each harness 10 minutes
#   FUZZ_RUNS=1000000 bash scripts/fuzz.sh      # each harness a fixed number of executions
#   FUZZ_ONLY="tokenize records" bash scripts/fuzz.sh 60
#   FUZZ_SEED=1 bash scripts/fuzz.sh  # libFuzzer's mutations from a fixed seed (scripts/test.sh does this)
#
# Without FUZZ_SEED every run explores new inputs (what a long run by hand is for). The test suite fixes the seed
# so that it is a gate rather than a lottery: the same commit makes the same inputs (a faster machine just gets
# further along the same sequence), and a new finding comes from a change, not from the day's draw.
#
# Seeds: tests/fuzz/corpus/<harness> (read, never written: new inputs go to a scratch directory). A finding is
# written to tests/fuzz/crashes/<harness>-crash-<sha1>; once fixed, copy it into tests/fuzz/corpus/<harness>/ so
# every later run replays it first (a regression input). Exit status 1 when any harness found something.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
source scripts/build_env.sh  # PY, MODEL_DIR, LAUNCHER
# -O1 keeps the harnesses fast while stack traces stay readable; the whole tree carries coverage instrumentation
# (fuzzer-no-link), the harness executables link libFuzzer itself (-fsanitize=fuzzer in CMakeLists.txt).
FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B build-fuzz -G Ninja "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DENCORE_BUILD_TESTS=OFF -DENCORE_BUILD_PYTHON=OFF -DENCORE_BUILD_BENCH=OFF -DENCORE_BUILD_CLI=OFF \
      -DENCORE_INSTALL=OFF -DENCORE_WITH_MPI=OFF -DENCORE_BUILD_FUZZ=ON -DENCORE_DEFAULT_MODEL_DIR="$MODEL_DIR" >/dev/null
ALL=(safetensors config tokenizer_json tokenize records serve_request)
read -r -a HARNESSES <<<"${FUZZ_ONLY:-${ALL[*]}}"
cmake --build build-fuzz -j "$(nproc)" --target "${HARNESSES[@]/#/fuzz_}"

mkdir -p tests/fuzz/crashes
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One thread: the two cores are shared, and findings replay the same way.
export ENCORE_NUM_THREADS=1 OMP_NUM_THREADS=1
# The tokenize harness also runs the byte-level BPE and Unigram tokenizers of the tokenizer_json seeds.
export ENCORE_FUZZ_TOKENIZERS="$PWD/tests/fuzz/corpus/tokenizer_json/bpe.json:$PWD/tests/fuzz/corpus/tokenizer_json/unigram.json"
status=0
for h in "${HARNESSES[@]}"; do
  work=$(mktemp -d)
  log=$(mktemp)
  limit=(-max_total_time="$SECONDS_EACH")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
  [ -n "${FUZZ_SEED:-}" ] && limit+=(-seed="$FUZZ_SEED")
  if [ -n "${FUZZ_RUNS:-}" ]; then echo "-- fuzz_$h ($FUZZ_RUNS runs)"; else echo "-- fuzz_$h ($SECONDS_EACH s)"; fi
  mkdir -p "$work/new" "$work/tmp"
  # -timeout: one input taking over 10 s is a hang; -malloc_limit_mb: one allocation over 1 GiB is a runaway.
  if ! TMPDIR="$work/tmp" "build-fuzz/fuzz_$h" "${limit[@]}" -timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=1024 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="tests/fuzz/crashes/$h-" \
        "$work/new" "tests/fuzz/corpus/$h" >"$log" 2>&1; then
    status=1
    echo "fuzz_$h FOUND SOMETHING:"
    grep -v "^#[0-9]" "$log" | tail -60
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
  cov=$(grep -o "cov: [0-9]*" "$log" | tail -1 || true)
  echo "fuzz_$h: ${runs:-?} executions, ${cov:-cov: ?} edges, peak RSS ${rss:-?} MB, new inputs $(ls "$work/new" | wc -l)"
  rm -rf "$work" "$log"
done
exit $status
