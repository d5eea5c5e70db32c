"""The replay cache's pure core: what may be replayed, decided without I/O.

Canonical JSON and the visible-history identity (``canonical``, ``envelope``,
``identity``, ``predict``, ``responses_history``, ``limits``), the planner and its
receipts (``planner``, ``records``, ``receipts``, ``hot_blocks``, ``plan_memo``), capture
and what the client was sent (``capture``, ``projection``), replay splicing (``replace``),
budgets (``resources``), the upstream's refusals of replayed state (``rejection``,
``replay_stats``) and what an audit of stored rows concludes (``store_audit``). No
module here imports Tornado, sqlite3, asyncio, socket or time
(checked by the import contracts in ``nox -s lint``).
"""
