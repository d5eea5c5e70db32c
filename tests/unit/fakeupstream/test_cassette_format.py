"""The cassette format: vcrpy's own serializers and dicts, chunk timing as extra fields."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import vcr
import vcr.serialize
from vcr.serializers import jsonserializer, yamlserializer

from fakeupstream.cassette import (
    Cassette,
    CassetteError,
    Chunk,
    Interaction,
    dumps,
    load,
    loads,
    scrub_cassette,
    scrub_interaction,
)

TOKEN = "gAAAAABsecret-ciphertext-0123456789"
SSE = b'event: response.output_item.done\ndata: {"item":{"encrypted_content":"' + TOKEN.encode()
SSE_REST = b'"}}\n\nevent: response.completed\ndata: {"type":"response.completed"}\n\n'


def interaction(**changes: object) -> Interaction:
    fields: dict[str, object] = {
        "method": "POST",
        "uri": "https://api.openai.com/v1/responses",
        "request_headers": (
            ("Authorization", "Bearer sk-live-secret"),
            ("Content-Type", "application/json"),
            ("OpenAI-Organization", "org-123"),
        ),
        "request_body": json.dumps({"input": [{"encrypted_content": TOKEN}]}).encode(),
        "status": 200,
        "reason": "OK",
        "response_headers": (
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Set-Cookie", "session=abc"),
            ("openai-processing-ms", "12"),
        ),
        # The first boundary falls inside the ciphertext.
        "chunks": (
            Chunk(120.5, SSE[:-10]),
            Chunk(3.25, SSE[-10:] + SSE_REST[:5]),
            Chunk(0, SSE_REST[5:]),
        ),
    }
    fields.update(changes)
    return Interaction(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip_through_vcrpys_serializers(fmt: str) -> None:
    cassette = Cassette((interaction(), interaction(ended="close")), "https://api.openai.com/v1")
    text = dumps(cassette, fmt)
    assert loads(text, fmt) == cassette
    # vcrpy reads it as one of its own: requests, response dicts, metadata.
    serializer = yamlserializer if fmt == "yaml" else jsonserializer
    requests, responses, metadata = vcr.serialize.deserialize(text, serializer)
    assert [r.method for r in requests] == ["POST", "POST"]
    assert requests[0].uri == "https://api.openai.com/v1/responses"
    assert responses[0]["status"] == {"code": 200, "message": "OK"}
    assert responses[0]["body"]["string"] == SSE + SSE_REST
    assert responses[0]["chunks"] == [[120.5, len(SSE) - 10], [3.25, 15], [0, len(SSE_REST) - 5]]
    assert [r["ended"] for r in responses] == ["finish", "close"]
    assert metadata == {
        "recorder": "live.cassettes",
        "upstream_base_url": "https://api.openai.com/v1",
        "shareable": False,
    }


def test_vcrpy_plays_a_written_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(dumps(Cassette((interaction(),), "https://api.openai.com/v1")))
    played = vcr.cassette.Cassette.load(path=str(path))
    request = vcr.request.Request(
        "POST",
        "https://api.openai.com/v1/responses",
        interaction().request_body,
        {"Content-Type": "application/json"},
    )
    assert played.can_play_response_for(request)
    assert played.play_response(request)["body"]["string"] == SSE + SSE_REST


def test_a_plain_vcrpy_cassette_plays_as_one_chunk_at_once() -> None:
    request = vcr.request.Request("GET", "https://example.test/v1/models", None, {})
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {"Content-Type": ["application/json"]},
        "body": {"string": b'{"data": []}'},
    }
    text = vcr.serialize.serialize({"requests": [request], "responses": [response]}, yamlserializer)
    cassette = loads(text)
    assert cassette.upstream_base_url == "" and cassette.shareable is False
    (only,) = cassette.interactions
    assert only.chunks == (Chunk(0.0, b'{"data": []}'),)
    assert only.ended == "finish" and only.request_body == b""
    assert cassette.served_path(only) == "/v1/models"


@pytest.mark.parametrize(
    ("base", "uri", "served"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1/responses", "/v1/responses"),
        ("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1/responses", "/v1/responses"),
        (
            "https://gw.test/openai/v1",
            "https://gw.test/openai/v1/chat/completions",
            "/v1/chat/completions",
        ),
        ("https://gw.test/openai", "https://gw.test/openai/responses", "/v1/responses"),
        ("", "https://gw.test/v1/responses", "/v1/responses"),  # unknown base: as recorded
    ],
)
def test_served_path(base: str, uri: str, served: str) -> None:
    assert Cassette((), base).served_path(interaction(uri=uri)) == served


@pytest.mark.parametrize(
    ("response_change", "message"),
    [
        ({"chunks": [[1, 3]]}, "chunk sizes add up to 3 bytes but the body has 4"),
        ({"chunks": [[-1, 4]]}, "each chunk must be [delay_ms >= 0, size >= 0]"),
        ({"chunks": [[1.0, 2.5]]}, "each chunk must be [delay_ms >= 0, size >= 0]"),
        ({"chunks": "fast"}, "'chunks' must be a list"),
        ({"ended": "maybe"}, "'ended' must be one of finish, close, client_gone, stopped"),
        ({"status": {"message": "OK"}}, "has no integer status.code"),
    ],
)
def test_a_damaged_cassette_says_what_is_wrong(
    response_change: dict[str, object], message: str
) -> None:
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {},
        "body": {"string": "abcd"},
        "chunks": [[0, 4]],
        **response_change,
    }
    data = {
        "version": 1,
        "interactions": [
            {
                "request": {"method": "GET", "uri": "http://x/v1/a", "body": None, "headers": {}},
                "response": response,
            }
        ],
    }
    with pytest.raises(CassetteError, match="interaction 0: .*" + message.replace("[", r"\[")):
        loads(json.dumps(data), "json", source="c.json")


def test_unreadable_files_are_cassette_errors(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="cannot read the cassette"):
        load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("interactions: [unclosed")
    with pytest.raises(CassetteError, match="is not a vcrpy cassette"):
        load(broken)


def test_credentials_go_from_every_cassette_ciphertext_only_from_shareable_ones() -> None:
    private = scrub_interaction(interaction(), shareable=False)
    assert [n for n, _ in private.request_headers] == ["Content-Type"]
    assert [n for n, _ in private.response_headers] == ["Content-Type", "openai-processing-ms"]
    assert TOKEN.encode() in private.request_body and TOKEN.encode() in private.response_body
    assert private.chunks == interaction().chunks

    shared = scrub_interaction(interaction(), shareable=True)
    digest = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()
    assert json.loads(shared.request_body) == {"input": [{"encrypted_content": digest}]}
    assert shared.response_body == (SSE + SSE_REST).replace(TOKEN.encode(), digest.encode())
    # The boundary inside the token moved to the digest's end; delays stay with their chunk.
    assert [c.delay_ms for c in shared.chunks] == [120.5, 3.25, 0]
    assert shared.chunks[0].data.endswith(digest.encode())
    assert shared.chunks[1].data == SSE_REST[:5]


def test_a_shareable_whole_body_declares_its_new_length() -> None:
    body = json.dumps({"output": [{"encrypted_content": TOKEN}]}).encode()
    recorded = interaction(
        response_headers=(("Content-Type", "application/json"), ("Content-Length", str(len(body)))),
        chunks=(Chunk(5, body),),
    )
    (shared,) = scrub_cassette(Cassette((recorded,)), shareable=True).interactions
    assert ("Content-Length", str(len(shared.response_body))) in shared.response_headers
    assert len(shared.response_body) != len(body)


def test_scrub_cassette_marks_it_and_cleans_the_base_url() -> None:
    cassette = Cassette((interaction(),), "https://u:p@api.openai.com/v1?api-key=k")
    shared = scrub_cassette(cassette, shareable=True)
    assert shared.shareable is True
    assert shared.upstream_base_url == "https://api.openai.com/v1"
    assert "sk-live-secret" not in dumps(shared) and TOKEN not in dumps(shared)
