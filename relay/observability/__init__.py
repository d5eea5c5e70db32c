"""What the relay writes about itself: the log lines and their redaction (``log``) and the
opt-in request/response body artifacts (``body_log``)."""
