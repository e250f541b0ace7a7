"""The documentation agrees with the program it documents.

* docs/cli.md has a section for every command `encore --help` lists, and the site's option reference (generated
  from `encore CMD --help` by scripts/mkdocs_cli_reference.py) holds every option of every command;
* every option written by hand anywhere in README.md and docs/*.md (`encore CMD --opt ...` in examples and inline
  code, and bare `--opt` spans in a section about one command) is an option that command accepts, so a renamed
  or removed option fails here instead of leaving a stale example;
* docs/model_families.md lists exactly the model types the library registers;
* every figure docs/benchmarks.md quotes from bench/RESULTS.md is in bench/RESULTS.md;
* every page is linked from the home page, and the README links to the documentation.

The binary is $ENCORE_BIN, else build/encore (as tests/python/test_cli.py)."""
from __future__ import annotations

import functools
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from conftest import require_encore

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
import mkdocs_bench_results  # noqa: E402
import mkdocs_cli_reference as cli_ref  # noqa: E402

BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
GLOBAL_OPTIONS = {"-h", "--help", "--version"}


@pytest.fixture(scope="module")
def commands() -> dict[str, set[str]]:
    """command -> every spelling of its options, from the binary."""
    names = cli_ref.subcommands(BIN)
    assert len(names) >= 10, names  # the parser of `encore --help` found the commands
    return {c: cli_ref.option_names(cli_ref.run_help(c, bin_path=BIN)) for c in names}


# ---------------------------------------------------------------------------------------------------------------
# Finding the options the docs use
# ---------------------------------------------------------------------------------------------------------------
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
INLINE_CODE = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?:^|[\s/])encore\s+([a-z][a-z0-9_-]*)(.*)$")
OPTION = re.compile(r"^\[?(--?[A-Za-z][A-Za-z0-9_-]*)")


