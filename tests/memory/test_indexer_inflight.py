"""The indexer against a message whose seq is reserved but whose insert has not landed yet
(MongoDB: `append` takes its seqs with `$inc` on the counter, then inserts): such a message is
indexed once it is stored, never skipped. Real PyMongo on mongoeco; the slow insert is a real
TCP forwarder holding that one command back."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit

from bot.memory.episodic.indexer import Indexer
from bot.stores.index_mongo import MongoMemoryIndex
from bot.stores.mongo import MongoStore
from tests.memory.test_episodic import ALICE, BOB, CHANNEL, SCOPE, said
from tests.support.tcp_proxy import MongoHoldingProxy


async def test_a_message_whose_insert_is_still_in_flight_is_indexed_once_stored(
    mongoeco_uri: str,
) -> None:
    server = urlsplit(mongoeco_uri)
    proxy = MongoHoldingProxy(str(server.hostname), int(server.port or 27017))
    await proxy.start()
    db = f"t_{uuid.uuid4().hex[:12]}"
    # One replica writes through the slow link; the indexer (any replica) reads directly.
    writer = await MongoStore.open(
        f"mongodb://127.0.0.1:{proxy.port}/?directConnection=true", db, retryWrites=False
    )
    reader = await MongoStore.open(mongoeco_uri, db)
    index = await MongoMemoryIndex.open(reader.client, db)
    indexer = Indexer(reader, index, None)
    try:
        await writer.append(CHANNEL, [said("We ship the Lisbon order on Friday", ALICE, "t1")])
        assert await indexer.index_session(CHANNEL) == 1
        proxy.hold("insert", "messages")
        pending = asyncio.create_task(
            writer.append(CHANNEL, [said("Ferreira & Filhos confirmed the pallets", BOB, "t2")])
        )
        await asyncio.wait_for(proxy.holding.wait(), 10)  # its seq is taken, it is not stored
        await indexer.index_session(CHANNEL)  # the indexer runs right then
        proxy.release()
        await asyncio.wait_for(pending, 10)
        await indexer.index_session(CHANNEL)  # the next turn's indexing

        stored = await reader.recent(CHANNEL, limit=10)
        assert [m.content for m in stored] == [
            "We ship the Lisbon order on Friday",
            "Ferreira & Filhos confirmed the pallets",
        ]
        entries = (await index.changes(SCOPE)).entries
        assert sorted(e.text.split(": ", 1)[1] for e in entries) == [
            "Ferreira & Filhos confirmed the pallets",
            "We ship the Lisbon order on Friday",
        ]
    finally:
        proxy.release()
        await reader.client.drop_database(db)
        await reader.close()
        await writer.close()
        await proxy.stop()
