"""What a request means beyond its exact words, for lexical tool selection without an embedder.

People ask "do I need an umbrella" of a weather forecast tool, "where's my parcel" of an order
lookup and "is prod on fire" of a status page: BM25 alone matches none of them. Two cheap
expansions close most of that gap:

- concept groups: words of everyday work talk that point at the same kind of tool (weather,
  shipping, tickets, outages, calendars, leave, money, code review, builds, documentation...).
  A request word in a group adds the group's other words at a lower weight. Written from general
  knowledge of what such tools are called and how people ask for them, not from a benchmark's
  wording; kept to common words so a wrong expansion costs little.
- entity shapes: an issue key (`ABC-123`), an e-mail address, a repository (`owner/name`), an
  amount (`$40`), a version (`v2.1.0`), a date or a time of day in a request add the words a
  tool's parameters use for them ("key", "email", "repo", "amount", "version", "date", "time");
  an id shape in a tool's own examples (`e.g. OPS-123`) becomes a term both sides share.

Everything here is a dict look-up or one regular-expression pass per request: microseconds.
"""

from __future__ import annotations

import re

import Stemmer

_STEMMER = Stemmer.Stemmer("english")

_GROUPS: tuple[str, ...] = (
    # weather
    "weather forecast temperature rain rainy umbrella sunny sun snow snowing cold hot warm "
    "wind windy storm cloudy humid humidity degrees celsius fahrenheit freezing",
    # orders and shipping
    "order parcel package shipment shipping shipped delivery delivered deliver tracking track "
    "courier arrive arrived purchase",
    # tickets and bugs
    "issue ticket bug bugs defect problem task tracker backlog",
    # service health
    "status health down outage degraded fire broken incident alive working unavailable",
    "prod production live",
    "deploy deployment release rollout ship shipped",
    "rollback revert undo previous",
    "metrics latency slow performance error traffic throughput",
    # calendar
    "meeting meetings calendar event events agenda schedule appointment sync standup invite busy",
    "free available availability slot",
    "room booking book",
    # people and leave
    "vacation pto leave holiday holidays off sick absence",
    "employee colleague directory staff manager manages team phone",
    "contact contacts customer client person people",
    "policy policies rules allowed expense expenses reimburse reimbursement",
    # money
    "refund reimburse money back charged charge overcharged chargeback payment",
    "invoice invoices bill billing paid unpaid overdue owe",
    "subscription plan tier seats renew renewal renews upgrade downgrade",
    "deal deals opportunity opportunities sales pipeline stage",
    "activity call meeting email log",
    # code
    "commit commits merged merge pushed push history changes changelog",
    "ci build builds pipeline checks failing failed tests run job",
    "pr prs pull request requests review reviewers",
    "code source function call repository repo",
    # documents
    "wiki documentation docs doc page pages written guide howto runbook article knowledge "
    "notes write",
    "search find look lookup query mention mentioning about",
    # acting on things
    "assign assignee give hand reassign delegate owner",
    "comment note reply",
    "cancel delete remove drop",
    "create new file open add raise",
    "remember memorize note keep mind forget",
    "recent recently latest changed new edited",
)

_WORD = re.compile(r"[a-z0-9]+")


def _stems(text: str) -> list[str]:
    return list(_STEMMER.stemWords(_WORD.findall(text.lower())))


def _build() -> dict[str, frozenset[str]]:
    related: dict[str, set[str]] = {}
    for group in _GROUPS:
        stems = set(_stems(group))
        for stem in stems:
            related.setdefault(stem, set()).update(stems - {stem})
    return {k: frozenset(v) for k, v in related.items()}


RELATED: dict[str, frozenset[str]] = _build()

_SHAPES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"\b[A-Za-z][\w.+-]*@[\w-]+\.[\w.-]+\b"), ("email",)),
    (re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b"), ("key", "idkeyshape")),
    (re.compile(r"#?\b[A-Z]{1,3}\d{4,}\b"), ("id", "idcodeshape")),
    (re.compile(r"\b[a-z][\w.-]*/[\w.-]+\b"), ("repo",)),
    (re.compile(r"[$€£]\s?\d|\b\d+(?:\.\d+)?\s?(?:usd|eur|dollars?|euros?)\b", re.I), ("amount",)),
    (re.compile(r"\bv\d+(?:\.\d+){1,3}\b"), ("version",)),
    (re.compile(r"https?://\S+"), ("url",)),
    (
        re.compile(
            r"\b(?:today|tomorrow|yesterday|tonight|week|weekend|month|monday|tuesday|wednesday|"
            r"thursday|friday|saturday|sunday|jan(?:uary)?|feb(?:ruary)?|march|april|may|june|"
            r"july|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|"
            r"\d{4}-\d{2}-\d{2})\b",
            re.I,
        ),
        ("date",),
    ),
    (
        re.compile(r"\b(?:\d{1,2}(?::\d{2})?\s?(?:am|pm)|morning|afternoon|evening|noon)\b", re.I),
        ("time",),
    ),
)
# Shapes of ids a tool shows in its own examples ("e.g. OPS-123"): a private term both share.
_DOC_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (_SHAPES[1][0], "idkeyshape"),
    (_SHAPES[2][0], "idcodeshape"),
)


def shape_terms(text: str) -> list[str]:
    """Stemmed words for the entities a request contains (at most one of each kind)."""
    out: list[str] = []
    for pattern, words in _SHAPES:
        if pattern.search(text):
            out.extend(_STEMMER.stemWords(list(words)))
    return out


def doc_shape_terms(text: str) -> list[str]:
    """The id shapes a tool's own text shows (its examples), as terms requests can share."""
    return list(_STEMMER.stemWords([term for pattern, term in _DOC_SHAPES if pattern.search(text)]))
