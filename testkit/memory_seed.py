"""A seeded month of team conversations for the consolidation tests and benchmark.

Each person has a profile (durable facts they state, some of which change during the month:
"I am vegetarian" early, "I eat fish now" later) and says, besides, greetings, passing moods,
questions and small talk. The bot's replies restate preferences ("As a vegetarian, ...") and
some messages carry text recalled from memory (inside <recalled-memory> tags), exactly what a
careless extractor turns into junk facts. `expected_live(person)` is the oracle: the facts that
must be live after consolidating everything, written independently of the code under test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bot.keys import PersonKey, SessionKey
from bot.stores.protocols import Store
from bot.stores.records import NewMessage

TEAM = "T1"
PLATFORM = "test"


@dataclass
class Person:
    user: str
    statements: list[tuple[int, str, str]]  # (day, subject, sentence) as they say them
    final: dict[str, str]  # subject -> a word the live fact on it must contain
    key: PersonKey = field(init=False)

    def __post_init__(self) -> None:
        self.key = PersonKey(PLATFORM, TEAM, self.user)


PEOPLE = [
    Person(
        "UA",
        [
            (1, "diet", "I am vegetarian."),
            (4, "diet", "I eat fish now."),
            (9, "home_city", "I live in Lyon."),
        ],
        {"diet": "fish", "home_city": "Lyon"},
    ),
    Person(
        "UB",
        [
            (2, "preferred_units", "I prefer celsius."),
            (3, "allergy", "I am allergic to peanuts."),
            (12, "home_city", "I moved to Porto."),
        ],
        {"preferred_units": "celsius", "allergy": "peanuts", "home_city": "Porto"},
    ),
    Person(
        "UC",
        [
            (1, "drink", "I prefer tea."),
            (15, "home_city", "I live in Berlin."),
            (20, "drink", "I prefer coffee."),
        ],
        {"drink": "coffee", "home_city": "Berlin"},
    ),
    Person("UD", [(5, "pet", "I have a dog.")], {"pet": "dog"}),
]

NOISE = [
    "hi!",
    "good morning",
    "thanks",
    "I'm tired today",
    "I'm so hungry right now",
    "can you help me draft an email to the supplier?",
    "what is the capital of Portugal?",
    "let's ship the release on Friday",
    "maybe I'll move to Porto",
]

BOT_RESTATES = [
    "As a vegetarian, you might like the lentil soup.",
    "Since you live in Lyon, the train is quickest.",
    "You prefer celsius, so it is 21 degrees.",
    "Noted: you are allergic to peanuts.",
]


def sessions(days: int) -> list[SessionKey]:
    return [
        SessionKey(PLATFORM, TEAM, "C-general"),
        SessionKey(PLATFORM, TEAM, "C-random"),
        *(SessionKey(PLATFORM, TEAM, f"D-{p.user}") for p in PEOPLE),
        *(SessionKey(PLATFORM, TEAM, "C-general", f"th{d}") for d in range(1, days + 1, 3)),
    ]


def expected_live(person: Person) -> dict[str, str]:
    return dict(person.final)


async def seed(store: Store, *, days: int = 30, seed_value: int = 7) -> int:
    """Write `days` days of conversation; returns how many messages."""
    rng = random.Random(seed_value)
    places = sessions(days)
    written = 0
    turn = 0
    for day in range(1, days + 1):
        for person in PEOPLE:
            said = [s for d, _, s in person.statements if d == day]
            latest = {k: s for d, k, s in person.statements if d < day}  # current, per subject
            lines = rng.sample(NOISE, 2)
            if day % 3 == 0 and latest:  # a repeat of something already said (and still true)
                lines.append(latest[rng.choice(sorted(latest))])
            rng.shuffle(lines)
            lines += said  # what changes today comes after today's repeats
            dm = SessionKey(PLATFORM, TEAM, f"D-{person.user}")
            for text in lines:
                place = dm if rng.random() < 0.4 else rng.choice(places[:2] + places[6:])
                turn += 1
                user_text = text
                if rng.random() < 0.2:  # a client quoting what the bot recalled
                    user_text = (
                        "<recalled-memory>\n- Is vegan\n- Lives in Madrid\n</recalled-memory> "
                        + text
                    )
                reply = rng.choice(BOT_RESTATES) if rng.random() < 0.5 else f"ok: {text[:40]}"
                messages = [
                    NewMessage(
                        role="user",
                        content=user_text,
                        speaker=person.key.id,
                        turn_id=f"t{turn}",
                        meta={"day": day},
                    ),
                    NewMessage(
                        role="assistant",
                        content=reply,
                        speaker=person.key.id,
                        turn_id=f"t{turn}",
                    ),
                ]
                await store.append(place, messages)
                written += len(messages)
    return written
