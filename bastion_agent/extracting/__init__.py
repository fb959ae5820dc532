"""Turning files into text in the private extract store: the readers and formats, reading one file
in a budgeted worker with the byte-level scan, and the ``extract`` stage.
"""
