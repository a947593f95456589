"""The text side of a job (app/engine/generation.py), alone: stop strings held back while
streaming, line limits, the token limit, and the final chunk."""

from __future__ import annotations

from app.engine.generation import Generation
from app.engine.types import FinishReason, GenerationRequest


def feed(generation: Generation, pieces: list[bytes], elapsed_ms: float = 0.0) -> list[FinishReason | None]:
    outcomes = []
    for number, piece in enumerate(pieces):
        outcomes.append(generation.add(100 + number, piece, None, elapsed_ms).finish)
    return outcomes


def test_a_partial_stop_string_is_held_back_then_cut() -> None:
    generation = Generation(GenerationRequest(prompt=(1,), stop=("END",)))
    assert feed(generation, [b"Hello ", b"E"]) == [None, None]
    first = generation.chunk(0)
    assert first is not None and first.text == "Hello " and first.tokens == (100, 101)
    assert generation.chunk(0) is None  # "E" may start the stop string: nothing new to send
    outcome = generation.add(102, b"ND more", None, 0.0)
    assert (outcome.finish, outcome.stop_word) == (FinishReason.WORD, "END")
    assert generation.text == "Hello "
    final = generation.chunk(0, final=True)
    assert final is not None and final.text == "" and final.tokens == (102,)


def test_a_token_without_text_travels_with_the_next_chunk() -> None:
    generation = Generation(GenerationRequest(prompt=(1,)))
    data = "✓".encode()
    generation.add(7, data[:1], None, 0.0)
    generation.add(8, data[1:2], None, 0.0)
    assert generation.chunk(0) is None  # half a character: no text yet, the tokens wait
    generation.add(9, data[2:], None, 0.0)
    chunk = generation.chunk(0)
    assert chunk is not None and chunk.text == "✓" and chunk.tokens == (7, 8, 9) and chunk.n_predicted == 3


def test_line_limits_and_the_token_limit() -> None:
    indented = Generation(GenerationRequest(prompt=(1,), n_indent=4))
    assert feed(indented, [b"    a\n", b"    b\n", b"c\n"])[-1] is FinishReason.LIMIT
    assert indented.text == "    a\n    b"
    timed = Generation(GenerationRequest(prompt=(1,), t_max_predict_ms=10))
    assert feed(timed, [b"line"], elapsed_ms=50) == [None]  # no new line yet
    assert feed(timed, [b"\n"], elapsed_ms=50) == [FinishReason.LIMIT]
    limited = Generation(GenerationRequest(prompt=(1,), n_predict=2))
    assert feed(limited, [b"a", b"b"]) == [None, FinishReason.LIMIT]
    final = limited.chunk(3, final=True)
    assert final is not None and (final.text, final.n_predicted, final.id_slot) == ("ab", 2, 3)
