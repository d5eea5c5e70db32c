"""Sans-I/O request pipelines: one object per relayed request holds its lifecycle.

A pipeline takes inputs (the upstream's events, its end or failure, the cache's answers,
the client leaving) and returns the :mod:`actions` its shell performs (send upstream,
queue and flush frames, commit, resolve, fail, finish). It performs no I/O, reads no
clock and awaits nothing, so each ordering rule is one transition, tested as a
transcript without sockets (``tests/unit/pipeline/``).
"""
