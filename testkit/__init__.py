"""Fakes of the remote services (OpenAI, Slack, Discord, MCP) and helpers for tests and benches.

It lives outside `tests/` and imports no pytest so that `python -m bench` runs on a plain
`pip install -e .`: nothing here may import `tests` or pytest (tests/bench checks the benches).
"""
