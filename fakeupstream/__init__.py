"""A real, scriptable fake of OpenAI's Responses API (see :mod:`fakeupstream.scripts`)."""

from fakeupstream.ciphertext import ContinuityReport
from fakeupstream.fake import FakeUpstream, RecordedRequest
from fakeupstream.scripts import ScriptError, parse_script

__all__ = ["ContinuityReport", "FakeUpstream", "RecordedRequest", "ScriptError", "parse_script"]
