"""Stop strings and UTF-8-safe decoding."""

from __future__ import annotations

from app.engine.text import Utf8Stream, partial_stop_length, scan_for_stop


def test_partial_stop_length() -> None:
    assert partial_stop_length("Hello wor", ("world",)) == 3
    assert partial_stop_length("Hello", ("world",)) == 0
    assert partial_stop_length("abc<|", ("<|end|>", "xx")) == 2
    assert partial_stop_length("abcx", ("<|end|>", "xx")) == 1


def test_scan_finds_the_earliest_stop() -> None:
    scan = scan_for_stop("one two three", 0, ("three", "two"))
    assert (scan.safe_end, scan.stop_word) == (4, "two")


def test_scan_holds_back_a_partial_match() -> None:
    scan = scan_for_stop("answer: 42\nUs", 0, ("\nUser:",))
    assert scan.stop_word is None
    assert scan.safe_end == len("answer: 42")


def test_scan_sees_a_stop_that_straddles_the_searched_boundary() -> None:
    scan = scan_for_stop("abcSTOP", 5, ("STOP",))
    assert (scan.safe_end, scan.stop_word) == (3, "STOP")


def test_utf8_stream_waits_for_the_whole_character() -> None:
    stream = Utf8Stream()
    data = "✓".encode()
    assert stream.feed(data[:1]) == ""
    assert stream.feed(data[1:2]) == ""
    assert stream.feed(data[2:]) == "✓"
    assert stream.feed(b"\xff") == "\ufffd"
    assert stream.feed(b"\xe2") == ""  # a character cut at the end stays out of the text
