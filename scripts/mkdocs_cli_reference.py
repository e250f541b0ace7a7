"""mkdocs hook: the command-line reference is read from the `encore` binary at build time, so it cannot drift.

In a page, `<!-- encore commands -->` becomes a table of every subcommand `encore --help` lists (name, one-line
summary, link to the page's section `## encore CMD`), and `<!-- encore help: CMD -->` becomes the verbatim output
of `encore CMD --help` (every option, its type, range and default). The build fails when the page that holds the
table (docs/cli.md) lacks a section for a subcommand the binary has, or names one it does not have: a new command
cannot ship undocumented.

The binary is `$ENCORE_BIN`, else `build/encore` (built by scripts/setup.sh). Without it the build stops and says
so: a site built without the reference would look complete and be wrong.

tests/python/test_docs.py imports this module to check the same things against the binary from pytest, and that
every option written by hand in the docs (examples and prose) is one the binary accepts.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMANDS_MARKER = "<!-- encore commands -->"
HELP_MARKER = re.compile(r"<!-- encore help: ([a-z0-9_-]+) -->")


class CliReferenceError(Exception):
    pass


def binary() -> Path:
    path = Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise CliReferenceError(
            f"the CLI reference is generated from the encore binary, and {path} does not exist or is not executable: "
            "build it first (bash scripts/setup.sh) or point ENCORE_BIN at one")
    return path


def run_help(*args: str, bin_path: Path | None = None) -> str:
    """`encore ARGS --help`, with argv[0] = "encore" so the usage line does not show a build path."""
    exe = bin_path or binary()
    res = subprocess.run(["encore", *args, "--help"], executable=str(exe), capture_output=True, text=True,
                         timeout=60, env={**os.environ, "NO_COLOR": "1"})
    if res.returncode != 0:
        raise CliReferenceError(f"`{exe} {' '.join(args)} --help` exited {res.returncode}: {res.stderr.strip()}")
    return res.stdout.rstrip() + "\n"


def section(help_text: str, title: str) -> list[str]:
    """The lines of one CLI11 help section ("Options:", "Subcommands:", "Positionals:")."""
    lines, inside = [], False
    for line in help_text.splitlines():
        if line.strip() == title:
            inside = True
        elif inside and line and not line.startswith(" "):
            break
        elif inside and line:
            lines.append(line)
    return lines


def subcommands(bin_path: Path | None = None) -> dict[str, str]:
    """name -> one-line summary, in the order `encore --help` lists them."""
    out = {}
    for line in section(run_help(bin_path=bin_path), "Subcommands:"):
        m = re.match(r"^  (\S+)\s+(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def option_names(help_text: str) -> set[str]:
    """Every option spelling in a help text: `-i,--input TEXT` gives {"-i", "--input"}."""
    names: set[str] = set()
    for line in section(help_text, "Options:"):
        m = re.match(r"^  (-\S+)", line)  # option lines start at column 2; wrapped descriptions further right
        if m:
            names.update(n for n in m.group(1).split(",") if n.startswith("-"))
    return names


def anchor(command: str) -> str:
    return "encore-" + command  # the toc extension's slug of "## encore CMD"


def render(markdown: str, bin_path: Path | None = None) -> str:
    """The page with its markers replaced; raises CliReferenceError when page and binary disagree."""
    has_table = COMMANDS_MARKER in markdown
    documented = HELP_MARKER.findall(markdown)
    if not has_table and not documented:
        return markdown
    commands = subcommands(bin_path)
    unknown = [c for c in documented if c not in commands]
    if unknown:
        raise CliReferenceError(f"the docs show the help of {unknown}, which `encore --help` does not list")
    if has_table:
        missing = [c for c in commands if c not in documented]
        if missing:
            raise CliReferenceError(
                f"`encore --help` lists {missing}, which the CLI reference page does not document: add a section "
                f"'## encore CMD' with '<!-- encore help: CMD -->' for each")
        rows = ["| command | what it does |", "|---|---|"]
        for c, summary in commands.items():
            cell = summary.replace("|", r"\|")
            rows.append(f"| [`{c}`](#{anchor(c)}) | {cell} |")
        markdown = markdown.replace(COMMANDS_MARKER, "\n".join(rows))

    def help_block(m: re.Match[str]) -> str:
        command = m.group(1)
        return f"`encore {command} --help`:\n\n```text\n" + run_help(command, bin_path=bin_path) + "```"

    return HELP_MARKER.sub(help_block, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    try:
        return render(markdown)
    except CliReferenceError as e:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_uri}: {e}") from e
