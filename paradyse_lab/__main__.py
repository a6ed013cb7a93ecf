"""`python -m paradyse_lab ...` runs the CLI."""

import sys

from paradyse_lab.cli import main

sys.exit(main())
