"""The public surface, the error tree and the purity of the format and rule modules."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import durable_ops.hoststore as hoststore
from durable_ops.hoststore import errors

PACKAGE = Path(hoststore.__file__).parent
PURE_MODULES = ["snapshot.py", "transitions.py", "ledger.py", "retention.py", "errors.py"]
IO_MODULES = {
    "os",
    "io",
    "fcntl",
    "msvcrt",
    "pathlib",
    "shutil",
    "tempfile",
    "socket",
    "subprocess",
}


def test_public_surface_is_pinned() -> None:
    assert sorted(hoststore.__all__) == sorted(
        [
            *(name for name, _ in _error_classes()),
            "Record",
            "Session",
            "State",
            "Tombstone",
            "acquire",
            "show",
        ]
    )
    assert [
        (p.name, p.kind.name) for p in inspect.signature(hoststore.acquire).parameters.values()
    ] == [
        ("directory", "POSITIONAL_OR_KEYWORD"),
        ("host_id", "POSITIONAL_OR_KEYWORD"),
        ("filesystem", "KEYWORD_ONLY"),
        ("clock", "KEYWORD_ONLY"),
    ]
    assert str(inspect.signature(hoststore.show)) == (
        "(directory: 'str | os.PathLike[str]', *, as_json: 'bool', out: 'TextIO') -> 'int'"
    )
    assert list(inspect.signature(hoststore.Session.begin).parameters) == [
        "self",
        "operation_id",
        "plan_hash",
    ]
    assert list(inspect.signature(hoststore.Session.advance).parameters) == [
        "self",
        "operation_id",
        "revision",
        "next_state",
    ]
    for retain in (hoststore.Session.compact, hoststore.Session.forget):
        assert [(p.name, p.kind.name) for p in inspect.signature(retain).parameters.values()] == [
            ("self", "POSITIONAL_OR_KEYWORD"),
            ("older_than", "KEYWORD_ONLY"),
            ("now", "KEYWORD_ONLY"),
        ]


def _error_classes() -> list[tuple[str, type[errors.HostStoreError]]]:
    return [
        (name, value)
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.HostStoreError)
    ]


def test_every_error_is_documented_in_the_tree_with_its_code() -> None:
    lines = (errors.__doc__ or "").splitlines()
    for name, cls in _error_classes():
        documented = [line for line in lines if f" {name} " in line or line.endswith(f" {name}")]
        assert documented, name
        assert cls.code in documented[0].split(), (name, cls.code)


def test_error_codes_are_unique() -> None:
    codes = [cls.code for _, cls in _error_classes()]
    assert len(codes) == len(set(codes))


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_pure_modules_do_no_io() -> None:
    for name in PURE_MODULES:
        roots = {module.split(".")[0] for module in _imports(PACKAGE / name)}
        assert not roots & IO_MODULES, name


def test_package_uses_only_the_standard_library_and_itself() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        for module in _imports(path):
            root = module.split(".")[0]
            if root == "durable_ops":
                assert module.startswith("durable_ops.hoststore"), (path.name, module)
            else:
                assert root in sys.stdlib_module_names or root == "__future__", (path.name, module)
