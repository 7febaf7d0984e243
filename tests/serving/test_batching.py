from __future__ import annotations

import threading

import numpy as np
import pytest
from serving_test_policies import ServingTestPolicy

from evalfleet.serving.gr00t import Gr00tRemoteOptions, Gr00tRemotePolicy, Gr00tServer
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy, OpenpiServer
from evalfleet.serving.process import ServerThread

CLIENTS = 8
STEPS = 5


def run_clients(make_client) -> dict[int, list[np.ndarray]]:
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(CLIENTS)

    def work(k: int) -> None:
        try:
            remote = make_client()
            remote.reset(100 + k, 0)
            barrier.wait(10)
            results[k] = [remote.act({"observation/state": np.array([k, step], np.float32)}) for step in range(STEPS)]
            remote.close()
        except BaseException as exc:  # noqa: BLE001 - the test thread reports any failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


@pytest.mark.parametrize("protocol", ["openpi", "gr00t"])
def test_concurrent_clients_each_get_their_own_actions_in_shared_batches(protocol):
    policy = ServingTestPolicy({"cost_ms": 20})
    if protocol == "openpi":
        server = OpenpiServer(policy, max_batch=CLIENTS, max_wait_ms=200)
        make = lambda: OpenpiRemotePolicy(OpenpiRemoteOptions(port=thread.port, connect_timeout_s=10))  # noqa: E731 - a local factory
    else:
        server = Gr00tServer(policy, max_batch=CLIENTS, max_wait_ms=200)
        make = lambda: Gr00tRemotePolicy(Gr00tRemoteOptions(port=thread.port, connect_timeout_s=10))  # noqa: E731 - a local factory
    with ServerThread(server) as thread:
        results = run_clients(make)
    for k in range(CLIENTS):
        for step, action in enumerate(results[k]):
            np.testing.assert_allclose(action[:3], [2 * k, 2 * step, 100 + k])
    stats = server.worker.stats
    assert stats.requests == CLIENTS * (STEPS + 0) and stats.largest_batch > 1
    assert stats.calls < stats.requests  # requests were merged into fewer act_batch calls


def test_batching_off_means_one_call_per_request():
    policy = ServingTestPolicy({})
    server = OpenpiServer(policy, max_batch=1)
    with ServerThread(server) as thread:
        remote = OpenpiRemotePolicy(OpenpiRemoteOptions(port=thread.port, connect_timeout_s=5))
        remote.act_batch([{"observation/state": np.array([i], np.float32)} for i in range(4)], [0, 1, 2, 3])
    assert server.worker.stats.sizes == [1, 1, 1, 1]


def test_one_client_with_many_envs_fills_one_batch():
    policy = ServingTestPolicy({})
    server = OpenpiServer(policy, max_batch=8, max_wait_ms=2000)
    with ServerThread(server) as thread:
        remote = OpenpiRemotePolicy(OpenpiRemoteOptions(port=thread.port, connect_timeout_s=5))
        for env_id in range(4):
            remote.reset(env_id, env_id)  # opens all four connections
        actions = remote.act_batch([{"observation/state": np.array([i], np.float32)} for i in range(4)], [0, 1, 2, 3])
    assert [a[0] for a in actions] == [0, 2, 4, 6]
    # four open connections and four requests: the batch went at once instead of waiting 2 s
    assert server.worker.stats.sizes[-1] == 4
