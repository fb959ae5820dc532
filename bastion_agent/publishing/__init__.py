"""Many bastions, one search: publishing sanitized windows and vectors to PostgreSQL with pgvector,
its schema, and search across bastions.
"""
