"""`Inbox` on Redis Streams: every replica shares it.

Keys (under the cache prefix): the stream `inbox:<kind>` with the consumer group `workers`;
`inbox:seen:<key>` (de-duplication, 24 h); per session `inbox:seq:<session>` (the last sequence
number given out) and `inbox:done:<session>` (the highest one handled), so an entry is `ready`
when `done >= seq - 1` — arrival order, whichever replica holds which entry; `inbox:note:<id>`
(a hash: notes and the delivery count); `inbox:body:<id>` (the item's JSON). The body is kept
out of the stream on purpose: XDEL only marks a stream entry deleted (its bytes stay in Redis's
memory and snapshots until the node is rewritten), while DEL of its own key frees it, so a
person's words do not outlive the turn that answered them.

`put` is one script (dedup check, sequence number and XADD in one atomic step). Workers read with
XREADGROUP; a dead consumer's pending entries are claimed with XAUTOCLAIM once idle for
`claim_after` seconds, while `renew` (XCLAIM ... JUSTID by the holder itself, checked in a script
so an entry already taken over is never taken back) keeps a live worker's long turn from being
claimed. The claim pass also removes consumers of processes gone (nothing pending, no read for
`PRUNE_AFTER` claim times). `done` acknowledges and deletes the entry (XACK + XDEL) and
advances the session.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from bot.stores.inbox import MAX_BODY_CHARS, SEEN_TTL, InboxEntry, InboxItem, InboxStats
from bot.stores.inbox_renew import RedisRenewer
from bot.stores.protocols import StoreUnavailable
from bot.stores.redis_cache import DEFAULT_PREFIX, UNAVAILABLE_ERRORS

GROUP = "workers"
HANDED_BACK = "handed-back"  # the pseudo consumer entries are parked under at shutdown
COUNTER_TTL_MS = 7 * 24 * 3600 * 1000  # a session's counters outlive any entry of it
NOTE_TTL_MS = 2 * 24 * 3600 * 1000

# KEYS: stream, seq, done, seen...; ARGV: seen ttl ms, counter ttl ms, session, kind, at, body,
# body key prefix, body ttl ms
_PUT = """
for i = 4, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return false end
end
for i = 4, #KEYS do redis.call('SET', KEYS[i], '1', 'PX', ARGV[1]) end
local seq = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if seq == 1 then redis.call('DEL', KEYS[3]) end
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
local id = redis.call('XADD', KEYS[1], '*', 'session', ARGV[3], 'seq', seq, 'kind', ARGV[4],
  'at', ARGV[5])
redis.call('SET', ARGV[7] .. id, ARGV[6], 'PX', ARGV[8])
return id
"""

# KEYS: stream, done, note, body; ARGV: group, id, seq, counter ttl ms
_DONE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[4])
local seq = tonumber(ARGV[3])
if seq > 0 then
  local done = tonumber(redis.call('GET', KEYS[2]) or '0')
  if seq > done then redis.call('SET', KEYS[2], seq, 'PX', ARGV[4]) end
end
redis.call('DEL', KEYS[3])
return 1
"""

# KEYS: stream; ARGV: group, consumer, id...  Resets the idle time of the entries this consumer
# still holds; returns the ids it no longer holds.
_RENEW = """
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    table.insert(lost, ARGV[i])
  end
end
return lost
"""

