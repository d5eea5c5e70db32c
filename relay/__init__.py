"""Encrypted reasoning replay relay: Chat Completions in, OpenAI Responses upstream."""

__version__ = "0.1.0"
