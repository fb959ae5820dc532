"""Embedding windows through a model server: the client and its wire formats, what the server says about
itself (its model, context and token counts) and which windows fit it, the batching engine and its tuner,
vectors.db with the files derived from it (the flat vector file, the ANN index), and the ``embed`` stage.
"""
