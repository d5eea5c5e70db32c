"""A real, scriptable fake of OpenAI's Responses API (see :mod:`fakeupstream.scripts`)."""

from fakeupstream.ciphertext import ContinuityReport
from fakeupstream.scripts import ScriptError, parse_script
from fakeupstream.server import FakeUpstream, RecordedRequest

__all__ = ["ContinuityReport", "FakeUpstream", "RecordedRequest", "ScriptError", "parse_script"]
