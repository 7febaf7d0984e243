"""`evalfleet.evaluate(policy, experiment)`: evaluation during training.

The policy is an object of the calling process (anything with the policy protocol: `act_batch` or `act`,
optional `reset`; or a plain callable observation → action). evalfleet serves it from this process over its
own openpi server on loopback — one batching worker thread, so the policy is never called concurrently and
requests from every runner are batched into one `act_batch` — points every Run of the Experiment at it,
runs the Experiment on the local backend, and returns the result. Everything it started is stopped before
it returns (the server, its threads, the runner processes), also when the run fails or is interrupted.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import yaml

from evalfleet.errors import UserError
from evalfleet.execution.api import argument, check_common, check_count, check_strings
from evalfleet.execution.guarded_policy import THREAD_NAME, GuardedPolicy
from evalfleet.execution.pipeline import load, run, stderr_log
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.experiment.loading import LoadedExperiment, load_experiment
from evalfleet.layout import EXPERIMENT_FILE
from evalfleet.outputs.result import ExperimentResult
from evalfleet.policies.base import BasePolicy
from evalfleet.serving.openpi import OpenpiServer
from evalfleet.serving.process import ServerThread

SERVED_POLICY_TYPE = "openpi_remote"
DEFAULT_MAX_WAIT_MS = 2.0
REPLY_GRACE_S = 5.0  # a client waits this much past the episode's deadline for the server's timeout error


class _CallablePolicy(BasePolicy):
    """A function observation → action, or an object with `act` only, as a full policy."""

    def __init__(self, act: Callable[..., Any], reset: Callable[..., Any] | None = None):
        self._act = act
        self._reset = reset

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        if self._reset is not None:
            self._reset(episode_seed, env_id)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return np.asarray(self._act(observation))


def as_policy(policy: Any) -> Any:
    """The object the server calls: the policy itself when it has `act_batch` and `reset`, else an adapter."""
    if callable(getattr(policy, "act_batch", None)) and callable(getattr(policy, "reset", None)):
        return policy
    act = getattr(policy, "act", None)
    if callable(act):
        return _CallablePolicy(lambda obs: act(obs), getattr(policy, "reset", None))
    if callable(policy):
        return _CallablePolicy(policy)
    raise UserError(f"cannot evaluate a {type(policy).__name__}: give an object with act(observation) or "
                    "act_batch(observations, env_ids), or a function observation -> action",
                    where=argument("evaluate", "policy"))


def policy_tag(policy: Any) -> str:
    """The `policy_name` tag of the results: the policy's `name`, its class, or the function's name."""
    name = getattr(policy, "name", None)
    if not (isinstance(name, str) and name):
        is_object = hasattr(policy, "act") or hasattr(policy, "act_batch")
        name = type(policy).__name__ if is_object else getattr(policy, "__name__", "policy")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.-") or "policy"


def served_document(loaded: LoadedExperiment, host: str, port: int, tag: str,
                    runs: Iterable[str] | None) -> dict[str, Any]:
    """The resolved Experiment with every chosen Run's policy replaced by a client of the in-process server.
    A request waits for its reply as long as the Run's episode may last (and a little longer, so that the
    server's own timeout error arrives first); a lost in-process server is not retried."""
    doc = loaded.resolved_document()
    chosen = chosen_runs(loaded, runs)
    doc["runs"] = {name: {**doc["runs"][name], "policy_name": tag,
                          "policy": {"type": SERVED_POLICY_TYPE, "host": host, "port": port, "max_retries": 0,
                                     "request_timeout_s": loaded.experiment.runs[name].episode_timeout_s
                                     + REPLY_GRACE_S}}
                   for name in chosen}
    return doc


def chosen_runs(loaded: LoadedExperiment, runs: Iterable[str] | None) -> list[str]:
    names = list(loaded.experiment.runs)
    chosen = list(runs) if runs is not None else names
    for name in chosen:
        if name not in names:
            raise UserError(f"no Run named {name!r} in {loaded.path}; Runs: {', '.join(names)}",
                            where=argument("evaluate", "runs"))
    return chosen


