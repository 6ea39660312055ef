"""What a Discord message carries besides its own words, as text the model can read.

People talk to the bot with more than text: a Reply quotes the message it answers, a Forward
carries a snapshot of another message (and no text of its own), a sticker or a poll has no
`content` at all. Each becomes a marked block before the person's words, so the model sees
what they see, knows it is quoted, and knows who wrote it:

    [Replying to Ada, who wrote:]
    > the offsite is in Lisbon
    is that still true?

- **Reply** (`message_reference` of type DEFAULT, `referenced_message` resolved): the text of
  the message replied to, with its author's display name ("your earlier message" when it is
  the bot's own). A deleted one, or one Discord did not include, is named as such; a message
  whose text the bot cannot see (no Message Content intent, or a message of files only) is
  named with what can be told (its files' names, its embeds).
- **Forward** (`message_reference` of type FORWARD with `message_snapshots`): the snapshot's
  text, its files' names and its embeds' text. Discord leaves the original author out of a
  snapshot, so it is attributed to the person who forwarded it ("forwarded by Bob").
- **Stickers and polls**: "[sticker: name]"; a poll's question and answers.

Bounds: every quoted text is cut at `MAX_QUOTE_CHARS` (with a note saying how much was left
out), at most `MAX_NAMES` file names, `MAX_EMBEDS` embeds, `MAX_SNAPSHOTS` snapshots and
`MAX_STICKERS` stickers are named, each name cut at `MAX_NAME_CHARS`. The person's own words are
never cut here (the core bounds the turn).

Audience (`bot.audience`): a reply's quoted message is in the same channel as the reply (Discord
allows no cross-channel reply), so it was visible to everyone who reads the answer. A forward's
snapshot may come from another place, even a private one: the person who forwarded it chose to
share it into this place, so from then on it is part of their message here and belongs to this
place's audience, like anything else they post (attributed as forwarded, never as their words).
Deleting the forward erases it with the message, as for any message.

Deletes: the quoted text is stored as part of the reply. When the message replied to is deleted
on Discord, the handler reads the replies it answered that quoted it again (Discord now shows a
deleted reference) and applies them as edits (`DiscordHandlers._unquote`), so the deleted words
leave what the bot keeps; the bot's own answer stays as it was, as for any edit. A forward keeps
its snapshot on Discord when the original is deleted, so the bot keeps it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import discord

from adapters.discord.normalize import readable_text

MAX_QUOTE_CHARS = 1_500
MAX_NAMES = 10
MAX_NAME_CHARS = 100
MAX_EMBEDS = 3
MAX_SNAPSHOTS = 3
MAX_STICKERS = 3
MAX_POLL_ANSWERS = 10
UNREADABLE = "(its text is not visible to me)"


def compose(words: str, blocks: Sequence[str]) -> str:
    """The text the core sees: the quoted blocks first, then the person's own words."""
    return "\n".join([*blocks, words]).strip() if blocks else words


def quoted_blocks(message: discord.Message, me: discord.abc.User) -> list[str]:
    """The blocks a message carries besides its own words (empty for a plain message)."""
    blocks: list[str] = []
    reference = message.reference
    if reference is not None and reference.type == discord.MessageReferenceType.forward:
        blocks.extend(_forwarded(message, me))
    elif reference is not None and message.type == discord.MessageType.reply:
        blocks.append(_replied(reference, me))
    blocks.extend(_stickers(message.stickers))
    if message.poll is not None:
        blocks.append(_poll(message.poll))
    return blocks


def replied_author_id(message: discord.Message) -> int | None:
    """Who wrote the message this one replies to, when Discord included it."""
    reference = message.reference
    if reference is None or reference.type == discord.MessageReferenceType.forward:
        return None
    resolved = reference.resolved
    if isinstance(resolved, discord.Message):
        author = getattr(resolved, "author", None)  # absent from a partial payload
        return author.id if author is not None else None
    return None


# replies and forwards ---------------------------------------------------------------------------


