"""What the relay knows of the built-in upstream: its model list (``model_list``), fetched and
cached (``models``), and its reachability for ``/readyz`` (``health``)."""
