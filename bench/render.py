"""Offscreen rendering cost, the run-time overhead of video recording, and (optionally) how the
camera-based `metaworld_vision` policy does at nominal and with its camera moved.

    python bench/render.py [--frames 100] [--episodes 20] [--repeats 3] [--vision-episodes 0] [--vision-offset 0.03]

Every figure is measured `--repeats` times and printed as median and spread, with the machine beside it.

Prints JSON:
- `ms_per_frame`: one RGB frame of Meta-World's `corner` camera (pick-place-v3) at 128 and 224 px,
  `fast` (no shadows/reflections/skybox/multisampling) and `default` quality, after a warm-up, and at 224 px
  with the meshes simplified to 1 and 2 pixels (`fast_meshes_<n>px`, what video frames draw);
- `renderer_setup_s`: building one OffscreenRenderer (GL context + the model's MjrContext): the first in
  the process (a fresh GL context) and later ones (a context kept from a closed renderer);
- `recording_state_policy` / `recording_camera_policy`: wall time of one Run (push-v3, scripted
  expert, `--episodes` episodes, one process via run_shards) without recording and with
  `recording: {video: true, cameras: [corner], every_n_episodes: 10, fps: 20}` at 224×224, and the
  relative overhead, in `--repeats` interleaved rounds (the order rotates each round). Video frames
  draw meshes simplified to 1 pixel (the default `mesh_tolerance_px`); `fps20_whole_meshes` draws
  them whole (as before), `fps20_meshes_2px` at 2 pixels;
- `simplified_frame_quality`: faces drawn and PSNR of a simplified 224 px frame against the full one,
  beside the PSNR H.264 itself leaves of the full frame; The state Run
  renders nothing otherwise, so recording pays for its frames (~10x a physics step each): `fps: 20`
  renders one state in four of Meta-World's 80 Hz control, `fps10` one in eight (state policy only: the
  price of a smoother video); `every_step` (state policy only) is full-rate recording, one frame per step,
  as before frames were sampled. The camera Run renders corner +
  gripperPOV at 224 px every step as a camera policy's would (recording reuses those frames: only
  encoding is added). A one-episode warm-up of each configuration first takes the process's one-time
  costs (imports, the GL backend, the first GL context, the encoder's first use) out of every timed run;
  `renderer_setup_s` states the GL part;
- `vision_policy` (when --vision-episodes > 0): success of `metaworld_vision` (corner camera, 160 px)
  on pick-place-v3 and push-v3 at nominal and with `camera.position_offset` uniform in ±offset
  metres per axis.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from _common import add_repeat_arg, emit, machine, ratios, spread


def _frame_ms(renderer, data, frames: int, repeats: int) -> dict:
    """Milliseconds per `corner` frame over `repeats` rounds of `frames`, after a warm-up."""
    for _ in range(5):
        renderer.render(data, "corner")
    timings = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(frames):
            renderer.render(data, "corner")
        timings.append(1000 * (time.perf_counter() - t0) / frames)
    return spread(timings, 3)


def ms_per_frame(frames: int, repeats: int = 1) -> tuple[dict[str, dict], dict[str, float]]:
    from evalfleet.sim.metaworld_env import make_task_env
    from evalfleet.sim.rendering import OffscreenRenderer

    env = make_task_env("pick-place-v3")
    env.seed(0)
    env.reset()
    out, setup = {}, []
    for quality in ("fast", "default"):
        for size in (128, 224):
            t0 = time.perf_counter()
            renderer = OffscreenRenderer(env.model, size, size, quality)
            setup.append(time.perf_counter() - t0)
            out[f"{size}px_{quality}"] = _frame_ms(renderer, env.data, frames, repeats)
            renderer.close()
    for tolerance in SIMPLIFIED_TOLERANCES_PX:  # video frames: meshes simplified (sim/mesh_detail.py)
        renderer = OffscreenRenderer(env.model, 224, 224, "fast", mesh_tolerance_px=tolerance)
        out[f"224px_fast_meshes_{tolerance:g}px"] = _frame_ms(renderer, env.data, frames, repeats)
        renderer.close()
    env.close()
    # 128 then 224 px are fresh contexts; the `default` pair reuses the contexts the `fast` pair left
    return out, {"first_in_process": round(setup[0], 3), "fresh_context": round(setup[1], 3),
                 "reused_context": spread(setup[2:], 3)["median"]}


def _timed_run(root: Path, name: str, episodes: int, recording: dict | None, cameras: bool = False
               ) -> tuple[float, int]:
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet.rollout.records import latest_records
    from evalfleet.rollout.runner import run_shards

    run = {
        "environment": {"type": "metaworld", "task": "push-v3", "max_steps": 150},
        "policy": {"type": "metaworld_expert"},
        "rollout_limit": {"num_episodes": episodes},
    }
    if recording:
        run["recording"] = recording
    if cameras:  # what a camera policy's Run renders every step anyway
        run["environment"].update(cameras=["corner", "gripperPOV"], image_size=224)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "seed": 0, "runs": {name: run}}))
    plan = make_plan(load_experiment(path))
    t0 = time.perf_counter()
    run_shards(plan.runs, plan.shards, root / name)
    elapsed = time.perf_counter() - t0
    steps = sum(r["episode_length"] for r in latest_records(root / name, name).values())
    return elapsed, steps


RECORDING = {"video": True, "cameras": ["corner"], "every_n_episodes": 10, "fps": 20, "width": 224, "height": 224}
SIMPLIFIED_TOLERANCES_PX = (1.0, 2.0)


def simplified_frame_quality() -> dict:
    """How far a simplified video frame is from the full one (PSNR, dB; higher is closer), beside what
    H.264 itself loses on the full frame (x264 veryfast, its default quality): corner camera, 224 px,
    after 30 random steps of pick-place-v3, with the faces drawn."""
    import io

    import av

    from evalfleet.sim.metaworld_env import make_task_env
    from evalfleet.sim.rendering import OffscreenRenderer

    def psnr(a: np.ndarray, b: np.ndarray) -> float:
        mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
        return round(10 * np.log10(255.0**2 / max(mse, 1e-12)), 1)

    env = make_task_env("pick-place-v3")
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(30):
        env.step(rng.uniform(-1, 1, 4))
    full = OffscreenRenderer(env.model, 224, 224)
    reference = full.render(env.data, "corner")["rgb"]
    full.close()
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=20)
        stream.width = stream.height = 224
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "veryfast"}
        for _ in range(3):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(reference, format="rgb24")))
        container.mux(stream.encode(None))
    buffer.seek(0)
    with av.open(buffer) as container:
        decoded = next(container.decode(video=0)).to_ndarray(format="rgb24")
    out: dict = {"faces_full": int(np.sum(env.model.mesh_facenum)), "psnr_db_h264_of_full": psnr(decoded, reference)}
    for tolerance in SIMPLIFIED_TOLERANCES_PX:
        renderer = OffscreenRenderer(env.model, 224, 224, "fast", mesh_tolerance_px=tolerance)
        frame = renderer.render(env.data, "corner")["rgb"]
        meshes = renderer._simplified[renderer.camera_id("corner")][0]
        out[f"{tolerance:g}px"] = {"faces": meshes.faces(), "psnr_db_vs_full": psnr(frame, reference)}
        renderer.close()
    env.close()
    return out


def recording_overhead(episodes: int, cameras: bool, repeats: int) -> dict:
    configs = {"without": None, "fps20": RECORDING}
    if not cameras:
        configs["fps20_whole_meshes"] = {**RECORDING, "mesh_tolerance_px": 0}  # as before meshes were simplified
        configs["fps20_meshes_2px"] = {**RECORDING, "mesh_tolerance_px": 2}
        configs["fps10"] = {**RECORDING, "fps": 10}
        configs["every_step"] = {**RECORDING, "every_step": True}
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    frames: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, rec in configs.items():
            _timed_run(root, f"warmup_{name}", 1, rec, cameras)
        names = list(configs)
        for i in range(repeats):
            for name in names[i % len(names):] + names[: i % len(names)]:  # rotate the order each round
                run = f"{name}_{i}"
                elapsed, steps = _timed_run(root, run, episodes, configs[name], cameras)
                seconds[name].append(elapsed)
                videos = sorted((root / run / run / "videos" / "corner").glob("*.mp4"))
                frames[name] = sum(_frame_count(v) for v in videos)
    out: dict = {"episodes": episodes, "steps": steps, "videos": episodes // 10 + (episodes % 10 > 0),
                 "video_frames": frames}
    out.update({f"seconds_{name}": spread(values, 3) for name, values in seconds.items()})
    for name in configs:
        if name != "without":
            out[f"overhead_{name}"] = spread([r - 1.0 for r in ratios(seconds[name], seconds["without"])], 4)
    return out


def _frame_count(path: Path) -> int:
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def vision_success(task: str, episodes: int, offset: float) -> float:
    from evalfleet.policies.base import PolicyContext
    from evalfleet.policies.vision import _make
    from evalfleet.sim.metaworld_env import MetaworldEnvironment
    from evalfleet.sim.metaworld_spec import MetaworldOptions

    opts = {"task": task, "cameras": ["corner"], "depth": True, "segmentation": True, "image_size": 160,
            "max_steps": 150}
    env = MetaworldEnvironment(MetaworldOptions(**opts))
    policy = _make({}, PolicyContext(run="bench", task=task, env_type="metaworld", env_options=opts))
    rng = np.random.default_rng(0)
    wins = 0
    for ep in range(episodes):
        variations = {"camera.position_offset": rng.uniform(-offset, offset, 3).tolist()} if offset else {}
        obs = env.reset(10_000 + ep, variations)
        policy.reset(10_000 + ep)
        while True:
            result = env.step(policy.act(obs))
            obs = result.observation
            if result.done:
                wins += result.success
                break
    env.close()
    return wins / episodes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--vision-episodes", type=int, default=0)
    ap.add_argument("--vision-offset", type=float, default=0.03)
    add_repeat_arg(ap)
    args = ap.parse_args(argv)
    from evalfleet.sim.rendering import gl_backend

    before = machine()

    backend = gl_backend()
    frame_ms, setup = ms_per_frame(args.frames, args.repeats)
    report: dict = {"backend": backend, "ms_per_frame": frame_ms, "renderer_setup_s": setup,
                    "simplified_frame_quality": simplified_frame_quality(),
                    "recording_state_policy": recording_overhead(args.episodes, False, args.repeats),
                    "recording_camera_policy": recording_overhead(args.episodes, True, args.repeats)}
    if args.vision_episodes:
        report["vision_policy"] = {
            task: {
                "episodes": args.vision_episodes,
                "nominal": vision_success(task, args.vision_episodes, 0.0),
                f"camera_offset_pm{args.vision_offset:g}m": vision_success(task, args.vision_episodes,
                                                                           args.vision_offset),
            }
            for task in ("pick-place-v3", "push-v3")
        }
    emit(report, machine_before=before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
