"""Splitting sanitized text into overlapping windows with content-addressed ids (the ``chunk`` stage)."""
