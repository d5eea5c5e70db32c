"""The HTTP surface the handlers share, without I/O: bearer-token checks (``auth``), decoding
a client's request body (``request_body``) and the route table (``routes``)."""
