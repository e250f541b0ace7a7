"""mkdocs hook: the C++ API page lists every public header (include/encore/*.hpp) with its opening comment,
read at build time, so the page follows the headers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

MARKER = "<!-- public headers -->"
INCLUDE = Path(__file__).resolve().parents[1] / "include" / "encore"


def header_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[3:] if line.startswith("// ") else line[2:])
    return "\n".join(lines).strip()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    sections = []
    for path in sorted(INCLUDE.glob("*.hpp")):
        sections.append(f"## `#include <encore/{path.name}>`\n\n```cpp\n{header_comment(path)}\n```\n")
    return markdown.replace(MARKER, "\n".join(sections))
