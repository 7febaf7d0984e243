"""``python -m evalfleet.execution.osmo ...``: the task-side steps the rendered task scripts run."""

from evalfleet.execution.osmo.command import main

raise SystemExit(main())
