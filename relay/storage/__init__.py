"""SQLite, and nothing else does it: the replay store (``replay_store``), its schema and
migrations (``schema``), the strict providers' records (``strict_store``) and startup
recovery and fencing (``recovery``). Only the shell (``relay.cache``, ``relay.strict``,
the server) imports this package."""
