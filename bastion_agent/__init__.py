"""bastion agent: make a folder of sensitive documents searchable by meaning,
sanitizing every document before any of its text leaves the extract store."""

__version__ = "0.1.0"
