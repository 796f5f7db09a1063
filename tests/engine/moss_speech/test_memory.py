"""The model context of a conversation (app/engine/moss_speech/memory.py): system turn first,
exchanges in order, prompts that share their prefix with the cache, and the history cut."""

from __future__ import annotations

import pytest

from app.engine.moss_speech.memory import (
    DEFAULT_SYSTEM_PROMPTS,
    ContextFullError,
    ConversationMemory,
)
from app.engine.moss_speech.prompt import Turn, assistant_prefix_rows, turn_rows
from app.engine.moss_speech.tokenizer import MossTokenizer

CODES = (5, 6, 7, 8)


def spoken(*codes: int) -> Turn:
    return Turn("user", codes)


def memory_with(tokenizer: MossTokenizer, exchanges: int, capacity_rows: int = 4096,
                reply: bool = True) -> ConversationMemory:
    """A memory holding ``exchanges`` answered spoken turns, each ``codes_i`` distinct."""
    memory = ConversationMemory(tokenizer, capacity_rows)
    for i in range(exchanges):
        memory.commit(spoken(i, i + 1), Turn("assistant", (100 + i,)) if reply else None)
    return memory


def test_the_system_turn_comes_first_and_an_empty_setting_takes_the_modality_default(
        tokenizer: MossTokenizer) -> None:
    memory = ConversationMemory(tokenizer, 512)
    audio_system = turn_rows(tokenizer, Turn("system", DEFAULT_SYSTEM_PROMPTS["audio"]))
    assert memory.history_rows() == audio_system
    assert memory.history_rows_count == len(audio_system)
    memory.configure("   ", "text")
    assert memory.history_rows() == turn_rows(tokenizer,
                                              Turn("system", DEFAULT_SYSTEM_PROMPTS["text"]))
    memory.configure("  Be brief.\n", "text")  # surrounding whitespace is not part of it
    assert memory.history_rows() == turn_rows(tokenizer, Turn("system", "Be brief."))
    assert ConversationMemory(tokenizer, 512, " Be brief.", "audio").history_rows() == \
        memory.history_rows()


def test_the_assistant_prefix_follows_the_reply_modality(tokenizer: MossTokenizer) -> None:
    memory = ConversationMemory(tokenizer, 512)
    speech_prefix = memory.assistant_prefix()
    assert speech_prefix == assistant_prefix_rows(tokenizer, "audio")
    assert speech_prefix[-1] == (tokenizer.config.sosp_token_id,
                                 tokenizer.config.audio_pad_token_id)
    speech_prefix.clear()  # the caller's copy: the memory's own rows stay
    assert memory.assistant_prefix() == assistant_prefix_rows(tokenizer, "audio")
    memory.configure("", "text")
    assert memory.assistant_prefix() == assistant_prefix_rows(tokenizer, "text")


def test_exchanges_are_remembered_in_order_with_what_the_user_heard(
        tokenizer: MossTokenizer) -> None:
    memory = ConversationMemory(tokenizer, 512)
    system = memory.history_rows()
    heard = memory.commit(spoken(*CODES), Turn("assistant", (9, 10)))
    unheard = memory.commit(spoken(11), None)
    assert heard.rows == tuple(turn_rows(tokenizer, spoken(*CODES))
                               + turn_rows(tokenizer, Turn("assistant", (9, 10))))
    assert unheard.rows == tuple(turn_rows(tokenizer, spoken(11)))
    assert (heard.user, heard.assistant) == (spoken(*CODES), Turn("assistant", (9, 10)))
    assert (unheard.user, unheard.assistant) == (spoken(11), None)
    assert memory.exchanges == [heard, unheard]
    assert memory.history_rows() == system + list(heard.rows) + list(unheard.rows)
    assert memory.history_rows() == memory.history_rows()  # building it changes nothing
    assert memory.history_rows_count == len(memory.history_rows())


def test_a_prompt_is_the_history_then_the_turn_then_the_assistant_prefix(
        tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 2)
    history = memory.history_rows()
    prompt = memory.prompt(spoken(*CODES), reserve_rows=100)
    assert prompt == history + turn_rows(tokenizer, spoken(*CODES)) + memory.assistant_prefix()
    typed = memory.prompt(Turn("user", "What time is it?"), reserve_rows=100)
    assert typed == (history + turn_rows(tokenizer, Turn("user", "What time is it?"))
                     + memory.assistant_prefix())
    assert len(memory.exchanges) == 2  # a prompt does not commit the turn


def test_the_rows_of_a_turn_still_going_are_the_first_rows_of_the_finished_turn(
        tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 1)
    finished = memory.prompt(spoken(*CODES), reserve_rows=10)
    for heard in range(len(CODES) + 1):
        partial = memory.partial_prompt(CODES[:heard], reserve_rows=10)
        assert partial == finished[:len(partial)]
        assert memory.partial_user_rows(CODES[:heard]) == partial[memory.history_rows_count:]
    # all codes heard: only eosp and <|im_end|>\n, then the assistant prefix, are left
    left = finished[len(memory.partial_prompt(CODES, reserve_rows=10)):]
    cfg = tokenizer.config
    assert left[0] == (cfg.modality_pad_token_id, cfg.eosp_token_id)
    assert left[3:] == memory.assistant_prefix()


