"""Tornado handlers: they move bytes and call the pure core; no translation logic here."""
