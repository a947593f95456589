"""JSON grammars from schemas keep control characters out of strings (llama-cpp-python's converter
lets them in; JSON forbids them), so an answer the grammar allows always parses."""

from __future__ import annotations

import json

from llama_cpp.llama_grammar import json_schema_to_gbnf

from app.engine.llama.vocab import LlamaVocabulary, strict_json_strings


def test_the_converter_still_emits_the_rule_that_is_made_strict() -> None:
    """If llama-cpp-python changes its char rule, this fails instead of the fix silently missing."""
    lax = json_schema_to_gbnf(json.dumps({"type": "string"}))
    assert 'char ::= [^"\\\\] |' in lax
    strict = strict_json_strings(lax)
    assert 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |' in strict
    assert strict.replace('\\x7F\\x00-\\x1F', "") == lax


def test_every_schema_grammar_goes_through_the_strict_rule() -> None:
    vocab = LlamaVocabulary.__new__(LlamaVocabulary)  # json_schema_grammar reads nothing of the model
    grammar = vocab.json_schema_grammar({"type": "object", "properties": {"a": {"type": "string"}}})
    assert "\\x00-\\x1F" in grammar
