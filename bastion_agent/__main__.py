"""``python3 -m bastion_agent``: a thin entry point; ``cli.main`` does the work."""

import sys

from bastion_agent.commands.cli import main

sys.exit(main())
