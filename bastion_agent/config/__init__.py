"""The manifest (what to index, with which model), its SSH signature, and the command-line
arguments every front end shares to open a verified manifest and its output folder.
"""
