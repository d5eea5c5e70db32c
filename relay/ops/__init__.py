"""Operating the relay (design §14, §18): counters and Prometheus metrics (``metrics``,
``collector``), the private admin socket (``admin_socket``, ``admin_client``) with its
status (``status``, ``store_sample``) and inspection snapshots (``snapshot``), ``/metrics``
on loopback (``metrics_http``), the ``relay admin`` / ``relay status`` commands
(``commands``) and the offline ``relay cache backup|restore|verify`` commands
(``cache_commands``, with ``progress``). It observes the relay; nothing in the request
path depends on it."""
