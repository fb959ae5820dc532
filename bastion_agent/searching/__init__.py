"""Answering a query from vectors.db: vector search (exact, or through the ANN index), keyword search
(FTS5), and their fusion.
"""
