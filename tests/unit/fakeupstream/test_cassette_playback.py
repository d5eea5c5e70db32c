"""Playback: which recorded interaction answers a request, and the writes that send it."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import pytest

from fakeupstream.cassette import Cassette, Chunk, Ended, Interaction
from fakeupstream.cassette_playback import Mismatch, Playback, first_difference, playback_ops
from fakeupstream.toxics import End, Op, Pause, Send, Toxics

TOKEN = "gAAAAABciphertext-for-playback"
DIGEST = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()


def recorded(
    body: Any,
    *,
    method: str = "POST",
    path: str = "/responses",
    answer: bytes = b"{}",
    chunks: tuple[Chunk, ...] | None = None,
    ended: Ended = "finish",
) -> Interaction:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Interaction(
        method=method,
        uri=f"https://api.openai.com/v1{path}",
        request_headers=(),
        request_body=raw,
        status=200,
        reason="OK",
        response_headers=(("Content-Type", "application/json"),),
        chunks=chunks if chunks is not None else (Chunk(0, answer),),
        ended=ended,
    )


def playback(*interactions: Interaction, **options: Any) -> Playback:
    cassette = Cassette(interactions, upstream_base_url="https://api.openai.com/v1")
    return Playback(cassette, source="c.yaml", **options)


def take(play: Playback, body: Any, method: str = "POST", path: str = "/v1/responses") -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return play.take(method, path, raw)


def test_requests_take_interactions_in_recorded_order() -> None:
    first, second = recorded({"q": 1}, answer=b"1"), recorded({"q": 1}, answer=b"2")
    play = playback(first, second)
    assert take(play, {"q": 1}) is first
    assert take(play, {"q": 1}) is second
    assert play.status()["played"] == 2
    play.rewind()
    assert take(play, {"q": 1}) is first


def test_a_body_picks_the_first_unplayed_interaction_it_matches() -> None:
    a, b = recorded({"q": "a"}), recorded({"q": "b"})
    play = playback(a, b)
    assert take(play, {"q": "b"}) is b  # out of order (a concurrent request): still found
    assert take(play, {"q": "a"}) is a


def test_json_bodies_compare_by_value_not_by_spelling() -> None:
    play = playback(recorded(b'{"a": 1, "b": [true, null]}'))
    assert isinstance(play.take("POST", "/v1/responses", b'{"b":[true,null],"a":1}'), Interaction)


@pytest.mark.parametrize(
    ("cassette_value", "request_value"),
    [
        (TOKEN, TOKEN),  # unscrubbed cassette, the relay sends the ciphertext it got
        (DIGEST, DIGEST),  # shareable cassette, the relay sends the digest it got
        (DIGEST, TOKEN),  # shareable cassette, the client has the real ciphertext
    ],
)
def test_ciphertext_compares_after_the_same_scrubbing(
    cassette_value: str, request_value: str
) -> None:
    play = playback(recorded({"input": [{"encrypted_content": cassette_value}]}))
    assert isinstance(take(play, {"input": [{"encrypted_content": request_value}]}), Interaction)


def test_a_different_ciphertext_does_not_match() -> None:
    play = playback(recorded({"input": [{"encrypted_content": TOKEN}]}))
    missed = take(play, {"input": [{"encrypted_content": TOKEN + "x"}]})
    assert isinstance(missed, Mismatch)
    assert "$.input[0].encrypted_content (a different value)" in missed.message
    assert TOKEN not in missed.message  # never a value in the message


@pytest.mark.parametrize(
    ("request_call", "message"),
    [
        (
            ("GET", "/v1/models", b""),
            "the cassette c.yaml has no recorded GET /v1/models (it has 1 x POST /v1/responses)",
        ),
        (
            ("POST", "/v1/responses", b'{"model": "gpt-5", "extra": 1}'),
            "the next one (interaction 0) differs at $.extra (not in the recording)",
        ),
        (
            ("POST", "/v1/responses", b"{}"),
            "the next one (interaction 0) differs at $.model (missing from the request)",
        ),
        (
            ("POST", "/v1/responses", b"not json"),
            "differs at $ (a bytes body where the recording has a json body)",
        ),
    ],
)
def test_a_request_that_matches_nothing_is_told_why(
    request_call: tuple[str, str, bytes], message: str
) -> None:
    play = playback(recorded({"model": "gpt-5"}))
    missed = play.take(*request_call)
    assert isinstance(missed, Mismatch)
    assert message in missed.message
    assert play.status()["played"] == 0  # a miss plays nothing


def test_every_interaction_played_is_said_so() -> None:
    play = playback(recorded({}))
    assert isinstance(take(play, {}), Interaction)
    missed = take(play, {})
    assert isinstance(missed, Mismatch)
    assert "was already played (1 of 1); POST /__fake/reset rewinds it" in missed.message


def test_match_body_off_matches_by_method_and_path() -> None:
    play = playback(recorded({"q": 1}), match_body=False)
    assert isinstance(take(play, {"anything": True}), Interaction)


@pytest.mark.parametrize(
    ("recorded_value", "got", "where"),
    [
        ({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}, "$.a[1].b (a different value)"),
        ({"a": [1, 2]}, {"a": [1]}, "$.a (1 items where the recording has 2)"),
        ({"a": 1}, {"a": "1"}, "$.a (a str where the recording has a int)"),
        ({"odd key": 1}, {"odd key": 2}, '$["odd key"] (a different value)'),
        ({"a": 1}, {"a": 1}, "$"),  # equal: the root, for lack of anything better
    ],
)
def test_first_difference(recorded_value: Any, got: Any, where: str) -> None:
    assert first_difference(recorded_value, got) == where


def chunks(*pairs: tuple[float, bytes]) -> tuple[Chunk, ...]:
    return tuple(Chunk(delay, data) for delay, data in pairs)


def ops_for(
    interaction: Interaction, toxics: Toxics | None = None, timing: float = 1.0
) -> list[Op]:
    return playback_ops(interaction, timing=timing, toxics=toxics or Toxics(), rng=random.Random(1))


def test_each_chunk_is_one_write_after_its_recorded_delay() -> None:
    played = recorded({}, chunks=chunks((250, b"aa"), (0, b"b"), (40, b"cc")))
    assert ops_for(played) == [
        Pause(0.25),
        Send(b"aa", None),
        Send(b"b", None),
        Pause(0.04),
        Send(b"cc", None),
        End("finish"),
    ]
    assert ops_for(played, timing=0.5)[0] == Pause(0.125)
    assert Pause not in {type(op) for op in ops_for(played, timing=0)}


@pytest.mark.parametrize(
    ("ended", "end"),
    [("finish", "finish"), ("close", "close"), ("client_gone", "hang"), ("stopped", "hang")],
)
def test_the_answer_ends_as_the_recording_did(ended: Ended, end: str) -> None:
    played = recorded({}, chunks=chunks((0, b"ab")), ended=ended)
    assert ops_for(played)[-1] == End(end)  # type: ignore[arg-type]


def test_an_empty_chunk_writes_nothing_and_passes_its_delay_on() -> None:
    played = recorded({}, chunks=chunks((10, b""), (20, b"x")))
    assert ops_for(played) == [Pause(0.03), Send(b"x", None), End("finish")]


def test_toxics_apply_on_top_of_the_recording() -> None:
    played = recorded({}, chunks=chunks((100, b"abcd"), (50, b"efgh")))
    # Slices split a chunk; only its first piece waits the recorded delay.
    assert ops_for(played, Toxics(slice_bytes=3)) == [
        Pause(0.1),
        Send(b"abc", None),
        Send(b"d", None),
        Pause(0.05),
        Send(b"efg", None),
        Send(b"h", None),
        End("finish"),
    ]
    # A cut after the first chunk ends the body there, whatever the recording did next.
    assert ops_for(played, Toxics(cut_after_events=1, cut_mode="close")) == [
        Pause(0.1),
        Send(b"abcd", None),
        End("close"),
    ]
    # Latency adds to the recorded delays.
    assert ops_for(played, Toxics(latency_ms=7))[:2] == [Pause(0.007), Pause(0.1)]


def test_timing_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="timing factor must be >= 0"):
        playback(timing=-1)
