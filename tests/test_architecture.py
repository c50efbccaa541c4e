"""The seams the design names, enforced (River runs depguard for the same).

- The core never imports OpenTelemetry, prometheus-client, kilnotel, the dashboard or
  the CLI: it emits events and kilnotel subscribes (design.md, "Hooks, not imports").
- A store never imports what only a server, an app or a client uses: stores are the
  bottom layer, and the conformance suite drives them alone.
- The client, app and producer side (enqueue, admin, reads, the dashboard) never imports
  the server's package ``kiln._server``: what only a running server uses lives there.
  The assembly points (``kiln``, the App, the demo) and the CLI build or report on a
  server, and import only the package's front, never one of its parts.
- The dashboard and kilnotel talk to the client and to a server's public API only
  (ADR 0002): no import of ``kiln.stores``, no reach into ``.store``, ``._store``,
  ``.pools`` or ``._pools`` of anything, and no subscripting of ``stats()``, which is
  typed.

Each rule reads the source with ``ast``, so an import inside a function counts too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# what is not core inside the kiln package: it may import the optional parts
NOT_CORE = ("kiln/web/", "kiln/cli/", "kiln/contrib/", "kiln/testing/")
OBSERVABILITY = ("opentelemetry", "prometheus_client", "kilnotel")
FRONTS = ("kiln.web", "kiln.cli")
SERVER_ONLY = ("kiln._server", "kiln._app", "kiln._client", "kiln.maintenance")
SERVER = "kiln._server"
# the server's own: its package, and the leader's services it runs
SERVER_SIDE = ("kiln/_server/", "kiln/maintenance/")
# build or report on a server, through the front of kiln._server only
ASSEMBLY = ("kiln/__init__.py", "kiln/_app.py", "kiln/_demo.py")
REACHED = {"store", "_store", "pools", "_pools"}


def _files(*roots: str) -> list[Path]:
    return sorted(p for r in roots for p in (ROOT / r).rglob("*.py"))


def _rel(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).as_posix()


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) for every import in ``path``, relative ones resolved."""
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
            yield node.lineno, base
            for alias in node.names:  # ``from kiln import web`` reaches kiln.web
                yield node.lineno, f"{base}.{alias.name}"


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _core() -> list[Path]:
    return [p for p in _files("kiln") if not _rel(p).startswith(NOT_CORE)]


def _import_leaks(files: list[Path], forbidden: tuple[str, ...],
                  root: Path = ROOT) -> list[str]:
    return [f"{_rel(p, root)}:{line} imports {mod}"
            for p in files for line, mod in _imports(p, root) if _under(mod, forbidden)]


def _on_client_side(rel: str) -> bool:
    """The dashboard, and the core but for the server's side and the assembly points."""
    return rel.startswith("kiln/web/") or (
        rel.startswith("kiln/") and not rel.startswith(NOT_CORE + SERVER_SIDE + ASSEMBLY))


def _server_parts(files: list[Path], root: Path = ROOT) -> list[str]:
    """Imports of a part of kiln._server (``kiln._server._pool``), not of its front."""
    prefix = SERVER + "."
    return [f"{_rel(p, root)}:{line} imports {mod}" for p in files
            for line, mod in _imports(p, root)
            if mod.startswith(prefix) and mod[len(prefix):].startswith("_")]


def _reaches(path: Path, root: Path = ROOT) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REACHED:
            yield f"{_rel(path, root)}:{node.lineno} reaches .{node.attr}"
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "stats"):
            yield f"{_rel(path, root)}:{node.lineno} subscripts stats()"


def test_the_core_never_imports_observability_or_the_fronts() -> None:
    assert _import_leaks(_core(), OBSERVABILITY + FRONTS) == []


def test_stores_never_import_server_app_or_client_modules() -> None:
    assert _import_leaks(_files("kiln/stores"), SERVER_ONLY) == []


def test_the_client_side_never_imports_the_server() -> None:
    assert _import_leaks([p for p in _files("kiln") if _on_client_side(_rel(p))], (SERVER,)) == []


def test_assembly_points_and_the_cli_import_only_the_servers_front() -> None:
    assembly = [ROOT / a for a in ASSEMBLY] + _files("kiln/cli")
    assert _server_parts(assembly) == []


def test_dashboard_and_kilnotel_never_import_a_store() -> None:
    assert _import_leaks(_files("kiln/web", "kilnotel"), ("kiln.stores",)) == []


def test_dashboard_and_kilnotel_never_reach_past_the_public_api() -> None:
    assert [r for p in _files("kiln/web", "kilnotel") for r in _reaches(p)] == []


# the rules themselves: each one catches the leak it names, in code written for it
@pytest.mark.parametrize(("source", "caught"), [
    ("from kilnotel import observe\n", True),
    ("import opentelemetry.metrics\n", True),
    ("def f():\n    from ..web import _app\n", True),
    ("from kiln import cli\n", True),
    ("from kiln._job import JobRow\n", False),
])
def test_an_import_leak_in_the_core_is_caught(tmp_path: Path, source: str,
                                              caught: bool) -> None:
    path = tmp_path / "kiln" / "maintenance" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(_import_leaks([path], OBSERVABILITY + FRONTS, tmp_path)) is caught


@pytest.mark.parametrize(("where", "source", "caught"), [
    ("kiln/_client.py", "from kiln._server import Server\n", True),
    ("kiln/_batch.py", "def f():\n    from ._server._pool import Pool\n", True),
    ("kiln/web/_jobs.py", "from kiln import _server\n", True),
    ("kiln/_client.py", "from kiln._servers import x\n", False),
    ("kiln/_server/_pool.py", "from kiln._server._executor import Executor\n", False),
    ("kiln/maintenance/x.py", "from kiln._server._service import PeriodicService\n", False),
    ("kiln/_app.py", "from kiln._server import Server\n", False),
    ("kiln/testing/_drain.py", "from kiln._server._executor import Executor\n", False),
])
def test_a_client_side_import_of_the_server_is_caught(tmp_path: Path, where: str,
                                                      source: str, caught: bool) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    on_client_side = _on_client_side(_rel(path, tmp_path))
    leaks = _import_leaks([path], (SERVER,), tmp_path) if on_client_side else []
    assert bool(leaks) is caught


@pytest.mark.parametrize(("source", "caught"), [
    ("from kiln._server import Server, ServerStats\n", False),
    ("from kiln._server._stats import ServerStats\n", True),
    ("from kiln._server import _pool\n", True),
    ("import kiln._server._health\n", True),
])
def test_a_reach_into_a_part_of_the_server_is_caught(tmp_path: Path, source: str,
                                                     caught: bool) -> None:
    path = tmp_path / "kiln" / "cli" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(_server_parts([path], tmp_path)) is caught


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
