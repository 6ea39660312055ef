"""`bot usage [--team PLATFORM:TEAM] [--since YYYY-MM-DD] [--csv]`: tokens and cost per team,
place, person, model and kind, for operators; `--csv` one row per (day, team, place, person,
model, kind). Exit 0 printed, 2 bad input, 3 the store could not be read (a missing embedded
store is exit 3, never an empty report: a mistyped BOT_DATA_DIR must not read as "no usage")."""

from __future__ import annotations

import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TextIO

from bot.config import Settings
from bot.keys import TeamKey
from bot.stores.factory import StoreConfigError, open_store
from bot.stores.feedback import feedback_of
from bot.stores.protocols import StoreUnavailable
from bot.stores.sqlite import DB_FILENAME
from bot.stores.usage import usage_of
from bot.usage.report import as_csv, feedback_lines, operator_report

EXIT_OK, EXIT_USAGE, EXIT_UNREADABLE = 0, 2, 3
MAX_ARG = 300


def parse_team(text: str) -> str:
    parts = text.split(":") if len(text) <= MAX_ARG else []
    try:
        if len(parts) != 2:
            raise ValueError
        return TeamKey(*parts).id
    except ValueError:
        raise ValueError(f"--team must be PLATFORM:TEAM, got {text[:MAX_ARG]!r}") from None


def parse_since(text: str | None) -> date:
    if text is None:  # the current month and the one before
        today = datetime.now(UTC).date()
        return (today.replace(day=1) - timedelta(days=1)).replace(day=1)
    try:
        return date.fromisoformat(text[:MAX_ARG])
    except ValueError:
        raise ValueError(f"--since must be YYYY-MM-DD, got {text[:MAX_ARG]!r}") from None


async def run_usage(
    settings: Settings,
    *,
    team: str | None,
    since: str | None,
    csv: bool,
    out: TextIO = sys.stdout,
) -> int:
    try:
        team_id = parse_team(team) if team is not None else None
        start = parse_since(since)
    except ValueError as exc:
        print(f"bot usage: {exc}", file=sys.stderr)
        return EXIT_USAGE
    data_dir = Path(settings.bot_data_dir)
    if not settings.mongodb_uri and not (data_dir / DB_FILENAME).is_file():
        print(f"bot usage: no store at {data_dir / DB_FILENAME} (BOT_DATA_DIR)", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        store = await open_store(
            mongodb_uri=settings.mongodb_uri, mongodb_db=settings.mongodb_db, data_dir=data_dir
        )
    except (StoreConfigError, StoreUnavailable) as exc:
        print(f"bot usage: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    votes: list[str] = []
    try:
        kept = usage_of(store)
        rows = await kept.usage(since=start.isoformat(), team=team_id) if kept else []
        feedback = feedback_of(store)
        if feedback is not None and not csv:
            since_ts = datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp()
            for team_key in sorted({team_id} if team_id else {r.team for r in rows if r.team}):
                platform, _, name = team_key.partition(":")
                totals = await feedback.feedback_totals(TeamKey(platform, name), since_ts)
                if totals.total.up or totals.total.down:
                    votes.append(f"{team_key}: " + feedback_lines(totals, people=True, where=str))
    except StoreUnavailable as exc:
        print(f"bot usage: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    finally:
        await store.close()
    if csv:
        out.write(as_csv(rows))
    elif not rows:
        out.write(f"No usage recorded since {start.isoformat()}.\n")
    else:
        out.write(f"Usage since {start.isoformat()}:\n{operator_report(rows)}\n")
    if votes:
        out.write("\n".join(votes) + "\n")
    return EXIT_OK
