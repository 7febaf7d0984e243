"""Cluster makespan model: Arena's one-server-per-Run scheme versus evalfleet's shards + shared batching servers.

A seeded discrete-event model of a cluster of G GPUs evaluating 20 tasks x 2 served policies x 100 episodes
(40 Runs, 4,000 episodes). Prints one JSON object: for G in {8, 16, 40, 80}, makespan (hours), GPU-hours and
CPU-hours of both schemes, over `--repeats` seeds of the model (median and spread), plus the assumptions.
The headline states what runners hold: by default each runner holds 1 GPU (`--runner-gpus 1`), as Isaac Lab
runners do (the simulator and its cameras run on the GPU); `--runner-gpus 0` models CPU-side simulation
(Meta-World), where runners cost CPU-hours only.

    python bench/cluster_makespan.py [--gpus 8 16 40 80] [--seed 0] [--repeats 3] [--sim-step-ms 25]
                                     [--latency-ms 90 140] [--batch-gain 0.15] [--shard-size 10]
                                     [--runner-gpus 1] [--runner-cpus 8] [--server-cpus 8]

The workload (the same episodes for both schemes: common random numbers)
  * Episode length: a (task, policy) pair has a success probability p ~ Beta(2, 2); a successful episode ends
    after U(0.3, 0.8) x max_steps steps, a failed one runs to max_steps = 600 (Arena's robolab episode cap).
  * Simulation: the policy is queried once every open_loop_horizon = 8 steps (Arena's pi0 setting); the 8 sim
    steps between two queries take Gamma(mean 8 x sim_step_ms, cv 0.2). sim_step_ms = 25 is an assumption for an
    Isaac Lab scene with two cameras at num_envs = 1, not a measurement made here (nothing Isaac runs on this
    machine); pass your own measured figure with --sim-step-ms. An env reset costs 2 s.
  * Policy latency (one request, unbatched, on one GPU): 90 ms for policy A (pi0-like) and 140 ms for policy B
    (a larger VLA), each with cv 0.1, plus a 2 ms network round trip. These too are assumptions (flags).
  * Startup: a policy server loads its checkpoint in 120-240 s (uniform; image pull + checkpoint load); a
    runner starts its simulator in 40-80 s. Each Run in (a) and each shard in (b) pays a runner start.

(a) Arena's scheme: one server task + one runner task per Run, in one OSMO group. A Run holds 1 GPU for its
    server (+ --runner-gpus for its runner) from the group's start to its last episode; Runs wait in a FIFO queue
    while GPUs are busy. The server has exactly one client, so it never batches: each query costs the full
    single-request latency and the GPU idles while the runner simulates.
(b) evalfleet: every Run is cut into shards of K = 10 episodes, run by runner tasks on CPU nodes (they hold
    --runner-gpus each, 0 by default: CPU-side simulation as with Meta-World; with GPU rendering set it to 1 and
    runners then compete for the same G GPUs, and each policy gets ceil(G / (2 x (1 + 12))) replicas, every other GPU
    running a runner). Without runner GPUs each policy gets G/2 server replicas (one GPU each), started at
    t = 0 and stopped when the policy's last shard ends. 12 runners per replica are kept busy (enough to saturate a
    replica under these figures); a query goes to the replica with the shortest queue. A replica serves queued
    queries in batches of up to 8; a batch of b costs latency x (1 + batch_gain x (b - 1)), batch_gain = 0.15
    (a batch of 8 costs 2.05x one query: VLA inference is dominated by weight reads that a batch shares; our
    bench/serving.py measures the server-side batching machinery, not a GPU model).

GPU-hours count GPU reservations (server + runner GPUs), whether busy or idle, which is what a cluster bills;
CPU-hours likewise count the cores reserved by runner tasks (--runner-cpus each) and server tasks
(--server-cpus each) for as long as the tasks are held.
"""

from __future__ import annotations

import argparse
import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np
from _common import add_repeat_arg, emit, machine, spread

