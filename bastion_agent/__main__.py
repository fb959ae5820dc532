"""``python3 -m bastion_agent``: a thin entry point; ``cli.main`` does the work."""

import sys

from .cli import main

sys.exit(main())
