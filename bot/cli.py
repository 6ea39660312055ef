"""The `bot` command line (also `python -m bot`).

Every failure a user can cause (bad settings, unreachable services) ends with one clear line on
stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import importlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot import eventloop
from bot.config import ConfigError, Settings, load_settings
from bot.logsetup import setup_logging

if TYPE_CHECKING:
    from bot.app import BotApp
    from bot.platforms import PlatformTraits

EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3

# What `bot --help` says about each command, in one place: say only what this version does.
# A command that is not built yet is listed in NOT_BUILT (its help says so and running it exits
# EXIT_UNAVAILABLE with that line); whoever builds it removes it there and updates its line here.
# Each platform's command (`bot <platform>`) and its line come from the composition root
# (`adapters.platforms`): `HELP` is this table with theirs after `chat`.
_CORE_HELP = {
    "chat": "talk to the bot in the terminal (reads stdin lines when piped)",
    "consolidate": "long-term memory consolidation: when the next nightly run is",
    "consolidate --now": "run the consolidation now (progress bar, or one line per session)",
    "doctor": "check configuration and reach each configured service",
    "memory": "long-term memory tools (audit)",
    "memory audit": "scan every store the bot writes for a phrase and a person's records",
    "orders-demo": "serve the reference order service over a JSON file",
    "usage": "tokens, cost and feedback per team, place, person, model and kind",
}
NOT_BUILT: dict[str, str] = {}


def _platforms() -> tuple[PlatformTraits, ...]:
    """The composition root's platforms, registered with the core. Imported here, not at the
    top: importing the CLI loads no adapter, and the traits modules load no platform library
    (each platform's start-up, `main(settings) -> exit code`, is imported only when it runs)."""
    from adapters.platforms import register_platforms

    return register_platforms()


def _help(platforms: Sequence[PlatformTraits]) -> dict[str, str]:
    first, *rest = _CORE_HELP.items()
    return dict([first, *((p.name, p.cli_help) for p in platforms), *rest])


def __getattr__(name: str) -> Any:
    if name == "HELP":
        return _help(_platforms())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parser() -> argparse.ArgumentParser:
    platforms = _platforms()
    HELP = _help(platforms)
    names = " and ".join(p.title for p in platforms) or "chat platforms"
    parser = argparse.ArgumentParser(prog="bot", description=f"AI chat bot for {names}")
    sub = parser.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help=HELP["chat"], description=HELP["chat"])
    chat.add_argument("--user", default=None, help="who is speaking (default: your login name)")
    chat.add_argument(
        "--channel",
        default=None,
        help="a channel where the conversation happens (default: a DM between you and the bot)",
    )
    chat.add_argument("--thread", default=None, help="a thread inside the channel")
    chat.add_argument(
        "--private", action="store_true", help="the channel is private (its memories stay in it)"
    )
    chat.add_argument(
        "--at",
        type=_date_arg,
        default=None,
        help="date the messages as sent at this moment (YYYY-MM-DD or ISO date-time, UTC)",
    )

    for platform in platforms:
        plat = sub.add_parser(
            platform.name, help=HELP[platform.name], description=HELP[platform.name]
        )
        if platform.runs_workers:
            plat.add_argument(
                "--workers",
                type=_workers_arg,
                default=None,
                help="worker processes sharing the HTTP port: a number or auto (the cores); "
                "default BOT_WORKERS, else 1",
            )
    cons = sub.add_parser("consolidate", help=HELP["consolidate"], description=HELP["consolidate"])
    cons.add_argument("--now", action="store_true", help=HELP["consolidate --now"])
    sub.add_parser("doctor", help=HELP["doctor"], description=HELP["doctor"])
    memory = sub.add_parser("memory", help=HELP["memory"], description=HELP["memory"])
    memory_sub = memory.add_subparsers(dest="memory_command", required=True)
    aud = memory_sub.add_parser(
        "audit", help=HELP["memory audit"], description=HELP["memory audit"]
    )
    example = next((p.person_example for p in platforms if p.person_example), "")
    aud.add_argument(
        "--user",
        required=True,
        help="PLATFORM:TEAM:USER" + (f", e.g. {example}" if example else ""),
    )
    aud.add_argument("--text", required=True, help="the phrase to look for")
    use = sub.add_parser("usage", help=HELP["usage"], description=HELP["usage"])
    team_example = example.rsplit(":", 1)[0] if example.count(":") == 2 else ""
    use.add_argument(
        "--team",
        default=None,
        help="PLATFORM:TEAM" + (f", e.g. {team_example}" if team_example else ""),
    )
    use.add_argument("--since", default=None, help="YYYY-MM-DD (default: last month's first day)")
    use.add_argument("--csv", action="store_true", help="one row per day, team, place, person…")
    demo = sub.add_parser("orders-demo", help=HELP["orders-demo"], description=HELP["orders-demo"])
    demo.add_argument("--data", required=True, help="JSON file of orders keyed by order id")
    demo.add_argument("--port", type=_port, default=8081)
    demo.add_argument("--host", default="127.0.0.1")
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {port}")
    return port


