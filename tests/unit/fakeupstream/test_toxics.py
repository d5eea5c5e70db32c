"""fakeupstream.toxics: the planned writes for every fault, checked without sockets."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakeupstream.toxics import (
    End,
    Op,
    Pause,
    Send,
    Toxics,
    edit_frames,
    malformed,
    oversized,
    plan,
)

FRAMES = [
    b'event: a\ndata: {"type":"a","n":0}\n\n',
    b'event: b\ndata: {"type":"b","n":1}\n\n',
    b'event: c\ndata: {"type":"c","n":2}\n\n',
]


def sent(ops: Sequence[Op]) -> bytes:
    return b"".join(op.data for op in ops if isinstance(op, Send))


def run(**toxics: Any) -> list[Op]:
    return plan(FRAMES, Toxics(**toxics), random.Random(0))


def test_no_toxics_sends_each_frame_once_and_finishes():
    assert run() == [Send(FRAMES[0], 0), Send(FRAMES[1], 1), Send(FRAMES[2], 2), End("finish")]


def test_latency_pauses_before_every_frame():
    ops = run(latency_ms=250)
    assert [op for op in ops if isinstance(op, Pause)] == [Pause(0.25)] * 3
    assert isinstance(ops[0], Pause)


def test_latency_after_events_spares_the_first_frames():
    ops = run(latency_ms=1, latency_after_events=2)
    assert ops == [
        Send(FRAMES[0], 0),
        Send(FRAMES[1], 1),
        Pause(0.001),
        Send(FRAMES[2], 2),
        End("finish"),
    ]


def test_slices_split_frames_and_only_the_last_piece_completes_an_event():
    ops = run(slice_bytes=5)
    sends = [op for op in ops if isinstance(op, Send)]
    assert all(len(op.data) <= 5 for op in sends)
    assert sent(ops) == b"".join(FRAMES)
    assert [op.completes for op in sends if op.completes is not None] == [0, 1, 2]


@given(seed=st.integers(), largest=st.integers(min_value=1, max_value=40))
def test_random_slices_are_seeded_and_lossless(seed, largest):
    toxics = Toxics(slice_bytes=largest, slice_random=True)
    first = plan(FRAMES, toxics, random.Random(seed))
    assert first == plan(FRAMES, toxics, random.Random(seed))
    assert sent(first) == b"".join(FRAMES)
    assert all(1 <= len(op.data) <= largest for op in first if isinstance(op, Send))


@pytest.mark.parametrize(
    ("toxics", "frames", "end"),
    [
        ({"cut_after_events": 1}, 1, "finish"),
        ({"cut_after_events": 2, "cut_mode": "close"}, 2, "close"),
        ({"reset_after_events": 2}, 2, "reset"),
        ({"hang_after_events": 0}, 0, "hang"),
        ({"hang_after_events": 2, "reset_after_events": 1}, 1, "reset"),  # earliest wins
        ({"reset_after_events": 3}, 3, "reset"),  # after everything: RST instead of a clean end
        ({"cut_after_events": 9}, 3, "finish"),
    ],
)
def test_event_count_faults(toxics, frames, end):
    ops = run(**toxics)
    assert sent(ops) == b"".join(FRAMES[:frames])
    assert ops[-1] == End(end)


def test_cut_after_bytes_stops_mid_frame():
    ops = run(cut_after_bytes=len(FRAMES[0]) + 7)
    assert sent(ops) == FRAMES[0] + FRAMES[1][:7]
    assert ops[-1] == End("finish")
    assert [op.completes for op in ops if isinstance(op, Send)] == [0, None]


def test_cut_after_bytes_on_a_boundary_completes_the_frame():
    ops = run(cut_after_bytes=len(FRAMES[0]))
    assert ops == [Send(FRAMES[0], 0), End("finish")]


def test_malformed_frame_keeps_framing_but_breaks_json():
    broken = malformed(FRAMES[1])
    assert broken.startswith(b"event: b\ndata: {")
    assert broken.endswith(b"\n\n")
    with pytest.raises(ValueError):
        json.loads(broken.split(b"data: ", 1)[1])
    assert edit_frames(FRAMES, Toxics(malformed_at_event=1)) == [FRAMES[0], broken, FRAMES[2]]


def test_oversized_frame_is_padded_to_the_size_and_still_parses():
    big = oversized(FRAMES[2], 4096)
    data = big.split(b"data: ", 1)[1]
    assert len(data.rstrip(b"\n")) == 4096
    assert json.loads(data) == {"type": "c", "n": 2}
    assert edit_frames(FRAMES, Toxics(oversized_event_bytes=4096))[2] == big


def test_omit_final_blank_line_ends_on_the_data_line():
    frames = edit_frames(FRAMES, Toxics(omit_final_blank_line=True))
    assert frames[-1] == b'event: c\ndata: {"type":"c","n":2}\n'
    assert frames[:2] == FRAMES[:2]
