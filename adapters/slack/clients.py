"""Copies of a Web API client that differ in token or retry policy, on the same HTTP session.

The adapter needs a few: the turn's client per workspace (an inbox entry carries no token), the
reply sink's (429s come back at once so it decides itself), and single lookups that never wait
on a rate limit. One place copies what matters (base URL, session, timeout, proxy, headers).
"""

from __future__ import annotations

from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.web.async_client import AsyncWebClient


def client_like(
    client: AsyncWebClient,
    *,
    token: str | None = None,
    team_id: str | None = None,
    retry_handlers: list[AsyncRetryHandler] | None = None,
    timeout: int | None = None,
) -> AsyncWebClient:
    """`client` with another token / team / retry handlers / timeout (None: the client's own)."""
    return AsyncWebClient(
        token=token if token is not None else client.token,
        base_url=client.base_url,
        timeout=timeout if timeout is not None else client.timeout,
        ssl=client.ssl,
        proxy=client.proxy,
        session=client.session,
        trust_env_in_session=client.trust_env_in_session,
        headers=dict(client.headers),
        team_id=team_id if team_id is not None else client.default_params.get("team_id"),
        retry_handlers=list(client.retry_handlers if retry_handlers is None else retry_handlers),
    )


def no_wait_client(client: AsyncWebClient) -> AsyncWebClient:
    """One small call that never waits on its rate limit: no retry handlers, 10 s timeout."""
    return client_like(client, retry_handlers=[], timeout=10)
