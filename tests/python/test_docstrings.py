"""Every public class, function, method and property of the extension module has a docstring beyond the
signature pybind11 writes (help() and IDEs show it), and encore's Python modules document what they export."""
from __future__ import annotations

import inspect
import re

from conftest import require_encore

encore = require_encore()
_encore = encore._encore

# Inherited from pybind11 or object, documented by Python itself.
SKIP = {"__init__", "__repr__", "__len__", "__call__", "__getstate__", "__setstate__", "__eq__", "__hash__",
        "__ne__", "__new__"}


def own_text(doc: str | None) -> str:
    """The docstring without pybind11's signature lines ("name(args) -> ret" and "Overloaded function.")."""
    lines = [ln.strip() for ln in (doc or "").splitlines() if ln.strip()]
    signature = re.compile(r"^(\d+\. )?\w+\(.*\)( -> .*)?$")
    return "\n".join(ln for ln in lines if not signature.match(ln) and ln != "Overloaded function.")


def public_members(obj):
    for name, member in vars(obj).items():
        if name.startswith("_") and name not in SKIP:
            continue
        if name in SKIP:
            continue
        yield name, member


def undocumented():
    missing = []
    modules = [_encore] + [m for m in vars(_encore).values() if inspect.ismodule(m)]
    for module in modules:
        for name, member in public_members(module):
            qual = f"{module.__name__}.{name}"
            if inspect.isclass(member):
                if not own_text(member.__doc__) or own_text(member.__doc__) == member.__name__:
                    missing.append(qual)
                for attr, value in public_members(member):
                    doc = value.__doc__ if not isinstance(value, property) else (value.fget.__doc__ if value.fget else None)
                    if isinstance(value, property) and value.__doc__:
                        doc = value.__doc__
                    if not own_text(doc):
                        missing.append(f"{qual}.{attr}")
            elif callable(member) and not own_text(member.__doc__):
                missing.append(qual)
    return missing


def test_every_binding_has_a_docstring():
    missing = undocumented()
    assert not missing, f"{len(missing)} without a docstring: {missing}"


def test_python_modules_document_their_exports():
    import encore.integrations as integrations

    import encore.__main__ as main

    for obj in (encore, encore.nn, integrations, main, main.main, main.cli_path, encore.default_model_dir):
        assert own_text(obj.__doc__), obj
