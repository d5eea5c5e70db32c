"""Helpers shared by integration tests and the benchmark."""
