"""Servers and helpers for tests and benchmarks only (stub and fault model servers, a throw-away
PostgreSQL, temporary manifests). Production code never imports this package.
"""
