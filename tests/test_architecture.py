"""The layers the design names, enforced (River gets the same from Go's compiler and depguard).

kiln's private code lives in one folder per layer (design.md, "Layout"; ADR 0008), and
arrows go down only. Each layer may import its own modules and those of the layers
:data:`ALLOWED` lists for it, and nothing else of kiln or kilnotel: a whitelist, so a new
module is placed by its folder, not by a list kept here. A name that ends in ``=`` is a
front: the package itself (``kiln._server`` re-exports Server, ServerConfig, Job), not its
parts (``kiln._server._pool``).

No module of kiln, kilnotel or kiln_pytest is in an import cycle. Python allows cycles
that a function-local or ``TYPE_CHECKING`` import hides; this test does not: every import
counts, wherever it is written.

Two more seams: the core never imports OpenTelemetry or prometheus-client (kilnotel
subscribes to its events), and the dashboard and kilnotel never reach into ``.store``,
``.pools`` or subscript ``stats()``, which is typed (ADR 0002).

Each rule is shown catching a planted violation below."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kiln", "kilnotel", "kiln_pytest")

MODEL = ("kiln._errors", "kiln._model")
CORE = (*MODEL, "kiln._aio", "kiln._events", "kiln._version")
# the public API, and the client's API (which includes its read API)
PUBLIC = ("kiln=", "kiln.events", *CORE, "kiln._client", "kiln._app")

# layer -> what it may import besides itself; the longest matching layer applies
ALLOWED: dict[str, tuple[str, ...]] = {
    "kiln._errors": (),
    "kiln._version": (),
    "kiln._aio": ("kiln._errors",),
    "kiln._model": ("kiln._errors",),
    "kiln._events": MODEL,
    # the events' public namespace (issue 43): the core's events, re-exported
    "kiln.events": ("kiln._events",),
    "kiln.stores": (*MODEL, "kiln._aio"),
    "kiln._client": (*CORE, "kiln.stores"),
    "kiln._server": (*CORE, "kiln.stores", "kiln._client"),
    "kiln._app": (*CORE, "kiln.stores", "kiln._client", "kiln._server="),
    "kiln": ("kiln._app", *CORE, "kiln._client", "kiln._server=", "kiln.stores=",
             "kiln.events"),
    # the fronts: the public API and the client's; the CLI runs a server through its
    # front, opens stores through theirs (and prints their migration scripts), and
    # launches the dashboard; contrib mounts the dashboard and runs the CLI's worker
    "kiln.web": PUBLIC,
    "kiln.cli": (*PUBLIC, "kiln._server=", "kiln.stores=", "kiln.stores._script", "kiln.web"),
    # kilnotel registers its trace source with kiln.logging (issue 42: a public module)
    "kilnotel": ("kiln=", "kiln.events", "kiln.logging"),
    # kiln.testing runs handlers in-process as a server would: it may use a server's parts
    "kiln.testing": (*PUBLIC, "kiln.stores", "kiln._server", "kiln_pytest="),
    "kiln_pytest": ("kiln=", "kiln.testing"),
    "kiln.contrib": (*PUBLIC, "kiln._server=", "kiln.stores", "kiln.web", "kiln.cli"),
    "kiln.sqlalchemy": ("kiln.contrib.sqlalchemy",),
}
OBSERVABILITY = ("opentelemetry", "prometheus_client")
# what may import OpenTelemetry: kilnotel, and the CLI's optional --metrics-port path
OBSERVABILITY_FRONTS = ("kilnotel", "kiln.cli", "kiln.contrib")
REACHED = {"store", "_store", "pools", "_pools"}


def _files(*roots: str, root: Path = ROOT) -> list[Path]:
    return sorted(p for r in roots for p in (root / r).rglob("*.py"))


def _rel(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).as_posix()


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute name) for every import in ``path``, wherever it is written
    (function-local and ``TYPE_CHECKING`` ones too), relative ones resolved; ``from a
    import b`` gives ``a.b`` (a module or a name in ``a``: :func:`_resolve` decides)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_of(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _modules(root: Path) -> dict[str, Path]:
    return {_module_of(p, root): p for p in _files(*PACKAGES, root=root)}


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module of ours that ``name`` is or is in, or None for a third-party name."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _edges(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line}, over kiln, kilnotel and kiln_pytest."""
    modules = _modules(root)
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for line, name in _imports(path, root):
            target = _resolve(name, modules)
            if target is not None and target != module:
                edges[module].setdefault(target, line)
    return edges


