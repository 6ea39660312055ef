"""`bot doctor`: one line per check, so an operator sees at a glance what is wrong."""

from __future__ import annotations

import asyncio

from bot import platforms
from bot.config import ConfigError, Settings
from bot.model import ModelClient
from bot.tokens import TokenCounter


def _line(ok: bool, name: str, detail: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return ok


async def run_checks(settings: Settings) -> bool:
    results: list[bool] = []
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    results.append(
        _line(
            bool(key.strip()),
            "config",
            "OPENAI_API_KEY is set" if key else "OPENAI_API_KEY is not set",
        )
    )
    try:
        counter = TokenCounter(settings.bot_model)
        results.append(_line(True, "tokens", f"{counter.encoding.name} for {settings.bot_model}"))
    except Exception as exc:
        results.append(
            _line(False, "tokens", f"tiktoken encoding unavailable ({type(exc).__name__})")
        )

    if key:
        client = ModelClient(
            api_key=key,
            base_url=settings.openai_base_url,
            model=settings.bot_model,
            timeout=min(settings.bot_model_timeout, 15.0),
            max_retries=0,
        )
        try:
            ok, detail = await client.ping()
        finally:
            await client.close()
        results.append(_line(ok, "model", detail))

    from bot.stores.factory import open_cache, open_store

    where = "MongoDB" if settings.mongodb_uri else f"SQLite in {settings.bot_data_dir}"
    try:
        store = await asyncio.wait_for(
            open_store(
                mongodb_uri=settings.mongodb_uri,
                mongodb_db=settings.mongodb_db,
                data_dir=settings.bot_data_dir,
            ),
            timeout=15.0,
        )
        try:
            ok = await asyncio.wait_for(store.ping(), timeout=10.0)
        except Exception:
            ok = False
        await store.close()
        results.append(_line(ok, "store", f"{where} {'answers' if ok else 'does not answer'}"))
        inbox = await _inbox_check(settings)
        if inbox is not None:
            results.append(inbox)
    except Exception as exc:
        results.append(_line(False, "store", f"{where}: {exc}"))

    what = "Redis" if settings.redis_url else "in-process cache"
    try:
        cache = open_cache(redis_url=settings.redis_url, prefix=settings.bot_redis_prefix)
    except Exception as exc:
        results.append(_line(False, "cache", f"{what}: {exc}"))
    else:
        try:
            ok = await asyncio.wait_for(cache.ping(), timeout=5.0)
        except Exception:
            ok = False
        finally:
            await cache.close()
        results.append(_line(ok, "cache", f"{what} {'answers' if ok else 'does not answer'}"))

    if settings.bot_secret_key is not None:
        results.append(_line(True, "secrets", "encrypted at rest (BOT_SECRET_KEY set)"))
    else:
        print(
            "info secrets: stored unencrypted "
            "(set BOT_SECRET_KEY to encrypt tool and platform tokens at rest)",
            flush=True,
        )

    from tools.packs import PACK_ERRORS, PACKS

    print(f"info tool packs: {', '.join(sorted(PACKS)) or 'none'}", flush=True)
    for name, problem in sorted(PACK_ERRORS.items()):
        results.append(_line(False, f"tool pack {name}", problem))
    print(f"info tool hosts: packs may reach {settings.host_policy().describe()}", flush=True)

    for traits in platforms.registered():  # the composition root registered them
        try:
            present = traits.configured()
        except ConfigError as exc:
            results.append(_line(False, traits.name, str(exc)))
            continue
        print(f"info {traits.name}: {'configured' if present else 'not configured'}", flush=True)
    return all(results)


async def _inbox_check(settings: Settings) -> bool | None:
    """The durable inbox: where it is, how many entries wait, how old the oldest is."""
    from bot.stores.factory import open_inbox

    if settings.bot_inbox == "off":
        print("info inbox: off (BOT_INBOX=off: events are handled in memory)", flush=True)
        return None
    where = "Redis Streams" if settings.redis_url else "SQLite table"
    try:
        inbox = await asyncio.wait_for(
            open_inbox(
                mode=settings.bot_inbox,
                redis_url=settings.redis_url,
                prefix=settings.bot_redis_prefix,
                data_dir=settings.bot_data_dir,
                claim_after=settings.bot_inbox_claim_seconds,
            ),
            timeout=10.0,
        )
    except Exception as exc:
        return _line(False, "inbox", f"{where}: {type(exc).__name__}")
    if inbox is None:
        return None
    try:
        waiting, oldest = 0, 0.0
        for kind in platforms.inbox_kinds():
            stats = await asyncio.wait_for(inbox.stats(kind), timeout=5.0)
            waiting, oldest = waiting + stats.depth, max(oldest, stats.oldest_age)
    except Exception as exc:
        return _line(False, "inbox", f"{where} does not answer ({type(exc).__name__})")
    finally:
        await inbox.close()
    stale = oldest > settings.bot_inbox_max_age_seconds
    detail = f"{where}: {waiting} waiting, oldest {oldest:.0f}s"
    return _line(
        not stale, "inbox", detail + (" (over BOT_INBOX_MAX_AGE_SECONDS)" if stale else "")
    )
