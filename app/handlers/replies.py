"""Which reader a chat's reply goes through, by the template's form (as llama-server picks a parser): gpt-oss's
channels and Muse Glimmer's recipients (app/handlers/harmony.py), Functionary v3.2's recipients
(app/handlers/recipients.py), or thinking tags around a thought (app/handlers/reasoning.py), each giving the
reasoning and the content (where the tool calls are then read)."""

from __future__ import annotations

from typing import Literal, Protocol

from app.handlers.harmony import HARMONY, MUSE, HarmonyStream
from app.handlers.reasoning import ReasoningStream, Split, split_reasoning
from app.handlers.recipients import RecipientStream
from app.templating.call_format import CallFormat
from app.templating.continuation import Continuation
from app.templating.dedicated import is_functionary_v3_2, is_harmony, is_muse_glimmer
from app.templating.template_caps import ThinkingTags

ReplyForm = Literal["tags", "harmony", "muse", "recipients"]


class ReplyStream(Protocol):
    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        """(reasoning, content) of the text so far that is known to be either."""


def reply_form(template_source: str) -> ReplyForm:
    if is_harmony(template_source):
        return "harmony"
    if is_muse_glimmer(template_source):
        return "muse"
    if is_functionary_v3_2(template_source):
        return "recipients"
    return "tags"


_DIALECTS = {"harmony": HARMONY, "muse": MUSE}


def reply_stream(form: ReplyForm, reasoning_format: str, opened: bool, tags: ThinkingTags,
                 call_format: CallFormat | None, continued: Continuation | None = None) -> ReplyStream:
    """``opened``: the prompt ends inside a thought; ``continued``: it continues a message (a prefill)."""
    if form == "tags":
        return ReasoningStream(reasoning_format, opened, tags)
    return _message_reader(form, reasoning_format, call_format, continued)


def split_reply(form: ReplyForm, text: str, reasoning_format: str, opened: bool, tags: ThinkingTags,
                call_format: CallFormat | None, continued: Continuation | None = None) -> Split:
    """The whole reply at once."""
    if form == "tags":
        return split_reasoning(text, reasoning_format, opened, tags)
    reader = _message_reader(form, reasoning_format, call_format, continued)
    reasoning, content = reader.feed(text, final=True)
    return Split(content, reasoning.strip() if reader.reasoned else None)


def _message_reader(form: ReplyForm, reasoning_format: str, call_format: CallFormat | None,
                    continued: Continuation | None) -> HarmonyStream | RecipientStream:
    """The reader of a form whose replies are messages (all but ``tags``), inside the continued one's."""
    if form == "recipients":
        return RecipientStream(call_format, in_answer=continued is Continuation.CONTENT)
    return HarmonyStream(reasoning_format, call_format, _DIALECTS[form], continued)


def answer_prefix(form: ReplyForm) -> str:
    """What an answer opens with after the generation prompt, in a prompt that continues one (Functionary
    v3.2's recipient line: its generation prompt ends with ``>>>``)."""
    return "all\n" if form == "recipients" else ""


def reply_markup(form: ReplyForm) -> tuple[str, ...]:
    """The special tokens a reader of this form needs in the text (preserved), besides the call format's."""
    dialect = _DIALECTS.get(form)
    return dialect.markup if dialect is not None else ()
