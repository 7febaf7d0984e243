"""The watchdog: supervise a runner process, restart it when it stalls or dies, stop it cleanly.

    evalfleet watchdog [--startup-timeout S] [--stall-timeout S] [--max-restarts N] [--heartbeat FILE]
                       [--poll S] [--term-grace S] [--backoff S] [--backoff-max S] [--status-file FILE]
                       [--liveness-from-files GLOB ...] -- CMD ...

CMD runs in its own process group (a new session) with its output going where the watchdog's goes. It learns the
heartbeat path from the environment variable EVALFLEET_HEARTBEAT and its attempt number (1, 2, ...) from
EVALFLEET_ATTEMPT; it reports progress there with `evalfleet.rollout.heartbeat.HeartbeatWriter`.

Liveness is progress, not output:
  * startup: from launch until the first heartbeat of this attempt whose state is not "starting" or whose steps or
    episodes are above 0. Longer than --startup-timeout → the attempt is stopped ("no_heartbeat" when nothing was
    read at all, "startup_timeout" when only "starting" heartbeats came).
  * running: progress is any change of (steps, episodes, state) between two heartbeat readings. No change for
    --stall-timeout (on the watchdog's own clock, from when it saw the last change) → "stalled". A heartbeat
    rewritten with the same numbers is not progress; bytes of output are not progress. A runner waiting between
    shards for the driver to release more (state "waiting", execution/shard_feed.py) has nothing to progress:
    there each rewrite of its heartbeat counts, so a live waiting runner is never stalled, a frozen one is.
  A heartbeat file left by an earlier attempt is deleted before each launch and ignored if it reappears (its
  "attempt" differs, or, without one, it was written before the launch).

A stopped attempt gets SIGTERM (and SIGCONT, so a SIGSTOPped process can act on it) to its whole group, then
SIGKILL after --term-grace. When the group leader exits, any process left in its group is killed. A child that
stalled, never started, exited non-zero or died from a signal is relaunched with the same command (the runner
resumes from its log: completed episodes are kept, nothing is wiped) after a backoff of --backoff seconds,
doubling per restart up to --backoff-max, at most --max-restarts times. Exit 0 of the child means done.

Exit codes:
  0    the child completed (exited 0)
  1    gave up: the last allowed attempt stalled / never heartbeat / exited non-zero / was killed
  2    bad usage (a one-line message names the flag)
  130  stopped by SIGINT (the child group was stopped: SIGTERM, then SIGKILL after --term-grace)
  143  stopped by SIGTERM (same)

--status-file FILE gets, atomically, {"state": "running|completed|failed|stopped", "reason", "restarts",
"attempts": [...]} whenever the state changes (see docs/watchdog.md for the attempt fields).

--liveness-from-files GLOB (repeatable) is for a child that writes no heartbeat, such as Isaac Lab Arena's own
runner: the watchdog makes the heartbeat itself from the files matching the globs (records, videos, logs), with
steps = their total size and episodes = how many are not empty, state "running" once any byte exists. Here growth
of output IS progress. "{attempt}" in a glob is this attempt's number (Python format: "{attempt:03d}"), so files
of earlier attempts never count.

From Python (e.g. a local backend running shards in threads): `supervise(cmd, heartbeat_path, config, ...)`
returns a `WatchdogResult`; set the `stop_event` you passed to stop everything.

Modules: `config` (WatchdogConfig, config_problems), `machine` (the pure WatchdogStateMachine), `heartbeats`
(which heartbeat counts, heartbeats made from files), `process` (the Watchdog driver, supervise, WatchdogResult);
`__main__` runs the command line, which lives in `evalfleet.cli.watchdog` (this package does not import it).
"""

from evalfleet.execution.watchdog.config import (
    FLAGS,
    MAX_RESTARTS,
    MAX_WATCHDOG_SECONDS,
    WatchdogConfig,
    config_problems,
)
from evalfleet.execution.watchdog.heartbeats import (
    STALE_HEARTBEAT_SLACK_S,
    files_heartbeat,
    heartbeat_is_current,
)
from evalfleet.execution.watchdog.machine import (
    Action,
    AttemptRecord,
    Finish,
    Kill,
    Launch,
    Terminate,
    Wait,
    WatchdogStateMachine,
    describe_exit,
)
from evalfleet.execution.watchdog.process import (
    EXIT_COMPLETED,
    EXIT_GAVE_UP,
    STOP_LOOK_S,
    Watchdog,
    WatchdogResult,
    supervise,
)

__all__ = [
    "EXIT_COMPLETED", "EXIT_GAVE_UP", "FLAGS", "MAX_RESTARTS", "MAX_WATCHDOG_SECONDS", "STALE_HEARTBEAT_SLACK_S",
    "STOP_LOOK_S", "Action", "AttemptRecord", "Finish", "Kill", "Launch", "Terminate", "Wait", "Watchdog",
    "WatchdogConfig", "WatchdogResult", "WatchdogStateMachine", "config_problems", "describe_exit",
    "files_heartbeat", "heartbeat_is_current", "supervise",
]
