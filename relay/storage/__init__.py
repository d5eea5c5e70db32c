"""SQLite, and nothing else does it. The store interface the cache is typed against
(``interface``: the ``ReplayStore`` Protocol and its row types); the SQLite replay store
(``replay_store``) composing the database (``database``: opening, ownership, PRAGMAs,
transactions, error translation), one gateway per table (``scopes``, ``observations``,
``payloads``, ``markers``, ``intents``, ``meta``), the diagnostics (``diagnostics``,
``aggregates``) and the planner's adapter (``scoped_source``); its schema and migrations
(``schema``), the strict providers' records (``strict_store``), startup recovery and
fencing (``recovery``), payload cleanup (``cleanup``), the files beside the store
(``disk_guard``, with the platform fallbacks in ``portable``), and the offline commands'
reading and copying (``offline``, ``backup``, ``verify``). Only the shell
(``relay.cache``, ``relay.strict``, the server, ``relay.ops``) imports this package."""
