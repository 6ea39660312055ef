"""MCP servers as tool packs: a team's own tools over the Model Context Protocol.

- `connection`: one pooled client session per install, tool list cached (TTL + list-changed);
- `schema`: the server's input schemas cleaned for the model and enforced before each call;
- `naming`: tool names namespaced by the install's name, within the model API's rules;
- `render`: what the model reads of a result (text, structured data; media named, not inlined);
- `pack`: the `mcp` tool pack (`/tools install mcp name=... url=... [token=...] [allow=...]`).
"""
