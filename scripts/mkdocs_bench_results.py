"""mkdocs hook: bench/RESULTS.md, the benchmarks' last recorded runs, is published as the page
benchmark_results.md, read at build time, so the site shows exactly what the file holds (no copy to go stale).
Its headings move down one level under a title of the page's own; nothing else is changed."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "RESULTS.md"
PAGE = "benchmark_results.md"

INTRO = """# Benchmark results

This page is `bench/RESULTS.md` as it is in the repository, included when the site is built. Each section says
which command produced it, when, on which commit and in what machine state: the figures are those runs' on
this project's 2-vCPU build machine (AMD EPYC, AVX-512, no AMX), not guarantees for other hardware. Compare
ratios measured in one run, never absolute times across runs. What each benchmark does and how to run it:
[Benchmarks](benchmarks.md).

"""


def demoted(markdown: str) -> str:
    out, fence = [], False
    for line in markdown.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fence = not fence
        out.append("#" + line if not fence and re.match(r"^#{1,5} ", line) else line)
    return "\n".join(out) + "\n"


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=INTRO + demoted(RESULTS.read_text(encoding="utf-8"))))
    return files
