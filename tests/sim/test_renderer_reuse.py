"""A closed renderer's GL context serves the next renderer of that size in the process, and that
renderer draws exactly what one in a fresh context draws; a state-only env makes no renderer until
something renders."""

from __future__ import annotations

import numpy as np

from evalfleet.sim import rendering
from evalfleet.sim.metaworld_env import MetaworldEnvironment
from evalfleet.sim.metaworld_spec import MetaworldOptions


def _env() -> MetaworldEnvironment:
    env = MetaworldEnvironment(MetaworldOptions(task="reach-v3", max_steps=10))
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
        fresh = rendering.OffscreenRenderer(second.env.model, size[1], size[0], "fast")  # a new context
        try:
            assert fresh._gl is not context
            np.testing.assert_array_equal(again, reference)
            np.testing.assert_array_equal(fresh.render(second.env.data, "corner")["rgb"], reference)
        finally:
            fresh.close()
    finally:
        second.close()


def test_the_pool_keeps_at_most_its_limit():
    envs = [_env() for _ in range(rendering.MAX_IDLE_CONTEXTS + 2)]
    for i, env in enumerate(envs):
        env.render("corner", 32 + 16 * i, 32)  # all different sizes: none reuses another's context
    for env in envs:
        env.close()
    assert sum(len(v) for v in rendering._idle_contexts.values()) <= rendering.MAX_IDLE_CONTEXTS
