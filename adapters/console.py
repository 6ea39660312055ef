"""Console adapter: `bot chat`. Talks to the same core as Slack and Discord.

On a terminal it shows a prompt and streams the reply as it arrives; when stdin is not a terminal
it reads one message per line and prints one reply per message (so scripts can drive it). Lines
starting with a slash command's name (`bot.command_registry`) run it, `/help` lists them; the
person at the terminal runs the bot process, so they count as its admin (`/config set`).
`--user` and `--channel` name who is speaking and where, so several people and places can be
simulated in one script.
Without `--channel` the conversation is a DM between that person and the bot (`dm-<user>`);
with it, a channel (`--private` for a private one). `--at` dates the messages (for replaying
conversations that happened earlier).
After a reply, `/good` or `/bad` votes on it (again: changes the vote; `bot.feedback`).
A tool call that waits for approval (`bot.approvals`) is shown as a line answered with
`/approve` (`/approve always`) or `/deny`; requests whose time ran out are told to the model
(checked every `SWEEP_EVERY` seconds while the console runs).
A line `/attach PATH` attaches that file to the next message (several such lines attach several
files); an empty line right after them sends the files on their own.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from adapters.console_files import AttachRefused, local_attachment
from bot.approvals.desk import Choice
from bot.approvals.render import CONSOLE_HOW, request_text
from bot.command_registry import APPROVE, BY_NAME, DENY, LocalCommand, help_text
from bot.core import BotCore, CommandRequest, DecidesApprovals, NotifiesAdmins
from bot.feedback import FeedbackClick, ReplyRef, vote
from bot.keys import PersonKey, SessionKey
from bot.messages import Attachment, IncomingMessage
from bot.stores.approvals import Approval
from bot.stores.feedback import DOWN, UP

PLATFORM = "console"
TEAM = "local"
SWEEP_EVERY = 5.0  # seconds between checks for approval requests whose time ran out
CONSOLE_COMMANDS = (
    LocalCommand("/attach PATH", "attach a file to your next message"),
    LocalCommand("/good", "thumbs up on the last reply (again: change your vote)"),
    LocalCommand("/bad", "thumbs down on the last reply"),
    APPROVE,
    DENY,
    LocalCommand("/help", "this list"),
    LocalCommand("/quit", "leave (or end of input)"),
)


@dataclass
class ConsoleNotice:
    """Admin notices (budget alerts): the person at the terminal runs the bot, so they see them."""

    out: TextIO

    async def tell(self, person: PersonKey, text: str) -> None:
        self.out.write(f"[notice for {person.user}] {text}\n")
        self.out.flush()


@dataclass
class ConsoleSink:
    """Prints the reply: streamed on a terminal, whole otherwise."""

    out: TextIO
    stream: bool
    _streamed: bool = False
    rated: ReplyRef | None = None  # the turn of the final reply, for `/good` and `/bad`

    def rate_with(self, ref: ReplyRef) -> None:
        self.rated = ref

    async def ask_approval(self, approvals: list[Approval]) -> str:
        """The request as the reply, answered with `/approve` or `/deny`."""
        return "\n\n".join(request_text(a, how=CONSOLE_HOW) for a in approvals)

    async def working(self) -> None:
        return None

    async def delta(self, text: str) -> None:
        if self.stream:
            if not self._streamed:
                self.out.write("bot> ")
            self._streamed = True
            self.out.write(text)
            self.out.flush()

    async def finish(self, text: str, *, error: bool = False) -> None:
        if self._streamed and not error:
            self.out.write("\n")
        else:
            if self._streamed:
                self.out.write("\n")
            self.out.write(f"bot> {text}\n" if self.stream else f"{text}\n")
        self.out.flush()


async def _read_line(interactive: bool) -> str | None:
    if interactive:
        try:
            return await asyncio.to_thread(input, "you> ")
        except EOFError:
            return None
    # Bytes, decoded leniently: one line that is not UTF-8 must not lose the others (a text
    # stream decodes in blocks and would fail on all of them).
    raw: bytes = await asyncio.to_thread(sys.stdin.buffer.readline)
    if not raw:
        return None
    return raw.decode("utf-8", "replace")


async def run_console(
    core: BotCore,
    *,
    user: str,
    channel: str | None,
    thread: str | None = None,
    private: bool = False,
    sent_at: datetime | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Read messages until EOF; returns the process exit code."""
    # ":" separates the parts of store keys; names typed on a command line may contain it.
    user = user.replace(":", "_")
    is_dm = channel is None
    channel = f"dm-{user}" if channel is None else channel.replace(":", "_")
    thread = thread.replace(":", "_") if thread else None
    interactive = sys.stdin.isatty()
    if interactive and hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="replace")
    if isinstance(core, NotifiesAdmins):
        core.set_admin_notice(ConsoleNotice(out))
    sweeper = asyncio.create_task(_sweep(core, out, interactive))
    try:
        return await _loop(core, out, interactive, user, channel, thread, is_dm, private, sent_at)
    finally:
        sweeper.cancel()