def _workers_arg(text: str) -> str:
    from bot.workers import parse_workers

    try:
        parse_workers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _fail(message: str, code: int = EXIT_CONFIG) -> int:
    print(f"bot: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in NOT_BUILT:
        return _fail(NOT_BUILT[args.command], EXIT_UNAVAILABLE)
    if args.command == "orders-demo":
        return _orders_demo(args)
    if args.command == "chat" and (problem := _chat_args_problem(args)):
        return _fail(problem)
    try:
        settings = load_settings()
        for known in _platforms():
            known.configured()  # reads its settings: a malformed one fails here, as ever
    except ConfigError as exc:
        return _fail(str(exc))
    setup_logging(settings.bot_log_level or ("WARNING" if args.command == "chat" else "INFO"))
    try:
        if args.command == "chat":
            return asyncio.run(_chat(settings, args))
        if args.command == "doctor":
            return asyncio.run(_doctor(settings))
        if args.command == "usage":
            from bot.usage.cli import run_usage

            return asyncio.run(run_usage(settings, team=args.team, since=args.since, csv=args.csv))
        if args.command == "memory":
            from bot.memory.audit_cli import run_audit

            return asyncio.run(run_audit(settings, args.user, args.text))
        platform = next((p for p in _platforms() if p.name == args.command), None)
        if platform is not None:
            workers = _workers(platform, args, settings)
            if workers > 1:
                return _supervise(platform, settings, workers)
            return eventloop.run(_platform(platform, settings), settings.bot_event_loop)
        if args.command == "consolidate":
            return asyncio.run(_consolidate(settings, now=args.now))
    except (ConfigError, eventloop.EventLoopUnavailable) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 130
    return _fail(f"unknown command {args.command}")


async def _consolidate(settings: Settings, *, now: bool) -> int:
    from bot.memory.consolidate_cli import print_schedule, run_now

    if not now:
        return print_schedule(settings)
    app = await _open_app(settings)
    try:
        return await run_now(app)
    finally:
        await app.close()


async def _open_app(settings: Settings) -> BotApp:
    from bot.app import StartupError, build_app

    try:
        return await build_app(settings)
    except StartupError as exc:
        raise ConfigError(str(exc)) from None


async def _chat(settings: Settings, args: argparse.Namespace) -> int:
    from adapters.console import run_console

    settings.require_openai_key()
    app = await _open_app(settings)
    try:
        user = args.user or _login_name()
        return await run_console(
            app,
            user=user,
            channel=args.channel,
            thread=args.thread,
            private=args.private,
            sent_at=args.at,
        )
    finally:
        await app.close()


def _date_arg(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date: {value!r} (use YYYY-MM-DD or YYYY-MM-DDTHH:MM)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _chat_args_problem(args: argparse.Namespace) -> str | None:
    """One line for an unusable --user/--channel/--thread (they become store keys)."""
    if args.channel is not None and not args.channel.strip():
        return "--channel must not be empty (leave it out for a DM with the bot)"
    if args.user is not None and not args.user.strip():
        return "--user must not be empty (leave it out to use your login name)"
    if args.thread is not None and not args.thread.strip():
        return "--thread must not be empty (leave it out for no thread)"
    return None


def _login_name() -> str:
    try:
        return getpass.getuser() or "you"
    except Exception:
        return "you"


async def _doctor(settings: Settings) -> int:
    from bot.doctor import run_checks

    ok = await run_checks(settings)
    return 0 if ok else 1


def _workers(platform: PlatformTraits, args: argparse.Namespace, settings: Settings) -> int:
    """How many worker processes `bot <platform>` runs: 1 inside a supervised worker, and for
    a platform whose start-up cannot run workers (BOT_WORKERS is not its setting)."""
    from bot.workers import parse_workers, worker_id

    if worker_id() is not None:
        return 1
    if not hasattr(importlib.import_module(platform.main_module), "check_workers"):
        return 1
    return parse_workers(getattr(args, "workers", None) or settings.bot_workers)


def _supervise(platform: PlatformTraits, settings: Settings, workers: int) -> int:
    """The platform checks that its settings allow workers (ConfigError: one line), then this
    process supervises `workers` copies of `bot <platform>` (bot.workers)."""
    from bot.workers import supervise

    module = importlib.import_module(platform.main_module)
    check: Callable[[Settings, int], float] = module.check_workers
    grace = check(settings, workers)
    argv = [sys.executable, "-m", "bot", platform.name]
    level = settings.bot_log_level or "INFO"
    return supervise(argv, workers, grace=grace, log_level=level)


async def _platform(platform: PlatformTraits, settings: Settings) -> int:
    module = importlib.import_module(platform.main_module)
    entry: Callable[[Settings], Awaitable[int]] = module.main
    return await entry(settings)


def _orders_demo(args: argparse.Namespace) -> int:
    import os

    from tools.orders_demo import OrdersDataError, run

    setup_logging("INFO")
    try:
        run(args.data, args.host, args.port, os.environ.get("ORDERS_DEMO_TOKEN") or None)
    except OrdersDataError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":
    logging.getLogger(__name__).debug("cli")
    raise SystemExit(main())
