"""bench/RESULTS.md is one file of sections, each written by one benchmark and titled "# bench/<script>...". A
benchmark replaces its own section and keeps everyone else's."""
import pathlib


def _read(path) -> str:
    p = pathlib.Path(path)
    return p.read_text(encoding="utf-8") if p.exists() else ""


def write_section(path, lines: list[str]) -> None:
    """Replace the section whose title is lines[0] (up to the next '# bench/' title), or append it."""
    old, title = _read(path), lines[0]
    block = "\n".join(lines).rstrip("\n") + "\n"
    i = old.find("\n" + title + "\n")
    if i >= 0:
        j = old.find("\n# bench/", i + 1)
        new = old[:i + 1] + block + ("\n" + old[j + 1:] if j >= 0 else "")
    else:
        new = old.rstrip("\n") + "\n\n" + block
    pathlib.Path(path).write_text(new, encoding="utf-8")


def write_head(path, lines: list[str]) -> None:
    """Replace the file's first section (everything before the second '# bench/' title), keeping the others."""
    old = _read(path)
    i = old.find("\n# bench/", 1)
    block = "\n".join(lines).rstrip("\n") + "\n"
    pathlib.Path(path).write_text(block + ("\n" + old[i + 1:] if i >= 0 else ""), encoding="utf-8")
