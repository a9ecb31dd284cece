"""``python -m cloaknet`` runs the command line."""

import sys

from cloaknet.cli import main

sys.exit(main())
