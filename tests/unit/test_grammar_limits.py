"""Bounded repetition is counted (x{m,n}), not nested, in schema grammars; and the guard measures
every grammar's nesting and rule chains before llama.cpp parses it."""

from __future__ import annotations

import pytest

from app.engine.errors import InvalidJobError
from app.engine.grammar_guard import MAX_GROUP_DEPTH, MAX_RULE_CHAIN, check_grammar, rule_chain
from app.engine.llama.repetition import REPETITION_LIMIT, counted_repetition
from app.engine.llama.vocab import LlamaVocabulary


def schema_grammar(schema: object) -> str:
    vocab = LlamaVocabulary.__new__(LlamaVocabulary)  # json_schema_grammar reads nothing of the model
    return vocab.json_schema_grammar(schema)


@pytest.mark.parametrize(("low", "high", "separator", "expected"), [
    (0, 1, None, "x?"),
    (1, None, None, "x+"),
    (0, None, None, "x*"),
    (3, None, None, "x{3,}"),
    (0, 100, None, "x{0,100}"),
    (2, 2, None, "x{2,2}"),
    (0, REPETITION_LIMIT + 1, None, "x*"),
    (4, 65535, None, "x{4,}"),
    (0, 0, None, ""),
    (0, 5, '","', '(x ("," x){0,4})?'),
    (1, 5, '","', 'x ("," x){0,4}'),
    (1, 1, '","', "x"),
    (2, None, '","', 'x ("," x)+'),
    (0, None, '","', '(x ("," x)*)?'),
])
def test_counted_repetition(low: int, high: int | None, separator: str | None, expected: str) -> None:
    assert counted_repetition("x", low, high, separator) == expected


@pytest.mark.parametrize(("low", "high", "named"), [
    (REPETITION_LIMIT + 1, None, "above the limit"),
    (5, 3, "at least the minimum"),
    (-1, None, "at least 0"),
    (1.5, None, "whole number"),
    (0, "ten", "whole number"),
])
def test_bounds_that_are_not_counts_are_refused(low: object, high: object, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        counted_repetition("x", low, high)  # type: ignore[arg-type]


def test_the_converter_writes_long_bounds_without_nesting() -> None:
    for schema in ({"type": "string", "maxLength": 20000}, {"type": "string", "maxLength": 300},
                   {"type": "array", "items": {"type": "string"}, "maxItems": 65535},
                   {"type": "string", "pattern": "^a{0,1500}$"}):
        grammar = schema_grammar(schema)
        check_grammar(grammar)  # within every limit
        assert grammar.count("(") < 40, grammar
    assert "{0,300}" in schema_grammar({"type": "string", "maxLength": 300})
    assert "{0,1500}" in schema_grammar({"type": "string", "pattern": "^a{0,1500}$"})


def test_a_minimum_above_the_limit_is_a_schema_error() -> None:
    with pytest.raises(ValueError, match="above the limit"):
        schema_grammar({"type": "string", "minLength": 5000})


def test_nesting_past_the_limit_is_refused_and_below_it_served() -> None:
    check_grammar("root ::= " + "(" * MAX_GROUP_DEPTH + '"a"' + ")" * MAX_GROUP_DEPTH)
    with pytest.raises(InvalidJobError, match=f"{MAX_GROUP_DEPTH + 1} deep"):
        check_grammar("root ::= " + "(" * (MAX_GROUP_DEPTH + 1) + '"a"' + ")" * (MAX_GROUP_DEPTH + 1))


def test_parentheses_inside_literals_classes_and_comments_do_not_count() -> None:
    hidden = '"((((\\"(((" [(((\\](((] # ((((((('
    check_grammar("root ::= " + " ".join([hidden] * (MAX_GROUP_DEPTH + 5)).replace("# ", "\n# ") + "\n")
    assert rule_chain('root ::= "r1 r2" a\na ::= [b] # b\nb ::= "x"\n') == 2


def chain(length: int) -> str:
    return "root ::= r0\n" + "".join(f'r{i} ::= "x"? r{i + 1}\n' for i in range(length)) + f'r{length} ::= "a"\n'


def test_a_chain_of_rules_past_the_limit_is_refused() -> None:
    check_grammar(chain(MAX_RULE_CHAIN - 10))
    assert rule_chain(chain(MAX_RULE_CHAIN + 10)) == MAX_RULE_CHAIN + 12
    with pytest.raises(InvalidJobError, match="chain"):
        check_grammar(chain(MAX_RULE_CHAIN + 10))


def test_recursive_rules_count_once_per_rule() -> None:
    json_like = ('root ::= value\nvalue ::= object | array | "1"\nobject ::= "{" (pair ("," pair)*)? "}"\n'
                 'pair ::= "k" ":" value\narray ::= "[" (value ("," value)*)? "]"\n')
    assert rule_chain(json_like) == 5  # root, then the cycle value -> object -> pair and array
    many = "".join(f'r{i} ::= value "x"\n' for i in range(MAX_RULE_CHAIN * 2))  # wide, not deep
    check_grammar(json_like + many)
