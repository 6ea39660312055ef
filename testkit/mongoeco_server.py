"""Run by the mongoeco venv's Python (3.13) in isolated mode, never by the test interpreter
(-I keeps this directory off sys.path, where `mongoeco.py` would shadow the real package).

Serves mongoeco's in-memory engine over the MongoDB wire protocol on 127.0.0.1, on the port
given as argv[1] (0 = any free port), prints the bound port on one line, then serves until
its stdin closes or it is terminated: the parent test process owns its lifetime.
"""

import asyncio
import sys


async def main(port: int) -> None:
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.wire import AsyncMongoEcoProxyServer

    server = AsyncMongoEcoProxyServer(engine=MemoryEngine(), host="127.0.0.1", port=port)
    address = await server.start()
    print(address.port, flush=True)
    loop = asyncio.get_running_loop()
    try:
        # EOF on stdin means the parent went away: do not outlive it.
        await loop.run_in_executor(None, sys.stdin.read)
    finally:
        await server.close()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
    except KeyboardInterrupt:
        pass