def _replied(reference: discord.MessageReference, me: discord.abc.User) -> str:
    resolved = reference.resolved
    if isinstance(resolved, discord.DeletedReferencedMessage):
        return "[Replying to a message that has since been deleted]"
    if not isinstance(resolved, discord.Message):
        return "[Replying to a message I could not read]"
    author = getattr(resolved, "author", None)  # absent from a partial payload
    if author is None:
        head = "[Replying to a message that said:]"
    elif author.id == me.id:
        head = "[Replying to your earlier message, which said:]"
    else:
        head = f"[Replying to {_name(author.display_name)}, who wrote:]"
    users = {u.id: u.display_name for u in resolved.mentions}
    users[me.id] = me.display_name
    text = readable_text(
        resolved.content,
        bot_id=0,  # the bot's own mention stays readable in a quote: "@chatbot"
        users=users,
        roles={r.id: r.name for r in resolved.role_mentions},
        channels={c.id: getattr(c, "name", str(c.id)) for c in resolved.channel_mentions},
    )
    body = _body(text, resolved.attachments, resolved.embeds)
    return f"{head}\n{body}"


def _forwarded(message: discord.Message, me: discord.abc.User) -> list[str]:
    sender = _name(message.author.display_name) if getattr(message, "author", None) else "someone"
    snapshots = message.message_snapshots
    if not snapshots:
        return [f"[A forwarded message (forwarded by {sender}) that I could not read]"]
    blocks = []
    for snapshot in snapshots[:MAX_SNAPSHOTS]:
        text = readable_text(snapshot.content, bot_id=0, users={me.id: me.display_name})
        body = _body(text, snapshot.attachments, snapshot.embeds)
        extra = _stickers(snapshot.stickers)
        if extra:
            body = "\n".join([body, *(f"> {line}" for line in extra)])
        blocks.append(
            f"[A forwarded message (forwarded by {sender}; Discord does not say who wrote it):]"
            f"\n{body}"
        )
    if len(snapshots) > MAX_SNAPSHOTS:
        blocks.append(f"[{len(snapshots) - MAX_SNAPSHOTS} more forwarded messages left out]")
    return blocks


def _body(
    text: str, attachments: Sequence[discord.Attachment], embeds: Sequence[discord.Embed]
) -> str:
    """A quoted message's lines, each marked with "> ", bounded."""
    lines = []
    if text.strip():
        lines.extend(_cut(text.strip(), MAX_QUOTE_CHARS).split("\n"))
    if attachments:
        lines.append(f"[files: {_names(a.filename for a in attachments)}]")
    embed_text = [t for t in (_embed(e) for e in embeds[:MAX_EMBEDS]) if t]
    lines.extend(f"[embed: {t}]" for t in embed_text)
    if len(embeds) > MAX_EMBEDS:
        lines.append(f"[{len(embeds) - MAX_EMBEDS} more embeds left out]")
    if not lines:
        lines.append(UNREADABLE)
    return "\n".join(f"> {line}" for line in lines)


def _embed(embed: discord.Embed) -> str:
    parts = [embed.title, embed.description]
    parts.extend(f"{f.name}: {f.value}" for f in embed.fields[:10])
    if embed.footer and embed.footer.text:
        parts.append(embed.footer.text)
    text = " — ".join(" ".join(p.split()) for p in parts if p and p.strip())
    return _cut(text, MAX_QUOTE_CHARS // 2)


# stickers and polls ------------------------------------------------------------------------------


def _stickers(stickers: Sequence[discord.StickerItem]) -> list[str]:
    named = [f"[sticker: {_name(s.name)}]" for s in stickers[:MAX_STICKERS]]
    if len(stickers) > MAX_STICKERS:
        named.append(f"[{len(stickers) - MAX_STICKERS} more stickers]")
    return named


def _poll(poll: discord.Poll) -> str:
    answers = [a.text for a in poll.answers[:MAX_POLL_ANSWERS]]
    listed = " / ".join(_name(a) for a in answers) or "(no answers)"
    return f"[poll: {_name(poll.question, 300)} — answers: {listed}]"


# bounds -------------------------------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} … [cut: {len(text) - limit:,} more characters]"


def _name(name: str | None, limit: int = MAX_NAME_CHARS) -> str:
    flat = " ".join((name or "").split()) or "?"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _names(names: Iterable[str]) -> str:
    items = list(names)
    shown = ", ".join(_name(n) for n in items[:MAX_NAMES])
    if len(items) > MAX_NAMES:
        shown += f" and {len(items) - MAX_NAMES} more"
    return shown
