"""Matching as people type (`bot.textfold`) and finding a person's quoted words in other
records (`bot.memory.copies`): what is cut, what is kept."""

from __future__ import annotations

import unicodedata
from typing import Any

from bot.memory.copies import WordCutter
from bot.textfold import CUT_MARK, contains, cut, fold, spans


def test_case_and_unicode_forms_fold_alike() -> None:
    composed = unicodedata.normalize("NFC", "Café Straße")
    decomposed = unicodedata.normalize("NFD", "CAFÉ STRASSE")
    assert fold(composed) == fold(decomposed) == fold("café  strasse")
    assert contains("we met at the CAFE\u0301 on Strasse 4", "café on straße")
    assert not contains("resume", "résumé")  # accents are kept
    assert not contains("anything", "")


def test_spans_map_back_to_the_original_through_length_changes() -> None:
    text = "Die Straße heißt GROSSE Allee, ok?"
    ranges = spans(text, ["strasse heisst grosse"])
    assert [text[a:b] for a, b in ranges] == ["Straße heißt GROSSE"]
    assert cut(text, ranges) == f"Die {CUT_MARK} Allee, ok?"


def test_a_quote_is_cut_and_the_rest_kept() -> None:
    alice = WordCutter.of(["My locker combination is 4471 and my cat is called Mr Whiskerton."])
    reply = "Sure, Bob! She said: MY LOCKER COMBINATION is 4471 and my cat. See you at 5."
    out = alice.cut(reply)
    assert "locker" not in out.lower() and "4471" not in out
    assert out.startswith("Sure, Bob! She said: ") and out.endswith(". See you at 5.")


def test_a_distinctive_short_sentence_or_code_is_a_quote() -> None:
    alice = WordCutter.of(["Whiskerton is my cat.", "kiwi7f3a", "Straße-4242"])
    assert alice.cut("the cat: whiskerton is my cat!") == f"the cat: {CUT_MARK}!"
    assert CUT_MARK in alice.cut("the code was KIWI7F3A")
    assert alice.cut("code strasse 4242 ok") == f"code {CUT_MARK} ok"


def test_common_words_are_everyones_and_never_cut() -> None:
    alice = WordCutter.of(["Thank you so much!", "yes", "I love my cat.", "ok 2", "t1"])
    bobs = "Thank you so much, yes, I love my cat too. ok 2 t1"
    assert alice.cut(bobs) == bobs
    assert not alice.spans(bobs)


def test_a_paraphrase_is_not_a_quote() -> None:
    alice = WordCutter.of(["My locker combination is 4471 and my cat is called Mr Whiskerton."])
    assert alice.cut("her cat has a funny name") == "her cat has a funny name"


def test_inputs_a_thousand_times_larger_are_read_once() -> None:
    """A long person history and a long record: linear work (sets of n-grams), no blow-up."""
    alice = WordCutter.of([f"secret number {i} of alice says hello there" for i in range(2000)])
    record = "nothing to see here " * 50_000 + "secret number 1999 of alice says hello there"
    out = alice.cut(record)
    assert out.endswith(CUT_MARK) and out.count(CUT_MARK) == 1


def test_a_tombstone_knows_the_fact_in_other_words_and_not_another_fact() -> None:
    from bot.memory.tombstones import buried, tombstone_of
    from bot.stores.records import Fact

    stone = tombstone_of(
        Fact(id="f1", person="slack:T1:UA", text="I am allergic to pangolin-scales-5")
    )
    assert "pangolin" not in stone.model_dump_json()  # no text kept
    assert buried("Is allergic to Pangolin-Scales-5.", "", [stone])
    assert buried("anything at all", "s#3", [stone.model_copy(update={"sources": ["s#3"]})])
    assert not buried("Is allergic to peanuts", "", [stone])
    assert not buried("Has a pangolin called Scales", "", [stone])


async def test_forget_all_drops_saved_extractions_that_do_not_name_the_person(
    tmp_path: Any,
) -> None:
    """A consolidation step saved before it was applied may hold the person's words though its
    candidates name only others (a memory whose people list missed them): it goes, to be
    extracted again from what is left."""
    from bot.keys import PersonKey, SessionKey
    from bot.memory.erasure import Eraser
    from bot.stores.records import NewMessage, PendingConsolidation, PendingMemory
    from bot.stores.sqlite import SqliteStore

    store = await SqliteStore.open(tmp_path / "bot.db")
    try:
        session = SessionKey("slack", "T1", "C1")
        alice, bob = PersonKey("slack", "T1", "UA"), PersonKey("slack", "T1", "UB")
        await store.append(
            session,
            [
                NewMessage(role="user", content="my code is 4471", speaker=alice.id, turn_id="a"),
                NewMessage(role="user", content="noted", speaker=bob.id, turn_id="b"),
            ],
        )
        state = await store.get_state(session)
        assert state is None
        from bot.stores.records import SessionState

        saved = SessionState(
            session=session.id,
            consolidation=PendingConsolidation(
                upto_seq=2, memories=[PendingMemory(text="Alice's code is 4471", people=[bob.id])]
            ),
        )
        assert await store.put_state(session, saved)
        await Eraser(store).forget_all(alice)
        after = await store.get_state(session)
        assert after is not None and after.consolidation is None
    finally:
        await store.close()
