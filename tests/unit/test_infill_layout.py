"""/infill's prompt, laid out as llama-server's format_prompt_infill does: repository context,
then prefix and prompt, suffix, FIM_MID (or suffix first with --spm-infill)."""

from __future__ import annotations

from typing import Any

from app.handlers.infill import SNIPPET_SEPARATOR, ExtraChunk, InfillBody, InfillLayout, infill_prompt

PRE, SUF, MID, REP, SEP, BOS = -1, -2, -3, -4, -5, -6
FIM = {"fim_pre": PRE, "fim_suf": SUF, "fim_mid": MID}
REPO = {**FIM, "fim_rep": REP, "fim_sep": SEP}


class Letters:
    """A vocabulary of one token per character (its code point)."""

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return [ord(c) for c in text]


def text(tokens: list[int]) -> str:
    names = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}
    return "".join(names[t] if t < 0 else chr(t) for t in tokens)


def layout(**fields: Any) -> InfillLayout:
    return InfillLayout(**{"n_batch": 512, "n_ctx": 4096, "n_predict": -1, **fields})


BODY = InfillBody(input_prefix="def f(", input_suffix=")\n", prompt="x")


def test_prefix_and_prompt_then_suffix_then_middle() -> None:
    assert text(infill_prompt(Letters(), FIM, BODY, [], layout())) == "<PRE>def f(x<SUF>)\n<MID>"  # type: ignore[arg-type]


def test_spm_puts_the_suffix_first() -> None:
    spm = infill_prompt(Letters(), FIM, BODY, [], layout(spm=True))  # type: ignore[arg-type]
    assert text(spm) == "<SUF>)\n<PRE>def f(x<MID>"


def test_repository_context_with_file_names_and_a_bos() -> None:
    extra = [ExtraChunk(filename="a.py", text="A"), ExtraChunk(text="B")]
    prompt = infill_prompt(Letters(), REPO, BODY, extra, layout(bos=BOS))  # type: ignore[arg-type]
    assert text(prompt) == "<REP>myproject\n<SEP>a.py\nA<SEP>tmp\nB<SEP>filename\n<BOS><PRE>def f(x<SUF>)\n<MID>"


def test_snippets_without_repository_tokens() -> None:
    prompt = infill_prompt(Letters(), FIM, BODY, [ExtraChunk(text="A"), ExtraChunk(text="B")],  # type: ignore[arg-type]
                           layout())
    assert text(prompt) == f"{SNIPPET_SEPARATOR}A{SNIPPET_SEPARATOR}B<PRE>def f(x<SUF>)\n<MID>"


def test_the_context_keeps_its_end_within_what_the_batch_and_answer_leave() -> None:
    body = InfillBody(input_prefix="p" * 20, input_suffix="s" * 20, prompt="")
    small = layout(n_batch=16, n_ctx=16 + 12, n_predict=0)
    prompt = text(infill_prompt(Letters(), REPO, body, [ExtraChunk(filename="f", text="0123456789")], small))  # type: ignore[arg-type]
    assert prompt.startswith("89<SEP>filename\n<PRE>")  # the last 12 tokens of the repository context
    assert prompt.count("p") == 12 and prompt.count("s") == 2  # 3/4 of the batch for the prefix, the rest less 2
