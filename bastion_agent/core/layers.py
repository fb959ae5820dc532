"""The floors of the house, lowest first: the parts of the package in the order imports may point.

A part may import the parts at its own floor or below, never above
(docs/architecture.md, "The rule for imports"). ``test_architecture.py``
checks every import against this table, and the walk of a sweep
(``testing/house_walk.py``, ``bench/house/walk.py``) reads each call's floor
from it; it is data in the base so both read the same order.
"""

LAYERS = (
    ("core",),
    ("sanitizing",),
    ("config",),
    ("extracting", "chunking"),
    ("embedding",),
    ("searching",),
    ("publishing",),
    ("embed",),  # the stage contract's facade (docs/contract.md): chunk, embed and search names in one place
    ("serving", "model"),
    ("commands", "watching"),  # watch runs the sweep's stages (commands/pipeline.py); status reads watch's files
    ("__main__",),
    ("testing",),
)

# Each part's floor, 0 being core.
FLOOR = {part: floor for floor, parts in enumerate(LAYERS) for part in parts}
