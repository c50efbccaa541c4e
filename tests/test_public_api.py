"""kiln's public surface is deliberate: ``__all__`` is sorted, complete and exact.

A name defined in ``kiln/__init__.py`` that is not in ``__all__`` is an accidental
export; a name in ``__all__`` that does not exist breaks ``from kiln import *``.
"""

from __future__ import annotations

import types

import kiln


def public_names(module: types.ModuleType) -> set[str]:
    """Names a user sees on the module, minus submodules (imported packages show up there)."""
    return {
        name for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def test_all_is_sorted_without_duplicates() -> None:
    assert kiln.__all__ == sorted(kiln.__all__)
    assert len(set(kiln.__all__)) == len(kiln.__all__)


def test_all_equals_the_public_names_defined() -> None:
    defined = public_names(kiln)
    assert sorted(defined - set(kiln.__all__)) == [], "defined but not exported"
    assert sorted(set(kiln.__all__) - defined) == [], "exported but not defined"


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from kiln import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == kiln.__all__


def test_every_export_is_kilns_own() -> None:
    """No foreign object (a typing helper, a stdlib class) leaks out under kiln's name."""
    for name in kiln.__all__:
        module = getattr(getattr(kiln, name), "__module__", None)
        assert module is None or module.split(".")[0] == "kiln", (name, module)


def test_the_user_view_of_design_md_is_there() -> None:
    for name in ("App", "Job", "Exponential", "ServerConfig", "Server", "Shutdown",
                 "retry_window", "KilnError"):
        assert name in kiln.__all__
    assert isinstance(kiln.__version__, str) and kiln.__version__


def test_kiln_testing_exports_exactly_its_all() -> None:
    from kiln import testing

    assert testing.__all__ == sorted(testing.__all__)
    assert sorted(public_names(testing)) == testing.__all__
    for name in testing.__all__:
        assert getattr(testing, name).__module__.startswith("kiln.testing."), name
