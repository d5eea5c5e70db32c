"""Moving bytes: the upstream client, the SSE parser and downstream delivery."""
