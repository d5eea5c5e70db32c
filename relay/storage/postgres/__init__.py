"""The shared PostgreSQL replay store (``REASONING_CACHE_URL``): several relays behind a
load balancer on one database, every replay guarantee kept (docs/design.md, "Team
deployment: guarantee by guarantee")."""
