"""`python -m evalfleet.execution.watchdog`: the watchdog's command line (rendered OSMO task scripts run it)."""

import sys

from evalfleet.execution.watchdog.command import main

if __name__ == "__main__":
    sys.exit(main())
