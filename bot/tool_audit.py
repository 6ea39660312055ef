"""Who changed a team's tools, and when their providers failed: installs, removals and circuit
breaker openings, per team, never a secret.

Entries (time, event, pack, who, a short detail) are kept in the cache (Redis in production,
shared by every process), or, on the embedded store, in its durable key-value table (`durable`:
the in-process cache would forget them on restart), the last `keep` per team for `ttl`, and
every one is also written to the structured log. `/tools audit` lists them with the approvals
(`bot.approvals`). A
breaker of a pack-wide provider (the weather pack's) is recorded once, under "*", and shown to
every team that has that pack installed.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from bot.stores.protocols import Cache, JsonKV

log = logging.getLogger(__name__)

KEY = "tools:audit:"
ALL_TEAMS = "*"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: str  # ISO time, UTC
    event: str  # "installed" | "removed" | "breaker_opened"
    pack: str  # the install's name
    kind: str  # the pack type (mcp, orders, ...)
    by: str  # user id, or "" for the bot itself
    detail: str = ""

    def line(self) -> str:
        when = self.at[:16].replace("T", " ") + " UTC"
        label = f"`{self.pack}`" + (
            f" ({self.kind})" if self.kind and self.kind != self.pack else ""
        )
        what = {
            "installed": f"{label} installed by {self.by}",
            "removed": f"{label} removed by {self.by}",
            "breaker_opened": f"{label} failing repeatedly: calls paused for a while",
        }.get(self.event, f"{label} {self.event}")
        return f"{when} — {what}" + (f" ({self.detail})" if self.detail else "")


class ToolAudit:
    def __init__(
        self,
        cache: Cache,
        *,
        keep: int = 20,
        ttl: float = 90 * 86400.0,
        durable: JsonKV | None = None,
    ) -> None:
        self.cache = cache  # its lock orders the writes
        self.kv: JsonKV = durable or cache  # where the entries are kept
        self.keep = keep
        self.ttl = ttl

    async def record(
        self, team: str, event: str, pack: str, *, kind: str = "", by: str = "", detail: str = ""
    ) -> None:
        entry = AuditEntry(
            datetime.now(UTC).isoformat(timespec="seconds"), event, pack, kind, by, detail[:200]
        )
        log.info(
            "tool_audit",
            extra={"fields": {"team": team, "event": event, "pack": pack, "kind": kind, "by": by}},
        )
        try:
            async with self.cache.lock(f"lock:{KEY}{team}", ttl=10, wait=5):
                entries = await self._load(team)
                entries.append(entry)
                await self.kv.set_json(
                    KEY + team, [asdict(e) for e in entries[-self.keep :]], ttl=self.ttl
                )
        except Exception as exc:  # the audit must never break an install or a tool call
            log.warning(
                "tool_audit_write_failed",
                extra={"fields": {"team": team, "error": type(exc).__name__}},
            )

    async def recent(self, team: str, packs: set[str], limit: int = 5) -> list[AuditEntry]:
        """The team's last entries, with pack-wide breaker events of packs it has installed."""
        try:
            mine = await self._load(team)
            shared = [e for e in await self._load(ALL_TEAMS) if e.kind in packs]
        except Exception:
            return []
        return sorted(mine + shared, key=lambda e: e.at)[-limit:]

    async def _load(self, team: str) -> list[AuditEntry]:
        raw: Any = await self.kv.get_json(KEY + team)
        out: list[AuditEntry] = []
        for item in raw if isinstance(raw, list) else []:
            try:
                out.append(AuditEntry(**item))
            except TypeError:
                continue
        return out
