"""A hostile MCP server for the tests: the `mcp` SDK's `MCPServer` over streamable HTTP, run in
its own process (so its own CPU work never shows up as the bot's event-loop lag).

`python -m tests.tools.hostile_mcp [--json] [--ref URL]` prints `PORT <n>` once listening.

Tools (real SDK tools): `parts(n)` answers n text parts; `blob(mb)` a structured result of about
`mb` megabytes; `echo(word)` has the pattern `^(a+)+$`; `fetch_ref(doc)` has an input schema whose
`$ref` points at `--ref` (a remote document); `not_an_object` (its input schema is rewritten to
`{"type": "string"}` on the way out, which the SDK's own server would refuse to send).

`POST /control` with JSON `{"filler": n, "filler_bytes": b, "hang": bool, "bad_schema": bool}`
adds n extra tools
with b-byte descriptions to every listing (rewritten on the way out), or makes every MCP request
hang; `GET /control` answers `{"requests": n, "hung": n}`. Listings and results are rewritten by
an ASGI layer that reads the SDK's answer, so both JSON and SSE answers (`--json` or not) work.
"""

import argparse
import asyncio
import json
import socket
import sys
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import TextContent, ToolAnnotations
from pydantic import Field, WithJsonSchema

READ_ONLY = ToolAnnotations(read_only_hint=True)


class State:
    filler = 0
    filler_bytes = 100
    hang = False
    bad_schema = True  # rewrite `not_an_object`'s input schema to a string schema
    requests = 0
    hung = 0
    _cache: tuple[tuple[int, int], list[dict[str, Any]]] | None = None

    @classmethod
    def fillers(cls) -> list[dict[str, Any]]:
        key = (cls.filler, cls.filler_bytes)
        if cls._cache is None or cls._cache[0] != key:
            pad = "x" * cls.filler_bytes
            tools = [
                {
                    "name": f"filler_{i}",
                    "description": pad,
                    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
                }
                for i in range(cls.filler)
            ]
            cls._cache = (key, tools)
        return cls._cache[1]


def build(ref: str) -> MCPServer:
    mcp = MCPServer("hostile")

    @mcp.tool(annotations=READ_ONLY, structured_output=False)
    def parts(n: int) -> list[Any]:
        """Many content parts."""
        return [TextContent(type="text", text=f"p{i}") for i in range(n)]

    @mcp.tool(annotations=READ_ONLY)
    def blob(mb: float) -> dict[str, Any]:
        """A big structured result."""
        row = {"id": 0, "name": "n" * 80}
        count = int(mb * 1024 * 1024 / 100)
        return {"rows": [{**row, "id": i} for i in range(count)]}

    @mcp.tool(annotations=READ_ONLY)
    def echo(word: Annotated[str, Field(pattern=r"^(a+)+$")]) -> str:
        """Echo a word of a's."""
        return word

    @mcp.tool(annotations=READ_ONLY)
    def fetch_ref(doc: Annotated[str, WithJsonSchema({"$ref": ref or "http://invalid/"})]) -> str:
        """A tool whose schema points at a remote document."""
        return doc

    @mcp.tool(annotations=READ_ONLY)
    def not_an_object() -> str:
        """A tool whose input schema is rewritten to a string schema."""
        return "never"

    return mcp


def _rewrite(message: Any) -> Any:
    result = message.get("result") if isinstance(message, dict) else None
    if isinstance(result, dict) and isinstance(result.get("tools"), list):
        for tool in result["tools"]:
            if tool.get("name") == "not_an_object" and State.bad_schema:
                tool["inputSchema"] = {"type": "string"}
        result["tools"].extend(State.fillers())
    return message


def _rewrite_body(body: bytes, ctype: str) -> bytes:
    if b'"tools"' not in body:
        return body
    if ctype.startswith("application/json"):
        return json.dumps(_rewrite(json.loads(body))).encode()
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            line = b"data: " + json.dumps(_rewrite(json.loads(line[6:]))).encode()
        out.append(line)
    return b"\n".join(out)


def asgi(mcp: MCPServer, json_response: bool) -> Any:
    app = mcp.streamable_http_app(json_response=json_response)
    forever = asyncio.Event()

    async def control(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] == "POST":
            body = b""
            while True:
                msg = await receive()
                body += msg.get("body", b"")
                if not msg.get("more_body"):
                    break
            for key, value in json.loads(body).items():
                setattr(State, key, value)
        reply = json.dumps({"requests": State.requests, "hung": State.hung}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": reply})

    async def outer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if scope["path"] == "/control":
            await control(scope, receive, send)
            return
        State.requests += 1
        if State.hang:
            State.hung += 1
            await forever.wait()
        if scope["method"] != "POST":
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                start.update(msg)
                return
            if msg["type"] != "http.response.body":
                await send(msg)
                return
            chunks.append(msg.get("body", b""))
            if msg.get("more_body"):
                return
            headers = dict(start.get("headers", []))
            ctype = headers.get(b"content-type", b"").decode()
            body = _rewrite_body(b"".join(chunks), ctype)
            headers[b"content-length"] = str(len(body)).encode()
            await send({**start, "headers": list(headers.items())})
            await send({"type": "http.response.body", "body": body})

        await app(scope, receive, capture)

    return outer


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ref", default="")
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        asgi(build(args.ref), args.json), log_level="critical", lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event for this)
        await asyncio.sleep(0.01)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await task


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
