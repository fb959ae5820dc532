"""The base every part stands on: errors, the output folder's layout and private files, progress,
optional extras, confined file access, and the budgeted worker pool. It imports no other part.
"""