def without_substitutions(text: str) -> str:
    """Drops `$(...)` (balanced), whose words belong to another program."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith("$(", i):
            depth += 1
            i += 2
            continue
        if depth and text[i] == "(":
            depth += 1
        elif depth and text[i] == ")":
            depth -= 1
        elif not depth:
            out.append(text[i])
        i += 1
    return "".join(out)


def option_tokens(args: str) -> list[str]:
    try:
        tokens = shlex.split(args, comments=True)
    except ValueError:
        tokens = args.split()
    found = []
    for tok in tokens:
        m = OPTION.match(tok)
        if m and not m.group(1).endswith("-"):
            found.append(m.group(1))
    return found


def invocations(segment: str, known: set[str]) -> list[tuple[str, list[str]]]:
    """(command, options) for each `encore CMD ...` in a shell line or inline code span."""
    found = []
    for piece in re.split(r"\s(?:\|\||\||&&)\s|;", without_substitutions(segment)):
        m = COMMAND.search(piece)
        if m and m.group(1) in known:
            found.append((m.group(1), option_tokens(m.group(2))))
    return found


MARKER = re.compile(r"<!-- options of: ([a-z0-9_-]+) -->")
COMMAND_HEADING = re.compile(r"^`?encore ([a-z0-9_-]+)`?$")


def used_options(text: str, known: set[str]) -> list[tuple[int, str, str]]:
    """(line number, command, option) for every option the markdown text uses: in `encore CMD ...` invocations
    (code blocks, indented code, inline code), and in bare inline `--option` spans in a section that is about one
    command: a heading that is just `encore CMD` (docs/cli.md), or a section holding `<!-- options of: CMD -->`
    (down to its next heading of the same or a higher level). The generated `<!-- encore help: CMD -->` is not
    text and is skipped."""
    found: list[tuple[int, str, str]] = []
    context: list[tuple[int, str | None]] = [(0, None)]  # (heading level, command its section is about)
    in_fence = False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno, line = i + 1, lines[i]
        i += 1
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        is_code = in_fence or line.startswith("    ") or line.startswith("\t")
        if is_code:
            while line.rstrip().endswith("\\") and i < len(lines):  # shell continuation lines
                line = line.rstrip()[:-1] + " " + lines[i]
                i += 1
            if line.lstrip().startswith("$ "):
                line = line.lstrip()[2:]
            found += [(lineno, c, o) for c, opts in invocations(line, known) for o in opts]
            continue
        h = HEADING.match(line)
        if h:
            level = len(h.group(1))
            context = [(lv, c) for lv, c in context if lv < level]
            named = COMMAND_HEADING.match(h.group(2).strip())
            context.append((level, named.group(1) if named and named.group(1) in known else None))
            found += [(lineno, c, o) for span in INLINE_CODE.findall(line)
                      for c, opts in invocations(span, known) for o in opts]
            continue
        marker = MARKER.search(line)
        if marker:
            context[-1] = (context[-1][0], marker.group(1))
        here = next((c for _, c in reversed(context) if c), None)
        for span in INLINE_CODE.findall(line):
            calls = invocations(span, known)
            if calls:
                found += [(lineno, c, o) for c, opts in calls for o in opts]
            elif here and span.startswith("-"):
                found += [(lineno, here, o) for o in option_tokens(span)]
    return found


def doc_files() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("    ./build/encore embed -i x.txt --no-such-option", [(1, "embed", "-i"), (1, "embed", "--no-such-option")]),
        ("```\n$ cat t | encore embed -i - -q\n```", [(2, "embed", "-i"), (2, "embed", "-q")]),
        ("```\nencore quantize $(python3 -c \"print(f())\") out --dtype int8\n```", [(2, "quantize", "--dtype")]),
        ("```\nmpirun -np 2 encore train --distributed \\\n   --data d.jsonl\n```",
         [(2, "train", "--distributed"), (2, "train", "--data")]),
        ("Use `encore trace [--norm-first]`, not `pip install encore`.", [(1, "trace", "--norm-first")]),
        ("## encore serve\n\nThe `--port` flag; `--max-batch-tokens N`.\n\n## Other\n\n`--port`",
         [(3, "serve", "--port"), (3, "serve", "--max-batch-tokens")]),
        ("# Serving\n\n`--a`\n\n## Flags\n<!-- options of: serve -->\n| `--port` |\n### Sub\n`--b`\n## Next\n`--c`",
         [(7, "serve", "--port"), (9, "serve", "--b")]),
        ("## 4. `encore train --distributed` (MPI)\n\n`--bind-to socket` is mpirun's", [(1, "train", "--distributed")]),
    ],
)
def test_option_finder(text, expected):
    """The finder used below sees options where the docs write them (so the check below can fail)."""
    assert used_options(text, {"embed", "quantize", "train", "trace", "serve"}) == expected


def test_docs_use_only_existing_options(commands):
    known = set(commands)
    stale = []
    for path in doc_files():
        for lineno, command, option in used_options(path.read_text(encoding="utf-8"), known):
            if option not in commands[command] | GLOBAL_OPTIONS:
                stale.append(f"{path.relative_to(ROOT)}:{lineno}: encore {command} has no option {option}")
    assert not stale, "\n".join(stale)


# ---------------------------------------------------------------------------------------------------------------
# The generated reference
# ---------------------------------------------------------------------------------------------------------------
def test_cli_page_documents_every_command(commands):
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert cli_ref.COMMANDS_MARKER in page
    documented = cli_ref.HELP_MARKER.findall(page)
    assert sorted(documented) == sorted(commands), "one '<!-- encore help: CMD -->' per command of `encore --help`"
    for c in commands:
        assert re.search(rf"^## encore {c}$", page, re.M), f"docs/cli.md has no section '## encore {c}'"


def test_cli_reference_renders_every_option(commands):
    rendered = cli_ref.render((DOCS / "cli.md").read_text(encoding="utf-8"), bin_path=BIN)
    assert "<!-- encore" not in rendered
    sections = dict(re.findall(r"^## encore (\S+)\n(.*?)(?=^## |\Z)", rendered, re.M | re.S))
    for c, options in commands.items():
        assert f"[`{c}`](#encore-{c})" in rendered  # the summary table links each section
        missing = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", sections[c])]
        assert not missing, f"the reference of encore {c} lacks {missing}"


def test_reference_build_fails_for_an_undocumented_command(commands):
    first = next(iter(commands))
    page = (DOCS / "cli.md").read_text(encoding="utf-8").replace(f"<!-- encore help: {first} -->", "")
    with pytest.raises(cli_ref.CliReferenceError, match=first):
        cli_ref.render(page, bin_path=BIN)
    with pytest.raises(cli_ref.CliReferenceError, match="no-such-command"):
        cli_ref.render("<!-- encore help: no-such-command -->", bin_path=BIN)


# ---------------------------------------------------------------------------------------------------------------
# Examples that show their output: run them and compare
# ---------------------------------------------------------------------------------------------------------------
# Pages whose ```console blocks are transcripts: `$ command` lines and exactly what they printed (errors.md's
# blocks are annotated summaries of the bad-input suite, which checks those cases itself).
TRANSCRIPT_PAGES = ["cli.md", "model_families.md"]


def console_examples() -> list[tuple[str, int, str, list[str]]]:
    """(page, line, command, expected output lines) for each `$ command` in a ```console block of the transcript
    pages that is followed by output. A line "..." ends what is compared (the rest of the output is not shown)."""
    examples = []
    for path in [DOCS / name for name in TRANSCRIPT_PAGES]:
        lines = path.read_text(encoding="utf-8").splitlines()
        in_console = False
        current: tuple[int, str, list[str]] | None = None
        for n, line in enumerate(lines, 1):
            if re.match(r"^```console\s*$", line):
                in_console = True
                continue
            if in_console and line.startswith("```"):
                in_console = False
            if current and (not in_console or line.startswith("$ ")):
                if current[2]:
                    examples.append((path.name, *current))
                current = None
            if in_console and line.startswith("$ "):
                current = (n, line[2:], [])
            elif in_console and current:
                current[2].append(line.rstrip())
    return examples