def evaluate(policy: Any, experiment: str | os.PathLike[str] | LoadedExperiment, *, overrides: Iterable[str] = (),
             output: str | os.PathLike[str] | None = None, runs: Iterable[str] | None = None,
             workers: int | None = None, policy_name: str | None = None, max_batch: int | None = None,
             max_wait_ms: float = DEFAULT_MAX_WAIT_MS, progress: bool = False,
             watchdog: WatchdogConfig | None = None,
             log: Callable[[str], None] = stderr_log, step: int | None = None) -> ExperimentResult:
    """Evaluate an in-process `policy` on the Experiment's Runs (or the named `runs`) and return the result.

    The Experiment's own policies are replaced by `policy`, tagged `policy_name` (default: its `name`
    attribute or class name). `max_batch`: largest batch one `act_batch` call gets (default: the number of
    envs stepping at once). A policy that raises (SystemExit too) or does not return within the Run's
    `episode_timeout_s` yields error records (infrastructure errors, retried and then left as errors in the
    result), never an exception or a hang here; while a call is still blocked, further calls fail at once.
    `step`: the training step (an integer >= 0) at which the Experiment's `tracking:` sinks log this
    evaluation; calls with steps into one output root land in one tracker run, a point per step."""
    listed = check_common("evaluate", experiment=experiment, overrides=overrides, output=output, workers=workers,
                          progress=progress, watchdog=watchdog, log=log)
    runs = check_strings(runs, where=argument("evaluate", "runs"), what="Run names", optional=True)
    if policy_name is not None and not (isinstance(policy_name, str) and policy_name.strip()):
        raise UserError(f"expected a non-empty name or None, got {policy_name!r}",
                        where=argument("evaluate", "policy_name"))
    check_count(max_batch, where=argument("evaluate", "max_batch"))
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise UserError(f"expected a training step (an integer >= 0) or None, got {step!r}",
                        where=argument("evaluate", "step"))
    if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, (int, float)) or not 0 <= max_wait_ms < 1e6:
        raise UserError(f"expected milliseconds >= 0 (a number), got {max_wait_ms!r}",
                        where=argument("evaluate", "max_wait_ms"))
    served = as_policy(policy)
    loaded = load(experiment, listed)
    chosen = chosen_runs(loaded, runs)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    envs = max(r.environment_builder.num_envs for r in loaded.experiment.runs.values())
    tag = policy_name or policy_tag(policy)
    deadline = max(loaded.experiment.runs[name].episode_timeout_s for name in chosen)
    guarded = GuardedPolicy(served, deadline_s=deadline, name=f"the policy {tag!r}")
    server = OpenpiServer(guarded, host="127.0.0.1", port=0, max_batch=max_batch or max(1, workers * envs),
                          max_wait_ms=max_wait_ms, metadata=dict(getattr(policy, "metadata", None) or {}))
    try:
        with ServerThread(server) as thread, tempfile.TemporaryDirectory(prefix="evalfleet-evaluate-") as tmp:
            try:
                doc = served_document(loaded, thread.host, int(thread.port), tag, chosen)
                wired = Path(tmp) / EXPERIMENT_FILE
                wired.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
                return run(load_experiment(wired), output=output, backend="local", workers=workers,
                           progress=progress, watchdog=watchdog, log=log, tracking_step=step)
            finally:
                guarded.close()  # a call still waiting on the policy gives up: the server can stop at once
    finally:
        guarded.close()
        server.worker.join()  # the server's policy thread; the server thread was joined on leaving `with`
        if not guarded.join():
            log(f"evaluate: {tag} is still blocked in a call that does not return; its daemon thread "
                f"{THREAD_NAME!r} ends when that call returns")
