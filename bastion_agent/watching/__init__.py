"""Keeping the index current as files change: ``watch`` (the loop), its lock, its last-cycle record, and ``status``."""
