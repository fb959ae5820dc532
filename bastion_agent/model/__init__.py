"""The embedded model server (multilingual-e5-small on loopback), for machines without Ollama.
"""