async def _sweep(core: BotCore, out: TextIO, interactive: bool) -> None:
    """Approval requests whose time ran out: the model is told, and its answer printed."""
    if not isinstance(core, DecidesApprovals):
        return
    while True:
        await asyncio.sleep(SWEEP_EVERY)
        for resume in await core.sweep_approvals():
            await core.resume_turn(resume, ConsoleSink(out=out, stream=interactive))


async def _loop(
    core: BotCore,
    out: TextIO,
    interactive: bool,
    user: str,
    channel: str,
    thread: str | None,
    is_dm: bool,
    private: bool,
    sent_at: datetime | None,
) -> int:
    pending: list[Attachment] = []
    last: ReplyRef | None = None  # the last reply `/good` and `/bad` vote on
    while True:
        line = await _read_line(interactive)
        if line is None:
            return 0
        text = line.strip()
        if text == "/attach" or text.startswith("/attach "):
            try:
                pending.append(local_attachment(text.removeprefix("/attach")))
            except AttachRefused as exc:
                out.write(f"{exc}\n")
            else:
                out.write(f"attached {pending[-1].name}; it goes with your next message\n")
            out.flush()
            continue
        if not text and not pending:
            continue
        if text in ("/quit", "/exit"):
            return 0
        if text in ("/good", "/bad"):
            out.write(await _vote(core, user, last, UP if text == "/good" else DOWN) + "\n")
            out.flush()
            continue
        if text in ("/approve", "/approve always", "/deny"):
            choice: Choice = (
                "deny" if text == "/deny" else "always" if text.endswith("always") else "approve"
            )
            await _decide(core, out, interactive, user, channel, thread, choice)
            continue
        if text in ("/help", "/?"):
            out.write(help_text(CONSOLE_COMMANDS) + "\n")
            out.flush()
            continue
        if text.split(" ", 1)[0].removeprefix("/") in BY_NAME and text.startswith("/"):
            command, _, rest = text[1:].partition(" ")
            reply = await core.handle_command(
                CommandRequest(PLATFORM, TEAM, channel, user, command, rest, is_platform_admin=True)
            )
            out.write(reply.text + "\n")
            out.flush()
            continue
        message = IncomingMessage(
            platform=PLATFORM,
            team=TEAM,
            channel=channel,
            thread=thread,
            user=user,
            text=text,
            user_name=user,
            is_dm=is_dm,
            is_private=private and not is_dm,
            sent_at=sent_at,
            attachments=tuple(pending),
        )
        pending = []
        sink = ConsoleSink(out=out, stream=interactive)
        await core.handle_message(message, sink)
        last = sink.rated


async def _decide(
    core: BotCore,
    out: TextIO,
    interactive: bool,
    user: str,
    channel: str,
    thread: str | None,
    choice: Choice,
) -> None:
    """`/approve`, `/approve always`, `/deny`: the person's newest request in this place."""
    if not isinstance(core, DecidesApprovals):
        out.write("Nothing is waiting for approval here.\n")
        out.flush()
        return
    session = SessionKey(PLATFORM, TEAM, channel, thread)
    answer = await core.decide_approval(PersonKey(PLATFORM, TEAM, user), choice, None, session)
    out.write(answer.text + "\n")
    out.flush()
    if answer.resume is not None:
        await core.resume_turn(answer.resume, ConsoleSink(out=out, stream=interactive))


async def _vote(core: BotCore, user: str, last: ReplyRef | None, value: int) -> str:
    """`/good` / `/bad`: the vote on the last reply (its turn id stands for the reply's id)."""
    if last is None:
        return "There's no reply of mine to vote on yet."
    click = FeedbackClick(
        platform=PLATFORM,
        team=TEAM,
        user=user,
        where=last.session.thread or last.session.channel,
        reply_id=last.turn_id,
        token=last.token(value),
    )
    return (await vote(core, click)).text
