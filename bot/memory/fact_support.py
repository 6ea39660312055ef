"""Is a fact candidate supported by the words of the person it is about? A lexical check the
consolidation applies to every extracted fact (`bot.memory.extraction`), so a fact filed under
someone's message must have come from what they said there: a bot reply relaying Bob's claim
("Bob says you moved to Paris") filed under Alice's adjacent "ok, thanks" is not her fact.

The rule: the fact's content words (case, accents and width folded, function words and the
person's own name left out) are matched against the words of the cited messages; a fact word
is found when a cited word shares its beginning (at least the shorter word's first five
letters, and never fewer than three: `eats`/`eat`, `allergic`/`allergy`, `moved`/`move`, not
`vegan`/`vegetarian`). Text in Chinese, Japanese or Korean has no spaces: it is matched in
overlapping pairs of characters instead. A fact is supported when at least 60 % of its words
(rounded up) are found: a paraphrase that adds a word ("Eats fish (pescatarian)" from "I eat
fish now") passes, a fact whose subject is not in the message ("Lives in Paris" under "I live in
Lyon") does not. A fact without any content word is not supported.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable

from bot.textfold import fold

MIN_SHARE = 0.6  # of the fact's words found in the cited messages
_PREFIX = 5  # letters a word and its inflections share
_MIN_PREFIX = 3
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_STOP = frozenset(
    """
    a an the and or but nor so yet of in on at to for from with by about as into onto over
    under than then that this these those there here it its it's is are was were be been being
    am i i'm im me my mine myself you your yours he him his she her hers they them their theirs
    we us our ours user person who whom which what when where why how not no do does did done
    has have had having will would shall should can could may might must also just very really
    now still already all any some each every more most other such only own same too s t
    """.split()
)


def _words(text: str) -> list[str]:
    folded = "".join(
        c for c in unicodedata.normalize("NFKD", fold(text)) if not unicodedata.combining(c)
    )
    out: list[str] = []
    for word in _WORD.findall(folded):
        if _CJK.search(word):
            out += _pairs(word)
        elif word not in _STOP:
            out.append(word)
    return out


def _pairs(word: str) -> list[str]:
    if len(word) < 2:
        return [word]
    return [word[i : i + 2] for i in range(len(word) - 1)]


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    if _CJK.search(a) or _CJK.search(b):
        return False
    need = min(_PREFIX, len(a), len(b))
    return need >= _MIN_PREFIX and a[:need] == b[:need]


def _score(fact: str, cited: Iterable[str], names: Iterable[str]) -> tuple[int, int]:
    """(fact words found in the cited texts, fact words)."""
    left_out = {w for name in names for w in _words(name)}
    wanted = [w for w in dict.fromkeys(_words(fact)) if w not in left_out]
    found = {w for text in cited for w in _words(text)}
    hits = sum(1 for w in wanted if w in found or any(_same_word(w, f) for f in found))
    return hits, len(wanted)


def supported(fact: str, cited: Iterable[str], *, names: Iterable[str] = ()) -> bool:
    """At least `MIN_SHARE` of the fact's content words (rounded up) are in the cited texts;
    `names` (the person's display names) do not count as content words."""
    hits, total = _score(fact, cited, names)
    return total > 0 and hits >= math.ceil(MIN_SHARE * total)
