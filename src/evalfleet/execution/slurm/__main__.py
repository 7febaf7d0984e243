"""``python -m evalfleet.execution.slurm serve|wire|collect``: the steps the rendered batch scripts run."""

from evalfleet.execution.slurm.task_command import main

raise SystemExit(main())
