"""parse_json: bounded nesting without recursion, lone surrogates refused, else json.loads."""

from __future__ import annotations

import json

import pytest

from channels.json_input import JsonInputError, JsonNotText, JsonTooDeep, parse_json


@pytest.mark.parametrize(
    "raw", [b"[" * 100_000, "[" * 100_000, b'{"a":' * 100_000, "[{" * 50_000 + "]}" * 50_000]
)
def test_deep_nesting_is_refused_without_recursion(raw: bytes | str) -> None:
    with pytest.raises(JsonTooDeep, match="nested deeper than 64 levels"):
        parse_json(raw, max_depth=64)


def test_up_to_the_limit_parses() -> None:
    assert parse_json("[" * 64 + "]" * 64, max_depth=64) is not None
    with pytest.raises(JsonTooDeep):
        parse_json("[" * 65 + "]" * 65, max_depth=64)


def test_brackets_in_strings_do_not_count() -> None:
    raw = json.dumps({"text": "[[[{{{" * 100, "q": 'say "[" \\'})
    assert parse_json(raw, max_depth=1) == json.loads(raw)


@pytest.mark.parametrize(
    "raw", ['"\\ud800"', '{"text": "a \\udfff b"}', '{"\\udc00": 1}', '[["ok", "\\ud83d"]]']
)
def test_lone_surrogates_are_refused(raw: str) -> None:
    with pytest.raises(JsonNotText, match="lone surrogate"):
        parse_json(raw, max_depth=64)


def test_a_pair_and_an_escaped_backslash_are_fine() -> None:
    assert parse_json('"\\ud83d\\ude00"', max_depth=1) == "\U0001f600"
    assert parse_json('"\\\\ud800"', max_depth=1) == "\\ud800"


@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe\xfa", b"1" * 5000, b""])
def test_what_is_not_json_is_a_json_input_error(raw: bytes) -> None:
    with pytest.raises(JsonInputError) as refused:
        parse_json(raw, max_depth=64)
    assert not isinstance(refused.value, JsonTooDeep | JsonNotText)


def test_it_is_a_value_error() -> None:
    assert issubclass(JsonInputError, ValueError)
