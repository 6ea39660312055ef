"""Candidates that are never facts, caught without a model: greetings and thanks, questions,
passing states ("I'm tired today") and guesses ("maybe I'll move to Porto"). A person's explicit
"remember ..." skips these rules (they asked); the model still sees the candidate."""

from __future__ import annotations

import re

_GREETING = re.compile(
    r"^\s*(hi|hello|hey|yo|thanks|thank you|thx|cheers|good (morning|afternoon|evening|night)|"
    r"bye|see you|ok|okay|cool|great|nice|lol|haha)\b[\s!.,:)]*(there|all|everyone|bot)?[\s!.]*$",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"\b(today|tonight|right now|at the moment|this (morning|afternoon|evening|week)|"
    r"currently feeling|for now|just now)\b",
    re.IGNORECASE,
)
_MOOD = re.compile(
    r"\b(tired|sleepy|hungry|bored|busy|stressed|sick|exhausted|sad|happy|annoyed|excited|"
    r"hungover|cold|hot|late|in a hurry|in a meeting)\b",
    re.IGNORECASE,
)
_GUESS = re.compile(
    r"\b(maybe|perhaps|probably|might|i guess|i think|not sure|possibly|seems to|apparently)\b",
    re.IGNORECASE,
)


def reject_reason(text: str) -> str | None:
    """Why this candidate is not a durable fact, or None if it may be one."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if _GREETING.match(stripped):
        return "greeting"
    if stripped.endswith(("?", "？")):
        return "question"
    if _TRANSIENT.search(stripped) and _MOOD.search(stripped):
        return "transient state"
    if _GUESS.search(stripped):
        return "guess"
    return None
