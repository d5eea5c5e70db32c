"""The relay uses Tornado's public surface only: ``setup.cfg`` allows any Tornado 6.x, and
a minor release may change whatever is private without notice.

An AST scan of ``relay/`` finds (1) imports of underscore names from tornado modules,
(2) underscore attributes read off a tornado module, and (3) in a class deriving from a
Tornado class, a method that overrides one of the base's underscore names, or a read of
``self._x`` / ``super()._x`` that the class itself does not define or assign (so it
reaches into the base's private state).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

RELAY = Path(__file__).resolve().parents[3] / "relay"

# (file under relay/, class or "*") -> why it still needs a private Tornado name. None
# does today: the server and the upstream client are both the relay's own.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    where: str  # the class, or "*" at module level
    what: str


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.modules: set[str] = set()  # local names bound to tornado modules
        self.objects: dict[str, tuple[str, str]] = {}  # local name -> (module, attribute)
        self.found: list[Violation] = []
        self._class = "*"

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append(Violation(self.path, getattr(node, "lineno", 0), self._class, what))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "tornado":
                self.modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.split(".")[0] != "tornado":
            return
        for alias in node.names:
            if _private(alias.name):
                self._flag(node, f"imports {module}.{alias.name}")
            local = alias.asname or alias.name
            if module == "tornado":  # from tornado import httputil
                self.modules.add(local)
            else:
                self.objects[local] = (module, alias.name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (
            isinstance(node.value, ast.Name)
            and node.value.id in self.modules
            and _private(node.attr)
        ):
            self._flag(node, f"uses {node.value.id}.{node.attr}")
        self.generic_visit(node)

    def _tornado_base(self, base: ast.expr) -> type | None:
        if isinstance(base, ast.Name) and base.id in self.objects:
            module, name = self.objects[base.id]
        elif (
            isinstance(base, ast.Attribute)
            and isinstance(base.value, ast.Name)
            and base.value.id in self.modules
        ):
            module, name = f"tornado.{base.value.id}", base.attr
        else:
            return None
        found = getattr(importlib.import_module(module), name, None)
        return found if isinstance(found, type) else None

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [b for b in map(self._tornado_base, node.bases) if b is not None]
        outer, self._class = self._class, node.name
        if bases:
            self._check_subclass(node, bases)
        self.generic_visit(node)
        self._class = outer

    def _check_subclass(self, node: ast.ClassDef, bases: list[type]) -> None:
        own = _own_names(node)
        for item in node.body:
            if (
                isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and _private(item.name)
                and any(hasattr(base, item.name) for base in bases)
            ):
                self._flag(item, f"overrides Tornado's {item.name}")
        for sub in ast.walk(node):
            if not (isinstance(sub, ast.Attribute) and _private(sub.attr)):
                continue
            on_self = isinstance(sub.value, ast.Name) and sub.value.id == "self"
            on_super = (
                isinstance(sub.value, ast.Call)
                and isinstance(sub.value.func, ast.Name)
                and sub.value.func.id == "super"
            )
            if on_super or (on_self and sub.attr not in own):
                self._flag(sub, f"reaches Tornado's {sub.attr}")


def _own_names(node: ast.ClassDef) -> set[str]:
    """What the class defines itself: methods, class attributes, __slots__ entries and
    attributes assigned on ``self``."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(item.name)
        elif isinstance(item, ast.Assign | ast.AnnAssign):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__slots__" and item.value is not None:
                        names |= {
                            e.value
                            for e in ast.walk(item.value)
                            if isinstance(e, ast.Constant) and isinstance(e.value, str)
                        }
    for sub in ast.walk(node):
        assigned: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            assigned = list(sub.targets)
        elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
            assigned = [sub.target]
        for target in assigned:
            for leaf in ast.walk(target):
                if (
                    isinstance(leaf, ast.Attribute)
                    and isinstance(leaf.value, ast.Name)
                    and leaf.value.id == "self"
                ):
                    names.add(leaf.attr)
    return names


def scan(source: str, path: str = "<test>") -> list[Violation]:
    visitor = _Scan(path)
    visitor.visit(ast.parse(source))
    return visitor.found


def test_the_relay_uses_only_tornados_public_surface() -> None:
    found = []
    for file in sorted(RELAY.rglob("*.py")):
        path = file.relative_to(RELAY).as_posix()
        found += [
            v
            for v in scan(file.read_text(), path)
            if (v.path, "*") not in ALLOWED and (v.path, v.where) not in ALLOWED
        ]
    assert found == [], "\n".join(f"relay/{v.path}:{v.line} {v.where}: {v.what}" for v in found)


def test_the_allowances_are_still_needed() -> None:
    """An allowance outlives its reason silently otherwise."""
    for path, where in ALLOWED:
        file = RELAY / path
        if not file.exists():
            pytest.fail(f"relay/{path} is gone: drop its allowance")
        found = scan(file.read_text(), path)
        assert any(where in ("*", v.where) for v in found), f"relay/{path} {where}: unused"


@pytest.mark.parametrize(
    ("source", "what"),
    [
        (
            "from tornado.netutil import _DEFAULT_BACKLOG",
            "imports tornado.netutil._DEFAULT_BACKLOG",
        ),
        ("from tornado import httputil\nx = httputil._parse_header", "uses httputil._parse_header"),
        ("import tornado.httputil\nx = tornado._x", "uses tornado._x"),
        (
            "from tornado.http1connection import HTTP1Connection\n"
            "class C(HTTP1Connection):\n"
            "    async def _read_message(self, d): ...",
            "overrides Tornado's _read_message",
        ),
        (
            "from tornado import httputil\n"
            "class C(httputil.HTTPConnection):\n"
            "    def finish(self):\n"
            "        return self._write_future",
            "reaches Tornado's _write_future",
        ),
        (
            "from tornado.httpserver import HTTPServer\n"
            "class C(HTTPServer):\n"
            "    def f(self):\n"
            "        return super()._handle_connection(1, 2)",
            "reaches Tornado's _handle_connection",
        ),
    ],
)
def test_the_scan_finds_each_kind(source: str, what: str) -> None:
    assert [v.what for v in scan(source)] == [what]


def test_a_subclass_may_keep_private_state_of_its_own() -> None:
    source = (
        "from tornado import httputil\n"
        "class C(httputil.HTTPConnection):\n"
        "    __slots__ = ('_a',)\n"
        "    def __init__(self):\n"
        "        self._a = 1\n"
        "        self._b: int = 2\n"
        "    def _own(self):\n"
        "        return self._a + self._b + self._own2()\n"
        "    def _own2(self):\n"
        "        return 0\n"
        "class D:\n"  # not a Tornado class: anything goes
        "    def _read_message(self):\n"
        "        return self._x\n"
    )
    assert scan(source) == []
