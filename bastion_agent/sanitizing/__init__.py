"""Removing secrets and personal data: the rules, their validators, the look-alike view, the
sanitizer and the ``sanitize`` stage that writes the sanitized store.
"""
