"""A closed renderer's GL context serves the next renderer of that size in the process, live renderers of
one size share one, and each draws exactly what it draws in a fresh context of its own; a state-only env
makes no renderer until something renders."""

from __future__ import annotations

import threading

import numpy as np

from evalfleet.sim import rendering
from evalfleet.sim.metaworld_env import MetaworldEnvironment
from evalfleet.sim.metaworld_spec import MetaworldOptions


def _env(task: str = "reach-v3") -> MetaworldEnvironment:
    env = MetaworldEnvironment(MetaworldOptions(task=task, max_steps=10))
    env.reset(7, {})
    return env


def test_next_renderer_of_a_size_reuses_the_closed_ones_context_and_draws_the_same():
    size = (48, 80)  # a size no other test renders at
    rendering.free_idle_contexts()  # earlier tests in this process may have filled the pool to its limit
    first = _env()
    assert len(first._renderers) == 0  # state only: nothing rendered, no renderer made
    reference = first.render("corner", *size)
    context = first._renderers[size]._gl
    first.close()
    assert context in rendering._idle_contexts[(size[1], size[0])]

    second = _env()
    try:
        again = second.render("corner", *size)
        assert second._renderers[size]._gl is context  # the kept context, not a new one
        assert context not in rendering._idle_contexts.get((size[1], size[0]), [])
        np.testing.assert_array_equal(again, reference)
    finally:
        second.close()
    rendering.free_idle_contexts()
    third = _env()
    try:
        assert third.render("corner", *size) is not None
        assert third._renderers[size]._gl is not context  # nothing kept: a new context
        np.testing.assert_array_equal(third.render("corner", *size), reference)
    finally:
        third.close()


def test_live_renderers_of_a_size_share_one_context_and_each_draws_its_own_scene():
    size = (40, 72)  # a size no other test renders at
    rendering.free_idle_contexts()
    alone = {}
    for task in ("reach-v3", "push-v3"):  # each in a context of its own, first
        env = _env(task)
        alone[task] = env.render("corner", *size)
        env.close()
        rendering.free_idle_contexts()
    assert not np.array_equal(alone["reach-v3"], alone["push-v3"])

    reach, push = _env("reach-v3"), _env("push-v3")
    try:
        first = reach.render("corner", *size)
        second = push.render("corner", *size)  # its MjrContext made in the context reach draws in
        context = reach._renderers[size]._gl
        assert push._renderers[size]._gl is context
        np.testing.assert_array_equal(first, alone["reach-v3"])
        np.testing.assert_array_equal(second, alone["push-v3"])
        np.testing.assert_array_equal(reach.render("corner", *size), alone["reach-v3"])  # in turn, again
        reach.close()  # push still draws in the context: it is neither freed nor kept for others
        assert context not in rendering._idle_contexts.get((size[1], size[0]), [])
        np.testing.assert_array_equal(push.render("corner", *size), alone["push-v3"])
    finally:
        reach.close()
        push.close()
    assert context in rendering._idle_contexts[(size[1], size[0])]  # the last one closed: kept


def test_renderers_in_different_threads_never_share_a_context():
    size = (40, 56)
    env = _env()
    other: dict = {}

    def in_a_thread() -> None:
        renderer = rendering.OffscreenRenderer(env.env.model, size[1], size[0], "fast")
        other["gl"] = renderer._gl
        other["image"] = renderer.render(env.env.data, "corner")["rgb"]
        renderer.close()

    try:
        here = env.render("corner", *size)
        thread = threading.Thread(target=in_a_thread)
        thread.start()
        thread.join()
        assert other["gl"] is not env._renderers[size]._gl
        np.testing.assert_array_equal(other["image"], here)
    finally:
        env.close()


def test_the_pool_keeps_at_most_its_limit():
    envs = [_env() for _ in range(rendering.MAX_IDLE_CONTEXTS + 2)]
    for i, env in enumerate(envs):
        env.render("corner", 32 + 16 * i, 32)  # all different sizes: none reuses another's context
    for env in envs:
        env.close()
    assert sum(len(v) for v in rendering._idle_contexts.values()) <= rendering.MAX_IDLE_CONTEXTS