# KEYS: stream; ARGV: group, idle ms, consumer.  Removes consumers that hold nothing and have
# not read for that long (processes gone: one per start otherwise stays in the group forever).
# Atomic, so a consumer that reads meanwhile is never removed with an entry (its PEL).
_PRUNE = """
local removed = 0
for _, row in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #row, 2 do f[row[i]] = row[i + 1] end
  if f['pending'] == 0 and f['idle'] > tonumber(ARGV[2]) and f['name'] ~= ARGV[3] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed = removed + 1
  end
end
return removed
"""
PRUNE_AFTER = 10  # claim times without a read before an empty consumer is removed


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisInbox:
    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, claim_after: float = 20.0
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.claim_after = claim_after
        self.url: str | None = None  # set by `from_url`: a lease thread can open its own client
        self._groups: set[str] = set()
        self._next_claim: dict[str, float] = {}
        self._put = client.register_script(_PUT)
        self._done = client.register_script(_DONE)
        self._renew = client.register_script(_RENEW)
        self._prune = client.register_script(_PRUNE)

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_PREFIX, claim_after: float = 20.0
    ) -> RedisInbox:
        """Its own connection pool: blocking reads must not hold the cache's connections, and
        need a socket timeout longer than the block."""
        client = redis.Redis.from_url(
            url,
            socket_timeout=5.0,
            socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 1),
            health_check_interval=30,
        )
        inbox = cls(client, prefix=prefix, claim_after=claim_after)
        inbox.url = url
        return inbox

    def blocking_renewer(self) -> RedisRenewer | None:
        """For a worker's lease thread (`bot.stores.inbox_renew`); None without a URL."""
        if self.url is None:
            return None
        return RedisRenewer(self.url, _RENEW, self._stream, GROUP)

    def _stream(self, kind: str) -> str:
        return f"{self.prefix}inbox:{kind}"

    def _note_key(self, entry_id: str) -> str:
        return f"{self.prefix}inbox:note:{entry_id}"

    def _body_key(self, entry_id: str) -> str:
        return f"{self.prefix}inbox:body:{entry_id}"

    def _counter(self, name: str, session: str) -> str:
        return f"{self.prefix}inbox:{name}:{session}"

    async def _group(self, stream: str) -> None:
        if stream in self._groups:
            return
        try:
            await self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(stream)

    async def put(self, item: InboxItem) -> str | None:
        body = json.dumps(item.body, separators=(",", ":"))
        if len(body) > MAX_BODY_CHARS:
            raise ValueError(f"inbox item body of {len(body)} characters")
        stream = self._stream(item.kind)
        keys = [
            stream,
            self._counter("seq", item.session),
            self._counter("done", item.session),
            *(f"{self.prefix}inbox:seen:{k}" for k in item.dedup),
        ]
        args: list[str | int | float] = [
            int(SEEN_TTL * 1000),
            COUNTER_TTL_MS,
            item.session,
            item.kind,
            time.time(),
            body,
            f"{self.prefix}inbox:body:",
            NOTE_TTL_MS,
        ]
        try:
            await self._group(stream)
            entry_id = await self._put(keys=keys, args=args)
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox put: {exc}") from exc
        return None if entry_id is None else _text(entry_id)

    async def put_and_take(
        self, item: InboxItem, consumer: str
    ) -> tuple[str | None, InboxEntry | None]:
        """Only `put`: a stream entry reaches a consumer through XREADGROUP, which any replica's
        reader may be the one to call, so the putting worker cannot take it in the same step."""
        return await self.put(item), None

    async def take(
        self, kind: str, consumer: str, *, count: int, wait: float, fresh: bool = True
    ) -> list[InboxEntry]:
        stream = self._stream(kind)
        try:
            await self._group(stream)
            now = time.monotonic()
            if now >= self._next_claim.get(stream, 0.0):
                # Claims are looked for a few times per `claim_after`, not on every read.
                self._next_claim[stream] = now + max(self.claim_after / 4, 0.05)
                claimed = await self._claim(stream, consumer, count)
                if claimed:
                    return await self._with_notes(claimed, fresh=False)
            if not fresh:
                return []
            reply: Any = await self.client.xreadgroup(
                GROUP, consumer, {stream: ">"}, count=count, block=max(int(wait * 1000), 1)
            )
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox take: {exc}") from exc
        except ResponseError as exc:
            if "NOGROUP" not in str(exc) and "UNBLOCKED" not in str(exc):
                raise
            self._groups.discard(stream)  # the stream was deleted (e.g. FLUSHALL): recreate it
            return []
        rows = [row for _, rows in reply or [] for row in rows]
        return await self._with_notes(rows, fresh=True)

    async def _claim(self, stream: str, consumer: str, count: int) -> list[Any]:
        """Entries idle for `claim_after` seconds (their holder died or handed them back)."""
        result = await self.client.xautoclaim(
            stream, GROUP, consumer, int(self.claim_after * 1000), start_id="0-0", count=count
        )
        rows = [row for row in result[1] if row and row[1]]
        deleted = result[2] if len(result) > 2 else []
        if deleted:  # deleted while pending (e.g. trimmed): nothing to run, just acknowledge
            await self.client.xack(stream, GROUP, *deleted)
        idle = int(self.claim_after * PRUNE_AFTER * 1000)
        await self._prune(keys=[stream], args=[GROUP, idle, consumer])
        return rows

    async def _with_notes(self, rows: list[Any], *, fresh: bool) -> list[InboxEntry]:
        """Entries from stream rows, with their bodies (one round trip for the batch). A
        taken-over entry also counts the take-over and reads what earlier attempts noted."""
        if not rows:
            return []
        per = 1 if fresh else 4
        async with self.client.pipeline(transaction=False) as pipe:
            for entry_id, _ in rows:
                pipe.get(self._body_key(_text(entry_id)))
                if not fresh:
                    key = self._note_key(_text(entry_id))
                    pipe.hincrby(key, "_claims", 1)
                    pipe.pexpire(key, NOTE_TTL_MS)
                    pipe.hgetall(key)
            results = await pipe.execute()
        entries = []
        for i, (entry_id, fields) in enumerate(rows):
            data = {_text(k): _text(v) for k, v in fields.items()}
            body = results[i * per]
            raw_notes = {} if fresh else (results[i * per + 3] or {})
            notes = {_text(k): json.loads(v) for k, v in raw_notes.items() if _text(k) != "_claims"}
            item = InboxItem(
                kind=data.get("kind", ""),
                session=data.get("session", ""),
                # An entry written before bodies moved out of the stream still has it inline.
                body=json.loads(_text(body) if body is not None else data.get("body", "{}")),
            )
            entries.append(
                InboxEntry(
                    id=_text(entry_id),
                    item=item,
                    enqueued_at=float(data.get("at", "0") or 0),
                    tries=1 if fresh else int(results[i * per + 1]) + 1,
                    seq=int(data.get("seq", "0") or 0),
                    notes=notes,
                )
            )
        return entries

    async def ready(self, entry: InboxEntry) -> bool:
        if entry.seq <= 1:
            return True
        try:
            done = await self.client.get(self._counter("done", entry.item.session))
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox ready: {exc}") from exc
        return int(done or 0) >= entry.seq - 1

    async def renew(self, kind: str, consumer: str, entries: list[InboxEntry]) -> list[str]:
        if not entries:
            return []
        try:
            lost = await self._renew(
                keys=[self._stream(kind)], args=[GROUP, consumer, *(e.id for e in entries)]
            )
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox renew: {exc}") from exc
        return [_text(i) for i in lost or []]

    async def note(self, entry: InboxEntry, values: dict[str, Any]) -> None:
        entry.notes.update(values)
        key = self._note_key(entry.id)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hset(key, mapping={k: json.dumps(v) for k, v in values.items()})
                pipe.pexpire(key, NOTE_TTL_MS)
                await pipe.execute()
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox note: {exc}") from exc

    async def done(self, entry: InboxEntry) -> None:
        keys = [
            self._stream(entry.item.kind),
            self._counter("done", entry.item.session),
            self._note_key(entry.id),
            self._body_key(entry.id),
        ]
        try:
            await self._done(keys=keys, args=[GROUP, entry.id, entry.seq, COUNTER_TTL_MS])
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox done: {exc}") from exc

    async def hand_back(self, kind: str, entries: list[InboxEntry]) -> None:
        """Park them under a pseudo consumer, already idle past `claim_after`, so the next
        XAUTOCLAIM of any live worker takes them."""
        if not entries:
            return
        idle = int(self.claim_after * 1000) + 1000
        try:
            await self.client.xclaim(
                self._stream(kind),
                GROUP,
                HANDED_BACK,
                0,
                [e.id for e in entries],
                idle=idle,
                justid=True,
            )
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox hand_back: {exc}") from exc

    async def stats(self, kind: str) -> InboxStats:
        stream = self._stream(kind)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xlen(stream)
                pipe.xrange(stream, count=1)
                depth, first = await pipe.execute()
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(f"Redis unavailable during inbox stats: {exc}") from exc
        if not first:
            return InboxStats(depth=int(depth), oldest_age=0.0)
        millis = int(_text(first[0][0]).split("-", 1)[0])
        return InboxStats(depth=int(depth), oldest_age=max(0.0, time.time() - millis / 1000))

    async def close(self) -> None:
        await self.client.aclose()
