"""``python -m cloaknet.cli`` runs the command line (as ``python -m cloaknet`` does)."""

import sys

from cloaknet.cli import main

sys.exit(main())
