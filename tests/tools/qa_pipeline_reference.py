"""transformers 4.57's pipeline("question-answering") as the oracle of tests/python/test_question_answerer.py.

transformers 5.x no longer ships that pipeline, so scripts/setup.sh installs transformers 4.57 (--no-deps) into its
own directory (build/reference/transformers-4.57); the test runs this script in a subprocess with that directory
first on PYTHONPATH, so the test process keeps transformers 5.23. It reads a JSON list of {"model": dir, "calls":
[kwargs, ...]} on stdin and prints, as JSON, the version it ran and per model the pipeline's result for each call (an
exception's type and message instead when the pipeline raises).
"""
import json
import os
import sys
import types
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
warnings.filterwarnings("ignore")

# transformers 4.57 pins tokenizers<=0.23.0 and huggingface-hub<1.0 at import (dependency_versions_check); the installed
# ones are tokenizers 0.23.3 (a patch release of the same minor) and huggingface-hub 2.x, which the pipeline runs with
# (the test checks it answers). The pin check alone is skipped; dep_version_check (used by optional integrations only)
# stays a no-op.
_pins = types.ModuleType("transformers.dependency_versions_check")
_pins.dep_version_check = lambda pkg, hint=None: None
sys.modules[_pins.__name__] = _pins
# The installed `kernels` package (Hugging Face's hub kernels, a dependency of transformers 5.x) is newer than
# transformers 4.57's integration expects: importing it there raises "Either a revision or a version must be
# specified" while the pipeline module loads. The pipeline runs on the CPU without hub kernels: hide the package
# from 4.57 (`from kernels import ...` then raises ImportError, which 4.57 handles as "not installed").
sys.modules["kernels"] = None
import transformers  # noqa: E402


def main():
    if not transformers.__version__.startswith("4.57."):
        raise SystemExit(f"expected transformers 4.57 first on sys.path, got {transformers.__version__} from "
                         f"{transformers.__file__}")
    results = []
    for request in json.load(sys.stdin):
        pipe = transformers.pipeline("question-answering", model=request["model"], tokenizer=request["model"],
                                     device="cpu")
        assert pipe.tokenizer.is_fast, "the oracle must run the fast-tokenizer path encore mirrors"
        results.append([])
        for kwargs in request["calls"]:
            try:
                results[-1].append({"result": pipe(**kwargs)})
            except Exception as e:  # noqa: BLE001 - reported to the test, which compares it with encore's error
                results[-1].append({"error": type(e).__name__, "message": str(e)})
    json.dump({"version": transformers.__version__, "file": transformers.__file__, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
