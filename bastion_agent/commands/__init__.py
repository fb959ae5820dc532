"""The command line on top of every part: argument parsing, the one error boundary, sweep, init,
sign and verify, search, the demo, and the stage summary lines.
"""
