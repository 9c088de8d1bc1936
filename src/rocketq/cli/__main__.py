"""``python -m rocketq.cli``."""

import sys

from rocketq.cli import main

sys.exit(main())
