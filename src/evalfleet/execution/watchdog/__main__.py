"""`python -m evalfleet.execution.watchdog`: the watchdog's command line (rendered OSMO task scripts run it); its
parser and handler are `evalfleet.cli.watchdog`."""

import sys

from evalfleet.cli.watchdog import main

if __name__ == "__main__":
    sys.exit(main())