def _layer(module: str) -> str | None:
    matches = [layer for layer in ALLOWED if _covers(layer, module)]
    return max(matches, key=len) if matches else None


def _covers(rule: str, module: str) -> bool:
    if rule.endswith("="):
        return module == rule[:-1]
    return module == rule or module.startswith(rule + ".")


def _forbidden(root: Path = ROOT) -> list[str]:
    found = []
    for module, targets in _edges(root).items():
        layer = _layer(module)
        assert layer is not None, f"{module} is in no layer: add its folder to ALLOWED"
        for target, line in targets.items():
            if _covers(layer, target) and _layer(target) == layer:
                continue
            if not any(_covers(rule, target) for rule in ALLOWED[layer]):
                found.append(f"{module}:{line} imports {target} ({layer} may not)")
    return sorted(found)


def _cycles(root: Path = ROOT) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    edges = _edges(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def _observability_leaks(root: Path = ROOT) -> list[str]:
    return [f"{_rel(p, root)}:{line} imports {name}"
            for module, p in _modules(root).items()
            if not any(_covers(f, module) for f in OBSERVABILITY_FRONTS)
            for line, name in _imports(p, root)
            if any(name == o or name.startswith(o + ".") for o in OBSERVABILITY)]


def _reaches(path: Path, root: Path = ROOT) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REACHED:
            yield f"{_rel(path, root)}:{node.lineno} reaches .{node.attr}"
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "stats"):
            yield f"{_rel(path, root)}:{node.lineno} subscripts stats()"


def test_every_layer_imports_only_what_it_may() -> None:
    assert _forbidden() == []


def test_no_module_is_in_an_import_cycle() -> None:
    assert _cycles() == []


def test_the_core_never_imports_observability() -> None:
    assert _observability_leaks() == []


def test_dashboard_and_kilnotel_never_reach_past_the_public_api() -> None:
    assert [r for p in _files("kiln/web", "kilnotel") for r in _reaches(p)] == []


def test_the_top_level_holds_the_front_and_the_layer_folders() -> None:
    top = sorted(p.name for p in (ROOT / "kiln").iterdir() if p.name != "__pycache__")
    assert top == ["__init__.py", "_aio", "_app.py", "_client", "_errors.py", "_events.py",
                   "_model", "_server", "_version.py", "cli", "contrib", "events.py", "logging.py",
                   "py.typed",
                   "sqlalchemy.py", "stores", "testing", "web"]


