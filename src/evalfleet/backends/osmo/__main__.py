"""``python -m evalfleet.backends.osmo ...``: the task-side steps the rendered task scripts run; their parser is
`evalfleet.cli.osmo_task`."""

from evalfleet.cli.osmo_task import main

raise SystemExit(main())
