"""OSMO backend: an Experiment → one or more OSMO (version 2) workflow specs, and their submission.

The package, by concern: `names` (task and workflow names, OSMO's `{{...}}` tokens), `resources` (where each
Run goes, the checks before rendering), `credentials` (secrets as variables and task credentials), `scripts`
(run.sh, serve.sh, collect.sh), `arena` (an Arena Run's runner task), `workflow` (the specs), `submit` (the
`osmo` backend: dry run, `osmo workflow submit`) and `task_steps` (what runs inside a task); `__main__` runs the
task-side command line, ``python -m evalfleet.backends.osmo ...``, whose parser is `evalfleet.cli.osmo_task`.

Shape of a rendered workflow (see docs/cluster.md)::

    workflow:
      name: <osmo.workflow_name or the Experiment's name>[-partN]
      resources: {default: <osmo.* profile>, collect: <small CPU profile>}
      timeout: {exec_timeout, queue_timeout}          # only when set
      groups:
      - name: run-<run>                               # one group per Run
        tasks:
        - name: runner-<run>   lead: true             # watchdog → runner on a one-Run experiment file
        - name: server-<run>                          # only for a policy whose binding needs a server
      - name: collect-group                           # last: takes every runner as input
        tasks:
        - name: collect        inputs: [{task: runner-<run>}, ...]

* The runner task gets its single-Run experiment (`LoadedExperiment.resolved_document()` restricted to the
  Run, the client wired to `{{host:server-<run>}}` and the binding's port) and its script in `files`. It
  waits for the server's port, runs ``evalfleet watchdog -- evalfleet runner ...`` into ``{{output}}``,
  writes ``<run>/run_status.json`` (failed + reason when the watchdog gave up) and always exits 0, so the
  collect task runs even when a Run failed. Exit 3006 (OSMO's FAILED_PREEMPTED) is rescheduled.
* A Run whose environment is an Isaac Lab Arena type (an external type, see experiment/validation.py) runs
  Arena's own runner instead (see `arena.arena_runner_script`): in `experiment_runner.image`, under evalfleet's
  watchdog judging liveness from the files Arena's runner writes, each attempt into its own folder
  ``{{output}}/arena_attempts/attempt-<NNN>`` (Arena's runner wants an empty one, and a restart then keeps what
  an earlier attempt recorded); the task leaves ``<run>/run_status.json`` (what each attempt did, what a
  restart reran) and Arena's ``experiment_runner_result.json``, and exits 0.
* The server task runs the binding's `ServerCommand.shell()` bound to 0.0.0.0 on the binding's port.
* The collect task runs ``evalfleet collect {{input:0}} ... --output <osmo.output_url>`` (``{{workflow_id}}``
  is left for OSMO to fill in); without `osmo.output_url` it collects into its own ``{{output}}``.
* Every value placed in a shell line goes through `evalfleet.shell` (one quoting rule: a value is one word bash
  never expands; only the script's own variables, `shell.Var`, expand); a user value containing ``{{`` is
  refused, because OSMO would read it as one of its tokens.
* Before anything is rendered: servers that need different pools or platforms, or an `osmo.*` profile that
  falls short of what a server binding needs (GPUs, CPUs, memory, platform), are a UserError (exit 2).
* An Experiment needing more than `osmo.max_tasks` tasks is split into several workflows, each a complete
  workflow with its own collect task (Runs are packed in file order). With a split, `osmo.output_url` must
  contain ``{{workflow_id}}`` so the parts land in separate folders; merge them with
  ``evalfleet collect URL1 URL2 ... --output DIR``.

`submit.submit_workflows(...)` writes each spec to a file and runs ``osmo workflow submit FILE -t json`` (plus
``--pool``/``--priority`` from the settings) and reads the workflow ID from the JSON answer (its ``name``).
"""

from evalfleet.backend_registry import register_backend
from evalfleet.backends.osmo.settings import ExperimentRunnerSettings, OsmoSettings

# Its tasks are fixed at submission: no wave of sequential stopping can be released later.
register_backend("osmo", "evalfleet.backends.osmo.submit:OsmoBackend", settings=OsmoSettings,
                 summary="OSMO workflows: one task group per Run, policy servers, a collect task",
                 executes=False, submits=True, sequential_waves=False, served_policies=True, gpus=True,
                 task_entry="python -m evalfleet.backends.osmo ...",
                 more_settings={"experiment_runner": ExperimentRunnerSettings})
