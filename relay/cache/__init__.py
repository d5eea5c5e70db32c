"""The replay cache as the request shell uses it: ``replay_cache.ReplayCache`` (one per
process: opens the store, decides eligibility, fences) and ``session.CacheSession`` (one
cached request: dispatch, capture, commit, resolve, refusal) -- the I/O around the pure
``relay.core`` decisions, performing what ``relay.pipeline`` asks for."""
