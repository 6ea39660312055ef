"""A rule-based "memory brain" for the fake OpenAI server: answers the bot's fact
reconciliation and fact extraction requests the way a careful model would, deterministically.

It recognises the requests by their JSON-schema name (or the `[task: ...]` marker in the system
prompt, for JSON mode and plain requests) and answers with JSON text. It is an independent
oracle: it shares no code with `bot.memory` (its own topic table and rules), so tests of the
reconciler's guards can fail.
"""

from __future__ import annotations

import json
import re
from typing import Any

# subject -> words that put a sentence on it (first match wins, in order)
TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("allergy", re.compile(r"allerg", re.I)),
    ("diet", re.compile(r"\b(vegetarian|vegan|pescatarian|eat (fish|meat)|fish now|meat)\b", re.I)),
    ("preferred_units", re.compile(r"\b(celsius|fahrenheit|metric|imperial)\b", re.I)),
    ("home_city", re.compile(r"\b(live in|living in|moved to|based in)\b", re.I)),
    ("drink", re.compile(r"\b(tea|coffee)\b", re.I)),
    ("job", re.compile(r"\b(work as|i am an? \w+ (engineer|designer|teacher|nurse))\b", re.I)),
    ("pet", re.compile(r"\b(dog|cat)\b", re.I)),
)
_TRANSIENT = re.compile(r"\b(today|tonight|right now|at the moment|this morning)\b", re.I)
_GREETING = re.compile(r"^\s*(hi|hello|hey|thanks|thank you|good morning|bye)\b[\s!.]*$", re.I)
_NEGATE = re.compile(r"\b(no longer|not anymore|don't .* anymore|stopped|quit)\b", re.I)
# A person's statement about themselves worth keeping (extraction).
_STATEMENT = re.compile(
    r"\b(i am|i'm|i eat|i live|i moved|i prefer|i work|i have|i'm allergic|i no longer|my )",
    re.I,
)


def topic_of(text: str) -> str:
    for name, pattern in TOPICS:
        if pattern.search(text):
            return name
    return ""


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def _third_person(text: str) -> str:
    """'I eat fish now' -> 'Eats fish now (pescatarian)': how a model would word a fact."""
    out = text.strip().rstrip(".!")
    for first, third in (
        (r"^i am\b", "Is"),
        (r"^i'm\b", "Is"),
        (r"^i eat\b", "Eats"),
        (r"^i live\b", "Lives"),
        (r"^i prefer\b", "Prefers"),
        (r"^i work\b", "Works"),
        (r"^i have\b", "Has"),
        (r"^i moved\b", "Moved"),
        (r"^i like\b", "Likes"),
    ):
        out = re.sub(first, third, out, flags=re.I)
    if re.search(r"\bfish\b", out, re.I) and "pescatarian" not in out.lower():
        out += " (pescatarian)"
    return out


def reconcile(payload: dict[str, Any]) -> dict[str, Any]:
    new = payload.get("new") or {}
    text = str(new.get("text", ""))
    key = str(new.get("key") or "") or topic_of(text)
    existing = [e for e in payload.get("existing") or [] if isinstance(e, dict)]
    answer = {"event": "ADD", "target_id": "", "key": key, "text": text, "reason": ""}
    if _GREETING.match(text) or (_TRANSIENT.search(text) and not key):
        return {**answer, "event": "REJECT", "reason": "not durable"}
    for e in existing:
        if _norm(str(e.get("text", ""))) == _norm(text):
            return {**answer, "event": "NOOP", "target_id": e.get("id", "")}
    same = [e for e in existing if key and (e.get("key") or topic_of(str(e.get("text")))) == key]
    if same:
        target = str(same[-1].get("id", ""))
        if _NEGATE.search(text) and not re.search(r"\bnow\b", text, re.I):
            return {**answer, "event": "DELETE", "target_id": target}
        return {**answer, "event": "UPDATE", "target_id": target, "text": _third_person(text)}
    return {**answer, "text": _third_person(text) if text.lower().startswith("i") else text}


def extract(payload: dict[str, Any]) -> dict[str, Any]:
    """A sloppy extractor on purpose, so the bot's own checks are what keep memory clean: it
    proposes every first-person sentence of a person (moods and guesses too), reads text inside
    <recalled-memory> tags like any other, and files what the assistant said about the person
    ("As a vegetarian, ...") as that person's fact, citing the assistant's message."""
    facts: list[dict[str, str]] = []
    last_person = ""
    for line in payload.get("messages") or []:
        if not isinstance(line, dict):
            continue
        said = str(line.get("text", "")).replace("<recalled-memory>", " ")
        said = said.replace("</recalled-memory>", ". ")
        if line.get("role") == "user":
            last_person = str(line.get("person", ""))
            for raw in re.split(r"(?<=[.!?])\s+|\n+", said):
                s = raw.strip(" -")
                if not s or s.endswith("?") or _GREETING.match(s):
                    continue
                if not (_STATEMENT.search(s) or _RECALLED_FACT.match(s) or _SLOPPY.search(s)):
                    continue
                facts.append(_fact(last_person, s, str(line.get("id", ""))))
        elif line.get("role") == "assistant" and last_person and _RESTATED.search(said):
            facts.append(_fact(last_person, said, str(line.get("id", ""))))
    return {"facts": facts, "memories": _memories(payload)}


def _fact(person: str, sentence: str, message: str) -> dict[str, str]:
    return {
        "person": person,
        "text": _third_person(sentence),
        "key": topic_of(sentence),
        "source": "user",
        "message": message,
    }


_SLOPPY = re.compile(r"^(i'm|i am|maybe i)\b", re.I)
_RECALLED_FACT = re.compile(r"^(is|lives|likes|prefers|has) ", re.I)
_RESTATED = re.compile(r"\b(as a|since you|you prefer|you are)\b", re.I)


def _memories(payload: dict[str, Any]) -> list[dict[str, Any]]:
    lines = [m for m in payload.get("messages") or [] if isinstance(m, dict)]
    if not lines:
        return []
    said = " ".join(str(m.get("text", "")) for m in lines if m.get("role") == "user")
    return [{"text": " ".join(said.split())[:300], "messages": [str(m.get("id")) for m in lines]}]


def _task(request: dict[str, Any]) -> str:
    fmt = request.get("response_format") or {}
    name = str((fmt.get("json_schema") or {}).get("name") or "")
    if name:
        return name
    for m in request.get("messages") or []:
        if m.get("role") == "system" and isinstance(m.get("content"), str):
            found = re.search(r"\[task: (\w+)\]", m["content"])
            if found:
                return found.group(1)
    return ""


def answer(request: dict[str, Any]) -> str | None:
    """The JSON text answering a memory request, or None when it is not one."""
    task = _task(request)
    if task not in ("fact_reconcile", "memory_extraction"):
        return None
    messages = request.get("messages") or []
    user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    try:
        payload = json.loads(str(user.get("content", "")))
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    data = reconcile(payload) if task == "fact_reconcile" else extract(payload)
    return json.dumps(data, ensure_ascii=False)
