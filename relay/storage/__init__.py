"""SQLite, and nothing else does it: the replay store (``replay_store``), its schema and
migrations (``schema``), the strict providers' records (``strict_store``) and startup
recovery and fencing (``recovery``), payload cleanup (``cleanup``), the files beside the
store (``disk_guard``, with the platform fallbacks in ``portable``), and the offline
commands' reading and copying (``offline``, ``backup``, ``verify``). Only the shell
(``relay.cache``, ``relay.strict``, the server, ``relay.ops``) imports this package."""
