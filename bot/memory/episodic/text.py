"""Terms for lexical retrieval: English words stemmed (Snowball, through PyStemmer), stop words
dropped, and CJK text (which has no spaces) cut into overlapping character bigrams plus single
characters, so "供应商" matches "供应商是谁" without a dictionary. Dates are written into the
indexed text as words ("Wednesday 14 January 2026"), and relative dates in a question ("last
week", "in May", "yesterday") are turned into the same words, so both sides meet in BM25.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timedelta
from functools import lru_cache

import Stemmer

_STEMMER = Stemmer.Stemmer("english")
_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()

# Function words that match everything and nothing in particular. Month names ("may") are
# deliberately not here: "in May" must be able to match a date.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve don didn doesn isn wasn aren weren won wouldn shouldn couldn hasn haven
    hadn let lets also yes yeah oh ok okay hey hi hello thanks thank really just got get
    gonna wanna u ur im ive id dont cant""".split()
)

# Latin-script words (letters, digits, inner apostrophes/hyphens) or runs of CJK characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*", re.UNICODE)
_IS_CJK = re.compile(rf"[{_CJK}]")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """The BM25 terms of a text, in order (repeats kept: they are term frequencies)."""
    out: list[str] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        token = match.group()
        if _IS_CJK.match(token):
            out.extend(token)  # single characters (recall for one-character words)
            out.extend(token[i : i + 2] for i in range(len(token) - 1))
            continue
        token = token.replace("’", "'")
        if "'" in token:
            token = token.split("'", 1)[0]  # "caroline's" -> "caroline", "don't" -> "don"
        if token in STOP_WORDS or (len(token) == 1 and not token.isdigit()):
            continue
        out.append(_stem(token))
    return out


def date_words(moment: datetime) -> str:
    """How a date is written into indexed text: "Monday 8 May 2023"."""
    weekday, month = _WEEKDAYS[moment.weekday()].title(), _MONTHS[moment.month - 1].title()
    return f"{weekday} {moment.day} {month} {moment.year}"


_RELATIVE = re.compile(
    r"\b(?:(yesterday|today|tonight)|(last|this|next|past)\s+(week|month|year|weekend|"
    + "|".join(_WEEKDAYS)
    + r")|(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago)\b",
    re.IGNORECASE,
)
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def relative_date_words(question: str, now: datetime) -> str:
    """Words naming the dates a question refers to relative to `now` ("last week" on
    14 January 2026 -> "January 2026 ..."), to add to the lexical query. Empty when none."""
    found: list[tuple[datetime, bool]] = []  # (date, whether its month is meant)
    for m in _RELATIVE.finditer(question):
        word, which, unit, count, ago_unit = (g.lower() if g else g for g in m.groups())
        if word:
            found.append((now - timedelta(days=1) if word == "yesterday" else now, True))
        elif which and unit:
            step = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
            if unit in _WEEKDAYS:
                delta = (now.weekday() - _WEEKDAYS.index(unit)) % 7 or 7
                found.append((now - timedelta(days=delta) if step <= 0 else now, True))
            elif unit in ("week", "weekend"):
                found.append((now + timedelta(weeks=step), True))
            elif unit == "month":
                month = (now.month - 1 + step) % 12 + 1
                year = now.year + (now.month - 1 + step) // 12
                found.append((now.replace(year=year, month=month, day=1), True))
            else:
                found.append((now.replace(year=now.year + step, month=1, day=1), False))
        elif count and ago_unit:
            n = int(count) if count.isdigit() else _NUMBERS.get(count, 1)
            days = {"day": 1, "week": 7, "month": 30, "year": 365}[ago_unit] * n
            found.append((now - timedelta(days=days), ago_unit != "year"))
    words: list[str] = []
    for moment, with_month in found:
        words.extend(
            [_MONTHS[moment.month - 1], str(moment.year)] if with_month else [str(moment.year)]
        )
    return " ".join(dict.fromkeys(words))