def test_an_early_prefill_cuts_the_history_exactly_where_the_finished_turn_will(
        tokenizer: MossTokenizer) -> None:
    """So the rows prefilled while the user talks are still the prefix of the final prompt."""
    full = memory_with(tokenizer, 6)
    rows_needed = (full.history_rows_count + len(full.user_rows(spoken(*CODES)))
                   + len(full.assistant_prefix()) + 20)
    seen_drops = set()
    for capacity in range(rows_needed - 60, rows_needed + 3):
        early, final = memory_with(tokenizer, 6, capacity), memory_with(tokenizer, 6, capacity)
        early.partial_prompt(CODES, reserve_rows=20)
        final.prompt(spoken(*CODES), reserve_rows=20)
        assert len(early.exchanges) == len(final.exchanges), capacity
        assert early.dropped == final.dropped
        seen_drops.add(final.dropped)
    assert 0 in seen_drops and len(seen_drops) > 2  # the range covers no cut and several cuts


def test_nothing_is_dropped_while_the_turn_fits_even_exactly(tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 3)
    history = memory.history_rows()
    capacity = memory.history_rows_count + 50
    memory.capacity_rows = capacity
    assert memory.make_room(50) == 0  # history + needed == capacity
    assert memory.history_rows() == history and memory.dropped == 0
    assert memory.make_room(51) > 0  # one row more: the oldest exchange leaves


def test_when_it_must_drop_it_drops_the_oldest_until_an_eighth_is_free(
        tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 10, capacity_rows=400)
    exchanges = list(memory.exchanges)
    system_rows = memory.history_rows_count - sum(len(e.rows) for e in exchanges)
    needed = 400 - memory.history_rows_count + 1  # one row too many
    dropped = memory.make_room(needed)
    assert memory.exchanges == exchanges[dropped:]  # the newest stay, in order
    target = 400 - needed - 400 // 8
    assert memory.history_rows_count <= target
    one_fewer = system_rows + sum(len(e.rows) for e in exchanges[dropped - 1:])
    assert one_fewer > target  # and no more than that
    assert memory.dropped == dropped
    assert memory.make_room(needed) == 0  # now there is room to spare
    memory.exchanges.append(exchanges[0])
    again = memory.make_room(400 - memory.history_rows_count + 1)
    assert again > 0 and memory.dropped == dropped + again  # counted over the conversation


def test_dropping_stops_as_soon_as_the_history_is_down_to_the_target(
        tokenizer: MossTokenizer) -> None:
    """Even when it lands on the target exactly, and the capacity is no multiple of 8."""
    memory = memory_with(tokenizer, 8)
    per_exchange = len(memory.exchanges[0].rows)
    assert {len(e.rows) for e in memory.exchanges} == {per_exchange}
    capacity = 401  # an eighth: 50 rows (rounded down)
    kept = memory.history_rows_count - 4 * per_exchange  # what 4 dropped exchanges leave
    limit = kept + capacity // 8  # so the target is exactly `kept`
    memory.capacity_rows = capacity
    assert memory.make_room(capacity - limit) == 4
    assert memory.history_rows_count == kept and len(memory.exchanges) == 4


def test_a_turn_that_fits_only_without_any_exchange_drops_them_all(
        tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 4, capacity_rows=300)
    system_rows = len(memory.history_rows()) - sum(len(e.rows) for e in memory.exchanges)
    assert memory.make_room(300 - system_rows) == 4
    assert memory.exchanges == [] and memory.history_rows_count == system_rows


def test_a_turn_longer_than_the_context_is_refused_with_advice(tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 2, capacity_rows=300)
    system_rows = memory.history_rows_count - sum(len(e.rows) for e in memory.exchanges)
    assert memory.make_room(300 - system_rows) == 2  # fits exactly beside the system turn
    memory = memory_with(tokenizer, 2, capacity_rows=300)
    with pytest.raises(ContextFullError) as refused:
        memory.make_room(300 - system_rows + 1)
    error = refused.value
    assert str(error) == (f"This turn needs {301} rows of model context (with room for the "
                          f"longest reply) but the context holds 300.")
    assert error.category == "input"
    assert error.action == ("Speak in shorter turns, raise Settings → Engine → Context max rows, "
                            "or lower Sampling → Max new rows.")
    assert len(memory.exchanges) == 2 and memory.dropped == 0  # nothing lost by refusing
    with pytest.raises(ContextFullError):
        memory.prompt(spoken(*range(300)), reserve_rows=0)


def test_clear_forgets_the_exchanges_and_the_drop_count(tokenizer: MossTokenizer) -> None:
    memory = memory_with(tokenizer, 10, capacity_rows=400)
    memory.make_room(200)
    assert memory.dropped > 0
    system = memory.history_rows()[:memory.history_rows_count
                                   - sum(len(e.rows) for e in memory.exchanges)]
    memory.clear()
    assert memory.exchanges == [] and memory.dropped == 0
    assert memory.history_rows() == system
