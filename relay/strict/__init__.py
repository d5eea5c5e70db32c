"""Strict thinking-mode Chat providers: restoring ``reasoning_content`` (issue 6)."""
