"""Encrypted reasoning replay: identity, capture, planning and storage of original output blocks.

Everything here that decides *what* may be replayed is pure (no I/O, clock or randomness);
see ``canonical`` (bounded canonical JSON), ``envelope`` (the Chat-message normalizations),
``identity`` (scope and prefix digests), ``predict`` and ``responses_history``.
"""