TASKS, POLICIES, EPISODES = 20, 2, 100
MAX_STEPS, HORIZON, RESET_S, RTT_S = 600, 8, 2.0, 0.002


@dataclass
class Workload:
    cycles: list[list[np.ndarray]]  # [run][episode] → sim seconds of each query cycle
    policy: list[int]  # run → policy index
    latency: np.ndarray  # per policy, seconds
    server_start: np.ndarray  # per Run (a) / reused for replicas (b)
    runner_start: np.ndarray  # per Run start and per shard start (b) draws from this pool


def make_workload(rng: np.random.Generator, sim_step_ms: float, latencies_ms: list[float]) -> Workload:
    cycles, policy = [], []
    for task in range(TASKS):
        for pol in range(POLICIES):
            p = rng.beta(2, 2)
            eps = []
            for _ in range(EPISODES):
                steps = int(rng.uniform(0.3, 0.8) * MAX_STEPS) if rng.random() < p else MAX_STEPS
                n = -(-steps // HORIZON)
                mean, cv = HORIZON * sim_step_ms / 1000.0, 0.2
                eps.append(rng.gamma(1 / cv**2, mean * cv**2, size=n))
            cycles.append(eps)
            policy.append(pol)
    return Workload(cycles, policy, np.asarray(latencies_ms) / 1000.0,
                    rng.uniform(120, 240, size=4 * TASKS * POLICIES), rng.uniform(40, 80, size=10_000))


def jitter(rng: np.random.Generator, mean: float, size: int | None = None):
    return rng.gamma(100.0, mean / 100.0, size=size)  # cv 0.1


# ---------------------------------------------------------------------------- (a) one server per Run


def arena(w: Workload, gpus: int, runner_gpus: int, rng: np.random.Generator) -> dict[str, float]:
    per_run = 1 + runner_gpus
    slots = gpus // per_run
    if slots < 1:
        raise ValueError("not enough GPUs for one Run")
    durations = []
    for r, eps in enumerate(w.cycles):
        lat = w.latency[w.policy[r]]
        t = max(w.server_start[r], w.runner_start[r])  # both start together; the runner waits for the server
        for cyc in eps:
            t += RESET_S + cyc.sum() + jitter(rng, lat, cyc.size).sum() + RTT_S * cyc.size
        durations.append(t)
    free = [0.0] * slots  # FIFO queue of Runs over `slots` parallel places
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + d)
        end = max(end, start + d)
    return {"makespan_h": end / 3600, "gpu_hours": sum(durations) * per_run / 3600, "runs_in_parallel": slots,
            "runner_task_hours": sum(durations) / 3600, "server_task_hours": sum(durations) / 3600}


# ---------------------------------------------------------------------------- (b) shards + shared servers


