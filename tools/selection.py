"""The right tools per turn: when a team has more tools than fit well in one request, offer the
ones this conversation needs.

Selection starts when a team has more than `max_tools` tools, or when their schemas would take
more than `token_share` of the context budget. Each tool is ranked against the current message
(and, with less weight, the last few of the conversation) by BM25 over its name, description and
parameter names/descriptions, English words stemmed, the request's words widened by related
words and the entities it names (`tools.selection_vocab`: "umbrella" reaches a forecast tool, an
`OPS-123` key a tool whose examples show one); with an `embed` function configured (an
async `embed(texts) -> rows of vectors`: the episodic-memory embedder's, `bot.embeddings.base`,
for one; a plain callable so the engine declares no second embedder protocol), a dense cosine
ranking is fused in by reciprocal rank. The best `offer` tools are offered, plus, always: the
built-ins (`remember`), tools called earlier in the session, and any installed tool the model
asked for although it was not offered (it is then offered from the next round on).

Ranking is pure CPU on a few dozen short documents (tokenised once per tool and cached), well
under a millisecond per turn; the embedder, when set, is the only I/O.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import Stemmer

from tools.selection_vocab import RELATED, doc_shape_terms, shape_terms

_STEMMER = Stemmer.Stemmer("english")
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOP = frozenset(
    "a an and are as at be by can could do does for from get has have how i if in is it its "
    "me my of on or our please the their them this to us use used using was we what when where "
    "which who why will with would you your tool tools".split()
)


_log = logging.getLogger(__name__)


Embed = Callable[[Sequence[str]], Awaitable[Any]]  # one vector (a sequence of floats) per text


@dataclass(frozen=True, slots=True)
class SelectionConfig:
    max_tools: int = 12  # more tools than this: select
    token_share: float = 0.2  # or their schemas take more than this share of the budget
    offer: int = 8  # ranked tools offered, besides the ones always included
    context_weight: float = 0.5  # earlier messages count this much against the current one
    shape_weight: float = 0.6  # an entity the request names (an issue key, an e-mail...)
    related_weight: float = 0.4  # a word related to one of the request's (selection_vocab)


def terms(text: str) -> list[str]:
    """Lower-cased, stop words dropped, Snowball-stemmed; `search_tickets`/`searchTickets`
    split into words."""
    spaced = _CAMEL.sub(" ", text).replace("_", " ").replace("-", " ").lower()
    words = [w for w in _WORD.findall(spaced) if w not in _STOP]
    return list(_STEMMER.stemWords(words))


def tool_text(schema: dict[str, Any]) -> str:
    """What a tool is matched on: its name, description, parameters (names, descriptions,
    enum values)."""
    fn = schema.get("function", schema)
    parts = [str(fn.get("name", "")), str(fn.get("description", ""))]
    props = (fn.get("parameters") or {}).get("properties") or {}
    for pname, spec in list(props.items())[:30]:
        parts.append(str(pname))
        if isinstance(spec, dict):
            parts.append(str(spec.get("description", ""))[:300])
            enum = spec.get("enum")
            if isinstance(enum, list):
                parts.extend(str(v) for v in enum[:20])
    return " ".join(parts)


@dataclass(slots=True)
class _Doc:
    name: str
    text: str
    tf: Counter[str]
    length: int


class ToolSelector:
    """Ranks tools for a turn. One per bot: tool documents (and vectors) are cached by content."""

    def __init__(self, config: SelectionConfig | None = None, embed: Embed | None = None):
        self.config = config or SelectionConfig()
        self.embed = embed
        self._docs: dict[str, _Doc] = {}  # by digest of the tool's schema
        self._vectors: dict[str, list[float]] = {}

    def needed(self, count: int, schema_tokens: int, budget: int) -> bool:
        cfg = self.config
        return count > cfg.max_tools or schema_tokens > cfg.token_share * budget

    def _doc(self, schema: dict[str, Any]) -> tuple[str, _Doc]:
        text = tool_text(schema)
        key = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
        doc = self._docs.get(key)
        if doc is None:
            fn = schema.get("function", schema)
            tf = Counter(terms(text))
            tf.update(doc_shape_terms(text))
            for t in terms(str(fn.get("name", ""))):  # the name says most: count it twice
                tf[t] += 1
            doc = _Doc(str(fn.get("name", "")), text, tf, sum(tf.values()))
            if len(self._docs) > 5000:
                self._docs.clear()
            self._docs[key] = doc
        return key, doc

    def lexical(
        self, schemas: Sequence[dict[str, Any]], query: str, context: Sequence[str] = ()
    ) -> dict[str, float]:
        """BM25 score per tool name (0 for no shared term)."""
        docs = [self._doc(s)[1] for s in schemas]
        weights = self.weights(query, context)
        n = len(docs)
        avg = sum(d.length for d in docs) / n if n else 1.0
        df: Counter[str] = Counter()
        for d in docs:
            df.update(set(d.tf) & weights.keys())
        k1, b = 1.2, 0.75
        scores: dict[str, float] = {}
        for d in docs:
            score = 0.0
            for t, w in weights.items():
                f = d.tf.get(t, 0)
                if not f:
                    continue
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += w * idf * f * (k1 + 1) / (f + k1 * (1 - b + b * d.length / avg))
            scores[d.name] = score
        return scores

    def weights(self, query: str, context: Sequence[str] = ()) -> dict[str, float]:
        """Each term's weight: the request's own words, then the entities it names, the words
        related to them (`tools.selection_vocab`), and the conversation's, each lower."""
        cfg = self.config
        weights: dict[str, float] = {}

        def add(found: Iterable[str], weight: float) -> None:
            for t in found:
                if weights.get(t, 0.0) < weight:
                    weights[t] = weight

        own = terms(query)
        add(own, 1.0)
        add(shape_terms(query), cfg.shape_weight)
        add((r for t in own for r in RELATED.get(t, ())), cfg.related_weight)
        for text in context:
            earlier = terms(text)
            add(earlier, cfg.context_weight)
            add(shape_terms(text), cfg.context_weight * cfg.shape_weight)
            add(
                (r for t in earlier for r in RELATED.get(t, ())),
                cfg.context_weight * cfg.related_weight,
            )
        return weights

    async def dense(
        self, schemas: Sequence[dict[str, Any]], query: str, context: Sequence[str] = ()
    ) -> dict[str, float]:
        """Cosine similarity per tool name (empty without an embedder)."""
        if self.embed is None:
            return {}
        try:
            return await self._dense(schemas, query, context)
        except Exception as exc:  # an embedder outage must not fail the turn: lexical only
            _log.warning(
                "tool_selection_embedder_failed", extra={"fields": {"error": type(exc).__name__}}
            )
            return {}

    async def _dense(
        self, schemas: Sequence[dict[str, Any]], query: str, context: Sequence[str]
    ) -> dict[str, float]:
        assert self.embed is not None
        keyed = [self._doc(s) for s in schemas]
        missing = [(k, d) for k, d in keyed if k not in self._vectors]
        if missing:
            rows = await self.embed([d.text for _k, d in missing])
            for (k, _d), row in zip(missing, rows, strict=True):
                self._vectors[k] = _unit([float(x) for x in row])
        ask = " ".join([*context[-2:], query]) if context else query
        [q] = await self.embed([ask])
        qv = _unit([float(x) for x in q])
        return {
            d.name: sum(a * b for a, b in zip(qv, self._vectors[k], strict=False)) for k, d in keyed
        }

    async def choose(
        self,
        schemas: Sequence[dict[str, Any]],
        query: str,
        context: Sequence[str] = (),
        *,
        always: Iterable[str] = (),
    ) -> list[str]:
        """Names of the tools to offer: `always` plus the best-ranked `offer` others."""
        keep = set(always)
        lex = self.lexical(schemas, query, context)
        ranked = sorted((n for n, s in lex.items() if s > 0), key=lambda n: -lex[n])
        try:
            dense = await self.dense(schemas, query, context)
        except Exception:  # an embedder that fails leaves the lexical ranking
            dense = {}
        if dense:
            fused: dict[str, float] = {}
            for rank, name in enumerate(ranked):
                fused[name] = fused.get(name, 0.0) + 1.0 / (60 + rank)
            for rank, name in enumerate(sorted(dense, key=lambda n: -dense[n])):
                fused[name] = fused.get(name, 0.0) + 1.0 / (60 + rank)
            ranked = sorted(fused, key=lambda n: -fused[n])
        chosen = [n for n in ranked if n not in keep][: self.config.offer]
        names = {str(s.get("function", s).get("name", "")) for s in schemas}
        return sorted((keep & names) | set(chosen))


def _unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]
