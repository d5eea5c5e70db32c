"""Starting and running the process: the command line (``cli``), the server that binds the
listeners and assembles the handlers (``server``, ``listeners``), what every handler shares
(``runtime``) and the offline upstream used when there is no API key (``offline``)."""
