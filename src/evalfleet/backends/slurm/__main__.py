"""``python -m evalfleet.backends.slurm serve|wire|collect``: the steps the rendered batch scripts run; their
parser is `evalfleet.cli.slurm_task`."""

from evalfleet.cli.slurm_task import main

raise SystemExit(main())
