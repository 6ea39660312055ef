"""The image decode budget on its own (FIFO grants, timeouts, releases from other threads), and
what an image over it gets: a note from its header, before anything is decoded."""

from __future__ import annotations

import asyncio
import io
import threading

import pytest
from PIL import Image

from bot.files.decode_budget import DecodeBudget
from bot.files.images import (
    DECODE_BUDGET_BYTES,
    ImageUnreadable,
    plan_image,
    prepare_image,
    prepare_image_bounded,
)
from bot.files.intake import FileLimits
from bot.files.prepare import prepare_files
from bot.tokens import TokenCounter
from testkit.files import attachment, make_large_png, make_png


async def _until(condition: object) -> None:
    """Yield to the loop until `condition()` holds (a positive signal, not a sleep)."""
    for _ in range(10_000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_grants_are_in_arrival_order_and_a_large_waiter_is_not_overtaken() -> None:
    budget = DecodeBudget(10)
    await budget.acquire(8, timeout=5)
    large = asyncio.create_task(budget.acquire(5, timeout=5))
    small = asyncio.create_task(budget.acquire(1, timeout=5))  # would fit, but arrived later
    await _until(lambda: budget.waiting == 2)
    assert not large.done() and not small.done() and budget.used == 8
    budget.release(8)
    await asyncio.gather(large, small)
    assert budget.used == 6 and budget.waiting == 0


async def test_a_waiter_that_times_out_gives_up_and_lets_the_next_one_in() -> None:
    budget = DecodeBudget(10)
    await budget.acquire(6, timeout=5)
    with pytest.raises(TimeoutError):
        await budget.acquire(9, timeout=0.05)
    assert budget.used == 6 and budget.waiting == 0
    await budget.acquire(4, timeout=5)  # fits beside the first: granted at once
    assert budget.used == 10
    with pytest.raises(ValueError):
        await budget.acquire(11, timeout=5)  # more than the whole budget: the caller's bug


async def test_a_release_from_a_decode_thread_wakes_the_waiting_turn() -> None:
    budget = DecodeBudget(10)
    await budget.acquire(10, timeout=5)
    waiter = asyncio.create_task(budget.acquire(10, timeout=30))
    await _until(lambda: budget.waiting == 1)
    thread = threading.Thread(target=budget.release, args=(10,))
    thread.start()
    await waiter
    thread.join()
    assert budget.used == 10


def _webp(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (9, 9, 9)).save(out, format="WEBP", quality=10)
    return out.getvalue()


async def test_an_image_over_the_budget_is_refused_from_its_header_with_a_note() -> None:
    big = _webp(4500, 4500)  # 20 MP, under the pixel limit; WebP's decoder holds 3 copies
    with pytest.raises(ImageUnreadable) as refused:
        plan_image(big)
    assert "4500x4500" in str(refused.value)
    assert f"{DECODE_BUDGET_BYTES // 2**20} MB I use for images" in str(refused.value)
    with pytest.raises(ImageUnreadable):
        prepare_image(big)  # the synchronous path checks the same plan
    files = await prepare_files(
        (attachment("huge.webp", big, "image/webp"),),
        counter=TokenCounter("gpt-4o-mini"),
        limits=FileLimits(),
        share_tokens=4000,
        vision=True,
    )
    assert not files.images
    (note,) = files.blocks
    assert note.startswith("[file: huge.webp (WEBP image") and "MB of memory to open" in note


def test_a_large_png_within_the_budget_is_shrunk_in_tiles() -> None:
    prepared = prepare_image(make_large_png(6320, 6320))
    assert (prepared.original_width, prepared.original_height) == (6320, 6320)
    assert (prepared.width, prepared.height) == (1536, 1536)
    assert plan_image(make_large_png(6320, 6320)).cost <= DECODE_BUDGET_BYTES


@pytest.mark.parametrize("mode", ["RGBA", "RGB", "P"])
def test_tiled_reduction_matches_pillows_whole_image_reduce(mode: str) -> None:
    from bot.files.images import _reduced

    noise = Image.effect_noise((2500, 1700), 90).convert("RGB")
    img = noise.convert("RGBA") if mode == "RGBA" else noise.convert(mode)
    if mode == "RGBA":
        img.putalpha(Image.linear_gradient("L").resize(img.size))
    target = "RGBA" if mode == "RGBA" else "RGB"
    expected = img.convert(target).reduce(3)  # Pillow on the whole image: the oracle
    assert _reduced(img, 3, target).tobytes() == expected.tobytes()


async def test_a_full_budget_gives_a_busy_note_and_one_too_small_a_refusal() -> None:
    png = make_png(400, 300)
    busy = DecodeBudget(64 * 2**20)
    await busy.acquire(busy.capacity, timeout=1)  # other images hold it all
    with pytest.raises(ImageUnreadable) as waited:
        await prepare_image_bounded(png, budget=busy, wait=0.05)
    assert "busy opening other large images" in str(waited.value)
    assert busy.used == busy.capacity and busy.waiting == 0
    with pytest.raises(ImageUnreadable) as refused:
        await prepare_image_bounded(png, budget=DecodeBudget(2**20))
    assert "more memory to open than I use for images" in str(refused.value)


async def test_a_cancelled_turn_keeps_its_reservation_until_the_decode_is_done() -> None:
    budget = DecodeBudget(DECODE_BUDGET_BYTES)
    big = make_large_png(6320, 6320)
    cost = plan_image(big).cost
    turn = asyncio.create_task(prepare_image_bounded(big, budget=budget))
    await _until(lambda: budget.used > 0)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert budget.used == cost  # the decode thread still holds that memory
    for _ in range(600):  # then it finishes and hands the reservation back
        if budget.used == 0:
            break
        await asyncio.sleep(0.05)
    assert budget.used == 0