# Files the examples read, as the page shows or describes them.
FIXTURES = {
    "train.jsonl": '{"text": "the trip was good", "label": "positive"}\n',
    "nomic-dir/config.json": '{"model_type": "nomic_bert"}\n',
}


@pytest.mark.parametrize("page, line, command, expected", console_examples(),
                         ids=[f"{e[0]}:{e[1]}" for e in console_examples()])
def test_shown_output_is_what_the_command_prints(tmp_path, page, line, command, expected):
    """A command shown with its output prints that output today (stdout and stderr, in order; the binary is the
    one under test, as `encore`)."""
    import subprocess

    for name, text in FIXTURES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PATH": f"{BIN.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ENCORE_MODEL", None)
    res = subprocess.run(["bash", "-c", "{ " + command + "\n} 2>&1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    actual = [ln.rstrip() for ln in res.stdout.splitlines()]
    shown = expected[:expected.index("...")] if "..." in expected else expected
    got = actual[:len(shown)] if "..." in expected else actual
    # int8 on a CPU without VNNI runs 7-bit activations (docs/quantization.md): its cosines sit up to the int8
    # budget (1 - cos <= 5e-3) away from the VNNI run the page shows; every other decimal within 2e-3.
    tol = 5e-3 if "int8" in command and "int8=7-bit" in _runtime_info() else 2e-3
    assert len(got) == len(shown) and all(same_line(g, s, tol) for g, s in zip(got, shown)), \
        f"docs/{page}:{line}: `{command}` now prints:\n" + "\n".join(actual[:40])


DECIMAL = re.compile(r"-?\d+\.\d+")


def same_line(got: str, shown: str, tol: float = 2e-3) -> bool:
    """Equal text; decimals (similarities, cosines) within tol, so another CPU's kernels (AVX2's fp32 GEMMs)
    print the same transcript. Everything else, integers and token ids included, must match exactly."""
    if DECIMAL.sub("#", got) != DECIMAL.sub("#", shown):
        return False
    return all(abs(float(a) - float(b)) <= tol for a, b in zip(DECIMAL.findall(got), DECIMAL.findall(shown)))


@functools.lru_cache(maxsize=None)
def _runtime_info() -> str:
    """encore.runtime_info() of the binary under test's build (its int8 field: 8-bit, 7-bit or emulated)."""
    res = subprocess.run([sys.executable, "-c", "import encore; print(encore.runtime_info())"], capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")})
    return res.stdout


def test_same_line():
    assert same_line("[ 0]   1.000  0.704", "[ 0]   1.000  0.705")
    assert not same_line("[ 0]   1.000  0.704", "[ 0]   1.000  0.710")
    assert not same_line("min 0.99 mean", "min 0.99 max")
    assert not same_line("ids [101, 7592]", "ids [101, 7593]")


def test_console_examples_are_found():
    found = {(page, command.split()[1]) for page, _, command, _ in console_examples() if command.startswith("encore")}
    assert {("cli.md", "similarity"), ("cli.md", "trace"), ("model_families.md", "info")} <= found, found


# ---------------------------------------------------------------------------------------------------------------
# Model families, benchmarks, links
# ---------------------------------------------------------------------------------------------------------------
def test_model_families_page_lists_the_registered_types():
    encore = require_encore()
    registered = set(encore.AutoModel.supported_model_types())
    page = (DOCS / "model_families.md").read_text(encoding="utf-8")
    loads = page.split("\n## What loads\n", 1)[1].split("\n## ", 1)[0]
    table = set(re.findall(r"^\| `([a-z0-9-]+)` \|", loads, re.M))
    assert table == registered, f"docs/model_families.md lists {sorted(table)}, the library registers {sorted(registered)}"


def test_readme_family_table_is_encore_info_families():
    """README's family table is exactly what `encore info --families` prints, and that lists every registered
    model_type once (so a family added to the registry must appear in both)."""
    encore = require_encore()
    out = subprocess.run([str(BIN), "info", "--families"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- encore info --families -->\n", 1)[1].split("<!-- /encore info --families -->", 1)[0]
    assert block == out.stdout, "README's family table differs from `encore info --families`: paste its output"
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", out.stdout, re.M)
    assert sorted(listed) == sorted(encore.AutoModel.supported_model_types()), listed
    bad = subprocess.run([str(BIN), "info", "--families", "/tmp"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "takes no model directory" in bad.stderr, bad.stderr


def test_python_api_page_documents_every_export():
    """Every name `encore` and its integration modules export is rendered by docs/python_api.md (a `:::`
    directive of mkdocstrings for it or its module), or, for the two functools.partial helpers, named there.
    An integration module's exports are its __all__, else its public classes (read from the source)."""
    import ast

    encore = require_encore()
    page = (DOCS / "python_api.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: (\S+)$", page, re.M))
    missing = []
    for name in encore.__all__:
        if name == "__version__":
            continue
        if name in {"train_classifier", "train_embedding"}:
            if f"`encore.{name}(" not in page:
                missing.append(f"encore.{name}")
        elif f"encore._encore.{name}" not in rendered:
            missing.append(f"encore.{name} (add '::: encore._encore.{name}')")
    for source in sorted((ROOT / "python" / "encore" / "integrations").glob("[a-z]*.py")):
        module = f"encore.integrations.{source.stem}"
        tree = ast.parse(source.read_text(encoding="utf-8"))
        exported = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        names = exported[0] if exported else [n.name for n in tree.body
                                              if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
        if module not in rendered:
            missing += [f"{module}.{n}" for n in names if f"{module}.{n}" not in rendered]
    assert not missing, f"docs/python_api.md does not render {missing}"


FIGURE = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:x|%| ms| MB| MiB)?(?!\w|\.\d)")


def test_benchmark_figures_are_in_results():
    """Between the markers every number (with its unit: x, %, ms, MB, MiB) is quoted from bench/RESULTS.md
    verbatim: a figure typed by hand or left from an older run fails."""
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    results = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- figures from bench/RESULTS.md -->(.*?)<!-- end of figures -->", page, re.S)
    assert blocks, "docs/benchmarks.md marks the figures it quotes"
    figures = [f for block in blocks for f in FIGURE.findall(block)]
    assert len(figures) >= 20, figures
    absent = sorted({f for f in figures if f not in results})
    assert not absent, f"quoted in docs/benchmarks.md but not in bench/RESULTS.md: {absent}"


def test_every_page_is_linked_from_the_home_page():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([a-z0-9_]+\.md)(?:#[^)]*)?\)", index))
    pages = ({p.name for p in DOCS.glob("*.md")} | {mkdocs_bench_results.PAGE}) - {"index.md"}
    assert pages - linked == set(), f"docs/index.md does not link {sorted(pages - linked)}"
    assert linked - pages == set()


def test_every_page_links_onwards():
    bare = [p.name for p in DOCS.glob("*.md") if not re.search(r"\]\([a-z0-9_]+\.md(?:#[^)]*)?\)", p.read_text(encoding="utf-8"))]
    assert not bare, f"pages that link to no other page: {bare}"


def test_readme_links_the_documentation():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/index.md)" in readme and "mkdocs serve" in readme
