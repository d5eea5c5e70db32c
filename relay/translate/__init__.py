"""Pure translation between Chat Completions and the Responses API (no I/O, no clock).

Chat request → Responses request: :func:`translate_request`. Final Responses JSON → Chat
answer: :func:`response_to_chat_completion`. Responses SSE events → Chat chunks:
:class:`ChatStreamConverter`; frames for the client: :mod:`relay.translate.chat_sse`.
The chunks and answers it makes are typed in :mod:`relay.translate.events`; the Responses
events it reads, decoded once, in :mod:`relay.core.responses_events`.
"""

from relay.translate.request import translate_request
from relay.translate.request_types import TranslatedRequest
from relay.translate.responses_to_chat import response_to_chat_completion, usage_to_chat
from relay.translate.sampling import is_reasoning_model, sampling_params
from relay.translate.stream_converter import ChatStreamConverter

__all__ = [
    "ChatStreamConverter",
    "TranslatedRequest",
    "is_reasoning_model",
    "response_to_chat_completion",
    "sampling_params",
    "translate_request",
    "usage_to_chat",
]
