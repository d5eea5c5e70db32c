"""``python -m bench.converter``: the stream converter's own cost, in process.

One Responses stream of 381 events (a reasoning summary, a 300-delta message, a function
call with 50 argument pieces, the terminal response) through
:class:`~relay.translate.stream_converter.ChatStreamConverter` alone, then with every
chunk framed by :func:`~relay.translate.chat_sse.encode_chunk`, and the same final
response through :func:`~relay.translate.responses_to_chat.response_to_chat_completion`.
CPU time (``process_time``), best of rounds: on a shared machine the minimum is the
stable number. Nothing here asserts a time limit.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from relay.core.responses_events import decode
from relay.translate.chat_sse import encode_chunk
from relay.translate.responses_to_chat import response_to_chat_completion
from relay.translate.stream_converter import ChatStreamConverter

Event = tuple[str, dict[str, Any]]
DELTAS = 300
ARGUMENT_PIECES = 50
SUMMARY_PIECES = 20


def stream() -> tuple[list[Event], dict[str, Any]]:
    """The events of one answer, and its final response."""
    summary = "".join(f"think {i} " for i in range(SUMMARY_PIECES))
    text = "".join(f"tok{i} " for i in range(DELTAS))
    arguments = "".join(f'"k{i}":{i},' for i in range(ARGUMENT_PIECES))
    reasoning = {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAA" + "x" * 200,
                 "summary": [{"type": "summary_text", "text": summary}]}  # fmt: skip
    message = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f",
            "arguments": "", "status": "in_progress"}  # fmt: skip
    done_call = {**call, "arguments": arguments, "status": "completed"}
    final = {"id": "resp_1", "status": "completed", "output": [reasoning, message, done_call],
             "usage": {"input_tokens": 10, "output_tokens": 400, "total_tokens": 410,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 5}}}  # fmt: skip
    events: list[Event] = [
        ("response.created", {"response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        ("response.output_item.added",
         {"output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
    ]  # fmt: skip
    for i in range(SUMMARY_PIECES):
        events.append(("response.reasoning_summary_text.delta", {"item_id": "rs_1",
                       "output_index": 0, "summary_index": 0, "delta": f"think {i} "}))  # fmt: skip
    events += [
        ("response.reasoning_summary_text.done",
         {"item_id": "rs_1", "output_index": 0, "summary_index": 0, "text": summary}),
        ("response.output_item.done", {"output_index": 0, "item": reasoning}),
        ("response.output_item.added", {"output_index": 1, "item": {**message, "content": []}}),
    ]  # fmt: skip
    for i in range(DELTAS):
        events.append(("response.output_text.delta", {
            "type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
            "content_index": 0, "delta": f"tok{i} ", "logprobs": [], "sequence_number": i + 5}))  # fmt: skip
    events += [
        ("response.output_text.done", {"item_id": "msg_1", "output_index": 1,
                                       "content_index": 0, "text": text, "logprobs": []}),
        ("response.output_item.done", {"output_index": 1, "item": message}),
        ("response.output_item.added", {"output_index": 2, "item": call}),
    ]  # fmt: skip
    for i in range(ARGUMENT_PIECES):
        events.append(("response.function_call_arguments.delta",
                       {"item_id": "fc_1", "output_index": 2, "delta": f'"k{i}":{i},'}))  # fmt: skip
    events += [
        ("response.function_call_arguments.done",
         {"item_id": "fc_1", "output_index": 2, "arguments": arguments}),
        ("response.output_item.done", {"output_index": 2, "item": done_call}),
        ("response.completed", {"response": final}),
    ]  # fmt: skip
    return events, final


def converter() -> ChatStreamConverter:
    return ChatStreamConverter(completion_id="chatcmpl-1", created=1, model="gpt-5",
                               include_usage=True, reasoning_summaries=True)  # fmt: skip


def best(run: Callable[[], None], reps: int, rounds: int) -> float:
    """Seconds per call: the least CPU time over ``rounds`` of ``reps`` calls."""
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(reps):
            run()
        times.append((time.process_time() - start) / reps)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    events, final = stream()

    def feed() -> None:
        conv = converter()
        for event_type, data in events:
            conv.feed(decode(event_type, data))

    def feed_and_frame() -> None:
        conv = converter()
        for event_type, data in events:
            for chunk in conv.feed(decode(event_type, data)):
                encode_chunk(chunk)

    def json_answer() -> None:
        response_to_chat_completion(final, completion_id="c", created=1, model="m",
                                    reasoning_summaries=True)  # fmt: skip

    feed_and_frame()  # warm the frame templates
    fed, framed = best(feed, 100, args.rounds), best(feed_and_frame, 100, args.rounds)
    answered = best(json_answer, 5000, args.rounds)
    n = len(events)
    print(f"| converter ({n} events) | µs/stream | ns/event |\n|---|---|---|")
    print(f"| feed | {fed * 1e6:.1f} | {fed / n * 1e9:.0f} |")
    print(f"| feed + encode_chunk | {framed * 1e6:.1f} | {framed / n * 1e9:.0f} |")
    print(f"| response_to_chat_completion | {answered * 1e6:.2f} | |")


if __name__ == "__main__":
    main()
