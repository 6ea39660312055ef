"""Consumers take the narrow store protocols, not the whole `Store` (issue 21).

Two proofs: every consumer runs a real path on a real SQLite store seen through its protocol
alone (any other attribute is an AttributeError), and no module but the composition names
`Store`. Plus the import rules that came with it: memory does not import the app, the stores do
not import the tool engine.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path
from typing import Any, Protocol

import pytest

from bot.commands import CommandHandler
from bot.core import CommandRequest
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.consolidation import Consolidator
from bot.memory.deletion import PlatformChanges
from bot.memory.erasure import Eraser
from bot.memory.reconcile import Reconciler
from bot.memory.session import SessionMemory
from bot.memory.structured import JsonAsker
from bot.messages import MessageRef
from bot.stores.protocols import (
    ChangeStore,
    CommandStore,
    ConsolidationStore,
    ErasureStore,
    FactStore,
    SessionStore,
    Store,
    ToolboxStore,
)
from bot.stores.records import NewMessage
from bot.toolbox import ToolboxFactory

ROOT = Path(__file__).resolve().parents[2]
# Only the composition holds the whole store (and the protocols module defines it).
COMPOSITION = {"bot/app.py", "bot/stores/factory.py", "bot/stores/protocols.py"}


def methods(proto: type) -> set[str]:
    names: set[str] = set()
    for cls in proto.__mro__:
        if cls in (object, Protocol, typing.Generic):
            continue
        names |= {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    return names


class Only:
    """A real store seen through one protocol: anything else is an AttributeError."""

    def __init__(self, inner: Any, proto: type) -> None:
        self._inner = inner
        self._allowed = methods(proto)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._allowed:
            raise AttributeError(f"{name} is not part of the protocol this consumer takes")
        return getattr(self._inner, name)


def test_the_narrow_protocols_are_narrower_than_store() -> None:
    full = methods(Store)
    for proto in (SessionStore, ToolboxStore, ConsolidationStore, ChangeStore, ErasureStore):
        assert methods(proto) < full, proto
    assert {"take_lease", "install"}.isdisjoint(methods(ErasureStore))
    with pytest.raises(AttributeError):
        _ = Only(object(), ToolboxStore).list_facts  # the wrapper does hide the rest


SESSION = SessionKey("console", "local", "c1")
ALICE = PersonKey("console", "local", "alice")


async def _seed(store: Any) -> None:
    await store.append(
        SESSION,
        [
            NewMessage(
                role="user",
                content="I am vegetarian.",
                speaker=ALICE.id,
                turn_id="t1",
                meta={"message_id": "m1"},
            ),
            NewMessage(role="assistant", content="Noted.", speaker=ALICE.id, turn_id="t1"),
        ],
    )


async def test_each_consumer_runs_on_its_protocol_alone(make_app: Any) -> None:
    app = await make_app()
    store = app.store
    await _seed(store)

    memory = SessionMemory(Only(store, SessionStore), app.cache, app.counter, app.memory.policy)
    assert [m.content for m in (await memory.load(SESSION)).tail] == ["I am vegetarian.", "Noted."]

    toolboxes = ToolboxFactory(
        app.settings,
        store=Only(store, ToolboxStore),
        cache=app.cache,
        reconciler=Reconciler(Only(store, FactStore)),
    )
    try:
        box = await toolboxes.for_team(TeamKey("console", "local"))
        assert "remember" in set(box.registry.names())
    finally:
        await toolboxes.close()

    asker = JsonAsker(app.model)
    report = await Consolidator(
        Only(store, ConsolidationStore),
        Reconciler(Only(store, FactStore), asker),
        asker,
        holder="narrow",
    ).run()
    assert report.ran and report.sessions == 1 and report.failures == 0

    commands = CommandHandler(
        Only(store, CommandStore), app.toolboxes.catalog(), admins=frozenset({"alice"})
    )
    install = CommandRequest("console", "local", "c1", "alice", "tools", "install weather")
    assert (await commands.handle(install)).ok
    assert (
        await commands.handle(CommandRequest("console", "local", "c1", "alice", "memory", "show"))
    ).ok

    changes = PlatformChanges(Only(store, ChangeStore))
    gone = await changes.deleted(MessageRef("console", "local", ("m1",), channel="c1"))
    assert gone.found == 1 and gone.messages == 2 and not gone.failed

    await store.append(
        SESSION, [NewMessage(role="user", content="hi again", speaker=ALICE.id, turn_id="t2")]
    )
    receipt = await Eraser(Only(store, ErasureStore)).forget_all(ALICE)
    assert receipt.counts["messages"] == 1
    assert await store.recent(SESSION, limit=10) == []


def _python_files(*roots: str) -> list[Path]:
    return sorted(p for r in roots for p in (ROOT / r).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_only_the_composition_names_the_whole_store() -> None:
    offenders = []
    for path in _python_files("bot", "adapters", "tools"):
        if _rel(path) in COMPOSITION:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "bot.stores.protocols":
                if any(a.name == "Store" for a in node.names):
                    offenders.append(f"{_rel(path)}:{node.lineno} imports Store")
            if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
                names = {n.id for n in ast.walk(node.annotation) if isinstance(n, ast.Name)}
                text = ast.unparse(node.annotation)
                if "Store" in names or text.strip("'\"") == "Store":
                    offenders.append(f"{_rel(path)}:{node.lineno} annotated Store")
    assert offenders == []


def _imports(path: Path) -> set[str]:
    """Every module a file imports, TYPE_CHECKING blocks and function bodies included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_memory_does_not_import_the_app() -> None:
    bad = {
        _rel(p): sorted(m for m in _imports(p) if m == "bot.app" or m.startswith("bot.app."))
        for p in _python_files("bot/memory")
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_stores_do_not_import_the_tool_engine() -> None:
    bad = {
        _rel(p): sorted(m for m in _imports(p) if m == "tools" or m.startswith("tools."))
        for p in _python_files("bot/stores")
    }
    assert {k: v for k, v in bad.items() if v} == {}