def evalfleet(w: Workload, gpus: int, runner_gpus: int, shard_size: int, batch_gain: float, max_batch: int,
              runners_per_replica: int, rng: np.random.Generator) -> dict[str, float]:
    if runner_gpus:  # runners compete for the GPUs: give servers the share that keeps them busy
        replicas_per_policy = max(1, -(-gpus // (POLICIES * (1 + runners_per_replica * runner_gpus))))
    else:
        replicas_per_policy = max(1, gpus // POLICIES)
    n_rep = replicas_per_policy * POLICIES
    rep_policy = [i // replicas_per_policy for i in range(n_rep)]
    rep_ready = w.server_start[:n_rep].copy()
    gpu_for_runners = gpus - n_rep if runner_gpus else None
    per_policy_runners = runners_per_replica * replicas_per_policy
    if runner_gpus:  # every GPU not serving runs a runner
        per_policy_runners = max(1, gpu_for_runners // runner_gpus // POLICIES)
    shards = {p: deque() for p in range(POLICIES)}
    for r, eps in enumerate(w.cycles):
        for s in range(0, len(eps), shard_size):
            shards[w.policy[r]].append((r, s, min(s + shard_size, len(eps))))
    starts = iter(w.runner_start)
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, who)
    seq = 0

    def push(t: float, kind: str, who: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, who))
        seq += 1

    # Runner state: [policy, run, episode, stop, cycle index]
    runners: list[list[int]] = []
    runner_gpu_seconds = 0.0
    runner_busy_since: dict[int, float] = {}
    cpu_task_seconds = 0.0

    def next_shard(i: int, t: float) -> None:
        nonlocal runner_gpu_seconds, cpu_task_seconds
        pol = runners[i][0]
        if i in runner_busy_since:
            held = t - runner_busy_since.pop(i)
            runner_gpu_seconds += held * runner_gpus
            cpu_task_seconds += held
        if not shards[pol]:
            return
        r, s, e = shards[pol].popleft()
        runners[i][1:] = [r, s, e, 0]
        runner_busy_since[i] = t
        push(t + next(starts) + RESET_S, "query", i)

    for pol in range(POLICIES):
        for _ in range(per_policy_runners):
            runners.append([pol, -1, 0, 0, 0])
            next_shard(len(runners) - 1, 0.0)
    queues = [deque() for _ in range(n_rep)]
    busy = [False] * n_rep
    in_batch: list[list[int]] = [[] for _ in range(n_rep)]
    policy_done = [0.0] * POLICIES

    def start_batch(k: int, t: float) -> None:
        t = max(t, rep_ready[k])
        batch = [queues[k].popleft() for _ in range(min(max_batch, len(queues[k])))]
        in_batch[k] = batch
        busy[k] = True
        cost = jitter(rng, w.latency[rep_policy[k]]) * (1 + batch_gain * (len(batch) - 1))
        push(t + cost, "batch", k)

    while events:
        t, _, kind, who = heapq.heappop(events)
        if kind == "query":
            pol = runners[who][0]
            k = min((j for j in range(n_rep) if rep_policy[j] == pol), key=lambda j: len(queues[j]) + busy[j])
            queues[k].append(who)
            if not busy[k]:
                start_batch(k, t)
        else:  # a batch finished: each runner simulates its cycle, then queries again or ends the episode
            busy[who] = False
            for i in in_batch[who]:
                _, r, ep, stop, c = runners[i]
                cyc = w.cycles[r][ep]
                t_next = t + RTT_S + cyc[c]
                if c + 1 < cyc.size:
                    runners[i][4] = c + 1
                    push(t_next, "query", i)
                elif ep + 1 < stop:
                    runners[i][2:] = [ep + 1, stop, 0]
                    push(t_next + RESET_S, "query", i)
                else:
                    policy_done[runners[i][0]] = max(policy_done[runners[i][0]], t_next)
                    next_shard(i, t_next)
            in_batch[who] = []
            if queues[who]:
                start_batch(who, t)
    makespan = max(policy_done)
    server_seconds = sum(policy_done[rep_policy[k]] for k in range(n_rep))
    return {"makespan_h": makespan / 3600, "gpu_hours": (server_seconds + runner_gpu_seconds) / 3600,
            "server_replicas": n_rep, "runners": len(runners), "runner_task_hours": cpu_task_seconds / 3600,
            "server_task_hours": server_seconds / 3600}


def with_cpu_hours(m: dict[str, float], runner_cpus: float, server_cpus: float) -> dict[str, float]:
    return {**m, "cpu_hours": m["runner_task_hours"] * runner_cpus + m["server_task_hours"] * server_cpus}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 16, 40, 80])
    ap.add_argument("--seed", type=int, default=0, help="first seed; repeat i uses seed + i")
    ap.add_argument("--sim-step-ms", type=float, default=25.0)
    ap.add_argument("--latency-ms", type=float, nargs=2, default=[90.0, 140.0])
    ap.add_argument("--batch-gain", type=float, default=0.15)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--shard-size", type=int, default=10)
    ap.add_argument("--runners-per-replica", type=int, default=12)
    ap.add_argument("--runner-gpus", type=int, default=1,
                    help="GPUs each runner holds (default 1, as Isaac Lab runners do; 0 for CPU-side simulation)")
    ap.add_argument("--runner-cpus", type=float, default=8.0, help="cores each runner task reserves (default 8)")
    ap.add_argument("--server-cpus", type=float, default=8.0, help="cores each server task reserves (default 8)")
    add_repeat_arg(ap)
    args = ap.parse_args()
    before = machine()
    samples: dict[int, list[dict]] = {g: [] for g in args.gpus}
    queries = []
    for i in range(args.repeats):
        seed = args.seed + i
        w = make_workload(np.random.default_rng(seed), args.sim_step_ms, args.latency_ms)
        queries.append(int(sum(c.size for eps in w.cycles for c in eps)))
        for g in args.gpus:
            a = with_cpu_hours(arena(w, g, args.runner_gpus, np.random.default_rng([seed, g, 1])),
                               args.runner_cpus, args.server_cpus)
            b = with_cpu_hours(evalfleet(w, g, args.runner_gpus, args.shard_size, args.batch_gain, args.max_batch,
                                         args.runners_per_replica, np.random.default_rng([seed, g, 2])),
                               args.runner_cpus, args.server_cpus)
            samples[g].append({"arena": a, "evalfleet": b})
    rows, headline = {}, {}
    for g, reps in samples.items():
        def figure(scheme: str, key: str) -> dict:
            return spread([r[scheme][key] for r in reps], 3)

        row = {scheme: {k: figure(scheme, k) for k in reps[0][scheme]} for scheme in ("arena", "evalfleet")}
        row["speedup"] = spread([r["arena"]["makespan_h"] / r["evalfleet"]["makespan_h"] for r in reps], 2)
        row["gpu_hours_ratio"] = spread([r["arena"]["gpu_hours"] / r["evalfleet"]["gpu_hours"] for r in reps], 2)
        row["cpu_hours_ratio"] = spread([r["arena"]["cpu_hours"] / r["evalfleet"]["cpu_hours"] for r in reps], 2)
        rows[str(g)] = row
        headline[f"{g}_gpus"] = {
            "makespan_h": {"arena": row["arena"]["makespan_h"]["median"],
                           "evalfleet": row["evalfleet"]["makespan_h"]["median"]},
            "makespan_speedup": row["speedup"]["median"],
            "gpu_hours": {"arena": row["arena"]["gpu_hours"]["median"],
                          "evalfleet": row["evalfleet"]["gpu_hours"]["median"]},
            "cpu_hours": {"arena": row["arena"]["cpu_hours"]["median"],
                          "evalfleet": row["evalfleet"]["cpu_hours"]["median"]},
        }
    holds = (f"each runner holds {args.runner_gpus} GPU(s) and {args.runner_cpus:g} cores (Isaac Lab-like)"
             if args.runner_gpus else f"runners hold no GPU, {args.runner_cpus:g} cores each (CPU-side simulation)")
    emit({
        "headline": {"runners": holds, "medians_over_seeds": args.repeats, **headline},
        "workload": {"tasks": TASKS, "policies": POLICIES, "episodes_per_run": EPISODES,
                     "episodes": TASKS * POLICIES * EPISODES, "queries": spread(queries, 0)},
        "assumptions": {"sim_step_ms": args.sim_step_ms, "latency_ms": args.latency_ms,
                        "batch_gain": args.batch_gain, "max_batch": args.max_batch, "shard_size": args.shard_size,
                        "runners_per_replica": args.runners_per_replica, "runner_gpus": args.runner_gpus,
                        "runner_cpus": args.runner_cpus, "server_cpus": args.server_cpus,
                        "max_steps": MAX_STEPS, "open_loop_horizon": HORIZON,
                        "seeds": [args.seed + i for i in range(args.repeats)]},
        "by_gpus": rows,
    }, machine_before=before)


if __name__ == "__main__":
    main()