# the rules themselves: each one catches the violation it names, in code written for it
def _plant(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    for rel, source in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if parent != Path(".") and not (tmp_path / parent / "__init__.py").exists():
                (tmp_path / parent / "__init__.py").touch()
        path.write_text(source)
    return tmp_path


@pytest.mark.parametrize(("where", "source", "caught"), [
    ("kiln/stores/x.py", "from kiln._client._bulk import BulkRun\n", True),
    ("kiln/stores/x.py", "def f():\n    from kiln._server._config import DEFAULTS\n", True),
    ("kiln/stores/x.py", "from kiln._model._job import JobRow\n", False),
    ("kiln/stores/x.py", "from kiln._aio._portal import Portal\n", False),
    ("kiln/_model/x.py", "def f():\n    from kiln._client._client import build_job\n", True),
    ("kiln/_model/x.py", "from kiln.stores._rows import dumps\n", True),
    ("kiln/_model/x.py", "from kiln._errors import KilnError\n", False),
    ("kiln/_client/x.py", "from kiln._server import Server\n", True),
    ("kiln/_client/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from .._server._pool import Pool\n", True),
    ("kiln/_server/_pool.py", "from kiln._server._executor import Executor\n", False),
    ("kiln/_server/maintenance/x.py", "from kiln._server._service import Service\n", False),
    ("kiln/web/_jobs.py", "from kiln import _server\n", True),
    ("kiln/web/_jobs.py", "from kiln.stores import open_store\n", True),
    ("kiln/web/_jobs.py", "from kiln.cli._output import job_json\n", True),
    ("kiln/web/_jobs.py", "from kiln._client._bulk import BulkRun\n", False),
    ("kiln/cli/x.py", "from kiln._server import Server\n", False),
    ("kiln/cli/x.py", "from kiln._server._stats import ServerStats\n", True),
    ("kiln/cli/x.py", "import kiln._server._health\n", True),
    ("kilnotel/x.py", "from kiln import Server\n", False),
    ("kilnotel/x.py", "from kiln._client._client import Client\n", True),
    ("kiln/testing/_drain.py", "from kiln._server._executor import Executor\n", False),
])
def test_a_forbidden_import_is_caught(tmp_path: Path, where: str, source: str,
                                      caught: bool) -> None:
    root = _plant(tmp_path, {where: source, "kiln/_model/_job.py": "",
                             "kiln/_client/_bulk.py": "", "kiln/_client/_client.py": "",
                             "kiln/_server/_config.py": "", "kiln/_server/_pool.py": "",
                             "kiln/_server/_executor.py": "", "kiln/_server/_service.py": "",
                             "kiln/_server/_stats.py": "", "kiln/_server/_health.py": "",
                             "kiln/stores/_rows.py": "", "kiln/cli/_output.py": "",
                             "kiln/_aio/_portal.py": "", "kiln/_errors.py": ""})
    assert bool([f for f in _forbidden(root) if f.startswith(_module_of(root / where, root))]) \
        is caught


@pytest.mark.parametrize(("files", "caught"), [
    ({"kiln/_client/a.py": "from kiln._client.b import x\n",
      "kiln/_client/b.py": "def f():\n    from kiln._client.a import y\n"}, True),
    ({"kiln/stores/p/_jobs.py": "from kiln.stores.p import _unique\n",
      "kiln/stores/p/_unique.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from ._jobs import Cols\n"}, True),
    ({"kiln/cli/a.py": "from kiln.cli import b\n",
      "kiln/cli/b.py": "from kiln.cli import c\n",
      "kiln/cli/c.py": "def f():\n    import kiln.cli.a\n"}, True),
    ({"kiln/cli/a.py": "from kiln.cli import b\n", "kiln/cli/b.py": "import json\n"}, False),
])
def test_a_planted_cycle_is_caught(tmp_path: Path, files: dict[str, str], caught: bool) -> None:
    assert bool(_cycles(_plant(tmp_path, files))) is caught


@pytest.mark.parametrize(("where", "source", "caught"), [
    ("kiln/_server/x.py", "from opentelemetry import trace\n", True),
    ("kiln/_client/x.py", "def f():\n    import prometheus_client\n", True),
    ("kilnotel/x.py", "from opentelemetry import trace\n", False),
])
def test_an_observability_import_in_the_core_is_caught(tmp_path: Path, where: str,
                                                       source: str, caught: bool) -> None:
    assert bool(_observability_leaks(_plant(tmp_path, {where: source}))) is caught


@pytest.mark.parametrize(("source", "caught"), [
    ("async def f(client):\n    return await client._store.server_list()\n", True),
    ("def f(server):\n    return server._store\n", True),
    ("def f(server):\n    return len(server.pools)\n", True),
    ("def f(server):\n    return server.stats()['state']\n", True),
    ("def f(server):\n    return server.stats().state\n", False),
    ("async def f(client):\n    return await client.servers()\n", False),
])
def test_a_reach_past_the_api_is_caught(tmp_path: Path, source: str, caught: bool) -> None:
    path = tmp_path / "kiln" / "web" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(list(_reaches(path, tmp_path))) is caught


# the public surface ---------------------------------------------------------------------
def _public() -> list[tuple[str, object]]:
    import kiln

    return [(name, getattr(kiln, name)) for name in kiln.__all__]


def test_every_public_class_has_a_written_docstring() -> None:
    import inspect

    missing = [name for name, obj in _public() if inspect.isclass(obj)
               and (not (obj.__doc__ or "").strip() or (obj.__doc__ or "").startswith(f"{name}("))]
    assert missing == []  # a dataclass without one gets "Name(field, ...)": not written


def test_public_names_say_kiln_and_their_type_hints_resolve() -> None:
    import dataclasses
    import inspect
    import typing

    for name, obj in _public():
        if inspect.isclass(obj):
            typing.get_type_hints(obj)  # a class whose module moved would fail here
            annotated = dataclasses.is_dataclass(obj) or bool(vars(obj).get("__annotations__"))
            assert (obj.__module__ == "kiln") is not annotated, name
        elif inspect.isfunction(obj):
            assert obj.__module__ == "kiln", name
