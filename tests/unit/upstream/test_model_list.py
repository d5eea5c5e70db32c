"""relay.upstream.model_list: reading an upstream's model list and merging it with the aliases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types import Model

from relay.upstream.model_list import (
    MalformedModelList,
    UpstreamModel,
    models_page,
    parse_upstream_models,
)


def listing(*entries: Any) -> bytes:
    return json.dumps({"object": "list", "data": list(entries)}).encode()


OPENAI_ENTRY = {"id": "gpt-5", "object": "model", "created": 1754425777, "owned_by": "system"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (listing(OPENAI_ENTRY), (UpstreamModel("gpt-5", 1754425777, "system"),)),
        (listing(), ()),
        (b'{"data": [{"id": "m"}]}', (UpstreamModel("m", 0, "upstream"),)),  # no "object"
        # wrong-typed optional fields are defaulted, not trusted
        (listing({"id": "m", "created": "yesterday", "owned_by": 7}), (UpstreamModel("m"),)),
        (listing({"id": "m", "created": True, "owned_by": ""}), (UpstreamModel("m"),)),
        (listing({"id": "m", "created": 1.5}), (UpstreamModel("m"),)),
        # upstream order kept, a repeated id listed once (its first entry)
        (
            listing({"id": "b", "created": 1}, {"id": "a"}, {"id": "b", "created": 2}),
            (UpstreamModel("b", 1), UpstreamModel("a")),
        ),
        ('{"data": [{"id": "caf\u00e9"}]}'.encode(), (UpstreamModel("caf\u00e9"),)),
    ],
)
def test_parse_reads_openais_list(body: bytes, expected: tuple[UpstreamModel, ...]) -> None:
    assert parse_upstream_models(body) == expected


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "not JSON"),
        (b"<html>502 Bad Gateway</html>", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # too deep for the parser
        (b"[]", "'data' list"),
        (b'{"object": "list"}', "'data' list"),
        (b'{"data": {"id": "gpt-5"}}', "'data' list"),
        (listing("gpt-5"), r"data\[0\]"),
        (listing(OPENAI_ENTRY, {"name": "x"}), r"data\[1\]"),
        (listing({"id": 5}), r"data\[0\]"),
        (listing({"id": "  "}), r"data\[0\]"),
    ],
)
def test_parse_rejects_what_is_not_a_model_list(body: bytes, says: str) -> None:
    with pytest.raises(MalformedModelList, match=says) as failure:
        parse_upstream_models(body)
    assert "502 Bad Gateway" not in str(failure.value)  # never the answer's text


def test_page_lists_aliases_then_upstream_models() -> None:
    upstream = (UpstreamModel("o3", 2, "system"), UpstreamModel("gpt-5", 1, "system"))
    page = models_page(["gpt-high", "cheap"], upstream)
    assert page == {
        "object": "list",
        "data": [
            {"id": "cheap", "object": "model", "created": 0, "owned_by": "relay"},
            {"id": "gpt-high", "object": "model", "created": 0, "owned_by": "relay"},
            {"id": "gpt-5", "object": "model", "created": 1, "owned_by": "system"},
            {"id": "o3", "object": "model", "created": 2, "owned_by": "system"},
        ],
    }


def test_an_alias_hides_the_upstream_model_of_its_name() -> None:
    # A request for "gpt-5" gets the alias's settings, so the alias is what is listed.
    page = models_page({"gpt-5": object()}, (UpstreamModel("gpt-5", 1, "system"),))
    assert page["data"] == [{"id": "gpt-5", "object": "model", "created": 0, "owned_by": "relay"}]


def test_no_aliases_and_no_upstream_models_is_an_empty_list() -> None:
    assert models_page([], ()) == {"object": "list", "data": []}


NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1).filter(
    str.strip
)
MODELS = st.builds(UpstreamModel, NAMES, st.integers(0, 2**40), st.text(min_size=1, max_size=12))


@given(aliases=st.lists(NAMES, max_size=6), upstream=st.lists(MODELS, max_size=12))
def test_page_lists_every_name_once_aliases_first(
    aliases: list[str], upstream: list[UpstreamModel]
) -> None:
    page = models_page(aliases, upstream)
    ids = [entry["id"] for entry in page["data"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(aliases) | {m.id for m in upstream}
    assert ids[: len(set(aliases))] == sorted(set(aliases))
    for entry in page["data"]:
        Model.model_validate(entry, strict=True)  # the SDK's own type


@given(upstream=st.lists(MODELS, max_size=12))
def test_parse_reads_back_what_openai_would_send(upstream: list[UpstreamModel]) -> None:
    body = json.dumps(models_page([], upstream)).encode()
    parsed = parse_upstream_models(body)
    first: dict[str, UpstreamModel] = {}
    for model in sorted(upstream, key=lambda m: m.id):
        first.setdefault(model.id, model)
    assert parsed == tuple(first.values())
