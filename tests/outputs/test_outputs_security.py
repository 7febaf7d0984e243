"""What leaves an output folder (issue 30): links out of a source, FIFOs, files that are not what their name
says, modes of copies; credentials in URLs; bad S3 endpoints; the plan of a Run without run_status.json."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from outputs_helpers import record, tiny_png, write_jsonl

from evalfleet.analysis.loading import load_records
from evalfleet.outputs.collect import collect
from evalfleet.outputs.finalize import write_report

SECRET = "SeCrEt/with+and@at"
URL = f"s3://AKIAKEY:{SECRET}@bucket/results"
EXPERIMENT = "name: exp\nruns:\n  r1:\n    rollout_limit: {num_episodes: 2}\n"


def make_source(root: Path) -> Path:
    """A Run folder r1 with two failures (episodes 0 and 1) and an experiment.yaml planning 2 episodes."""
    run = root / "r1"
    write_jsonl(run / "parts" / "shard-000.jsonl", [record("r1", 0, "failure"), record("r1", 1, "failure")])
    (root / "experiment.yaml").write_text(EXPERIMENT)
    return root


def outside_secret(tmp_path: Path, name: str = "shadow", text: str = "root:$6$hash:19000:0:99999:7:::\n") -> Path:
    path = tmp_path / "elsewhere" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("EVALFLEET_S3_ENDPOINT", "AWS_ENDPOINT_URL")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120, check=False)


# --- 1. links, FIFOs and files that are not what their name says -----------------------------------------

def test_collect_skips_links_leading_out_of_the_source(tmp_path: Path):
    src = make_source(tmp_path / "src")
    secret = outside_secret(tmp_path)
    (src / "experiment.yaml").unlink()
    (src / "experiment.yaml").symlink_to(secret)
    videos = src / "r1" / "videos"
    videos.mkdir()
    (videos / "episode_0.mp4").symlink_to(secret)
    write_jsonl(tmp_path / "elsewhere" / "part.jsonl", [record("r1", 0, "success", attempt=9)])
    (src / "r1" / "parts" / "shard-001.jsonl").symlink_to(tmp_path / "elsewhere" / "part.jsonl")
    (src / "plots").mkdir()
    (src / "plots" / "p.png").symlink_to(secret)

    out = tmp_path / "out"
    result = collect([str(src)], str(out), report=True)

    files = tree(out)
    assert not any(secret.read_bytes() in data for data in files.values())
    assert "experiment.yaml" not in files and "r1/videos/episode_0.mp4" not in files and "plots/p.png" not in files
    assert result["runs"]["r1"]["counts"]["success"] == 0  # the linked part file is not counted
    skipped = {s["path"]: s["why"] for s in result["skipped_files"]}
    assert set(skipped) == {f"{src}/experiment.yaml", f"{src}/r1/videos/episode_0.mp4",
                            f"{src}/r1/parts/shard-001.jsonl", f"{src}/plots/p.png"}
    assert set(skipped.values()) == {"a link leading out of its folder"}
    assert json.loads(files["experiment_result.json"])["skipped_files"] == result["skipped_files"]
    page = files["index.html"].decode()
    assert "4 file(s) in the sources were skipped" in page and "shard-001.jsonl" in page


def test_links_inside_the_source_are_followed(tmp_path: Path):
    src = make_source(tmp_path / "src")
    (src / "r1" / "videos").mkdir()
    (src / "r1" / "videos" / "real.mp4").write_bytes(b"mp4")
    (src / "r1" / "videos" / "alias.mp4").symlink_to("real.mp4")
    result = collect([str(src)], str(tmp_path / "out"))
    assert (tmp_path / "out" / "r1" / "videos" / "alias.mp4").read_bytes() == b"mp4"
    assert result["skipped_files"] == []


def test_fifos_do_not_hang_collect_and_are_skipped(tmp_path: Path):
    src = make_source(tmp_path / "src")
    (src / "experiment.yaml").unlink()
    os.mkfifo(src / "experiment.yaml")
    os.mkfifo(src / "r1" / "parts" / "shard-001.jsonl")
    (src / "r1" / "videos").mkdir()
    os.mkfifo(src / "r1" / "videos" / "episode_0.mp4")
    out = tmp_path / "out"
    # A subprocess, so a hang fails this test (after a generous safety net) instead of blocking the suite.
    proc = cli("collect", str(src), "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "experiment_result.json").read_text())
    assert {s["why"] for s in result["skipped_files"]} == {"not a regular file (a FIFO)"}
    assert len(result["skipped_files"]) == 3
    assert sorted(tree(out)) == ["experiment_result.json", "index.html", "r1/episode_results.jsonl",
                                 "report_episodes/0000.js"]  # the report's episode table of r1


def test_an_experiment_yaml_that_is_not_an_experiment_is_not_copied(tmp_path: Path):
    src = make_source(tmp_path / "src")
    (src / "experiment.yaml").write_text("root:$6$hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    result = collect([str(src)], str(tmp_path / "out"))
    assert not (tmp_path / "out" / "experiment.yaml").exists()
    assert [s["path"] for s in result["skipped_files"]] == [f"{src}/experiment.yaml"]
    assert result["skipped_files"][0]["why"].startswith("not an Experiment")


def test_run_names_from_experiment_yaml_never_leave_the_output(tmp_path: Path):
    src = make_source(tmp_path / "src")
    (src / "experiment.yaml").write_text("runs:\n  r1: {}\n  ../../escaped: {}\n")
    result = collect([str(src)], str(tmp_path / "a" / "out"))
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "a" / "escaped").exists()
    assert list(result["runs"]) == ["r1"]


def test_copies_are_never_more_readable_than_their_source(tmp_path: Path):
    src = make_source(tmp_path / "src")
    (src / "experiment.yaml").chmod(0o600)
    videos = src / "r1" / "videos"
    videos.mkdir()
    (videos / "private.mp4").write_bytes(b"a")
    (videos / "private.mp4").chmod(0o600)
    (videos / "public.mp4").write_bytes(b"b")
    (videos / "public.mp4").chmod(0o644)
    out = tmp_path / "out"
    collect([str(src)], str(out))

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    assert mode(out / "experiment.yaml") == 0o600
    assert mode(out / "r1" / "videos" / "private.mp4") == 0o600
    assert mode(out / "r1" / "videos" / "public.mp4") == 0o644


def test_report_reads_only_what_lies_in_its_folder(tmp_path: Path):
    out = make_source(tmp_path / "out")
    collect([str(out)], str(out))
    secret = outside_secret(tmp_path, "evil.png", "not a plot")
    (out / "plots").mkdir()
    (out / "plots" / "evil.png").symlink_to(secret)
    (out / "plots" / "fine.png").write_bytes(tiny_png())
    write_report(str(out))
    page = (out / "index.html").read_text()
    assert "plots/fine.png" in page
    assert 'src="plots/evil.png"' not in page and "a link leading out of its folder" in page


def test_plot_reader_skips_links_leading_out_and_fifos(tmp_path: Path):
    src = make_source(tmp_path / "src")
    write_jsonl(tmp_path / "elsewhere" / "part.jsonl", [record("r1", 0, "success", attempt=9)])
    (src / "r1" / "parts" / "shard-001.jsonl").symlink_to(tmp_path / "elsewhere" / "part.jsonl")
    os.mkfifo(src / "r1" / "parts" / "shard-002.jsonl")
    os.mkfifo(src / "stuck.tar")
    # A subprocess, so a hang fails this test (after a generous safety net) instead of blocking the suite.
    code = ("import json, sys; from evalfleet.analysis.loading import load_records; r = load_records([sys.argv[1]]); "
            "print(json.dumps({'status': [x['status'] for x in r.records], 'skipped': sorted(r.skipped)}))")
    proc = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["status"] == ["failure", "failure"]
    assert got["skipped"] == sorted([str(src / "r1" / "parts" / "shard-001.jsonl"),
                                     str(src / "r1" / "parts" / "shard-002.jsonl"), str(src / "stuck.tar")])


# --- 2. credentials in URLs ------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["collect", "src", "--output", URL],
    ["collect", URL, "--output", "out"],
    ["report", URL],
    ["plot", "src", "--output", URL + "/rates.png"],
    ["plot", URL],
    ["compare", "src", "--baseline", "expert", "--output", URL + "/c.json"],
    ["run", "{examples}/quickstart.yaml", "--output", URL],
    ["run", "--resume", "--output", URL],
], ids=lambda a: " ".join(a[:2]))
def test_credentials_in_a_url_are_never_printed_nor_a_folder_name(tmp_path: Path, args: list[str]):
    make_source(tmp_path / "src")
    examples = Path(__file__).resolve().parents[2] / "examples"
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    proc = cli(*[a.format(examples=examples) for a in args], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr and "AKIAKEY" not in proc.stdout + proc.stderr
    assert "s3://***@bucket" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before  # nothing written


def test_the_python_api_refuses_a_url_output_before_writing(tmp_path: Path, monkeypatch):
    import evalfleet

    monkeypatch.chdir(tmp_path)
    examples = Path(__file__).resolve().parents[2] / "examples"
    with pytest.raises(evalfleet.UserError) as err:
        evalfleet.run(examples / "quickstart.yaml", output=URL)
    assert SECRET not in err.value.line() and "s3://***@bucket" in err.value.line()
    assert list(tmp_path.iterdir()) == []


# --- 3. bad S3 endpoints ---------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["flag", "EVALFLEET_S3_ENDPOINT", "AWS_ENDPOINT_URL", "credentials"])
def test_a_bad_s3_endpoint_is_one_line_and_exit_2(tmp_path: Path, how: str):
    pytest.importorskip("s3fs")
    make_source(tmp_path / "src")
    args = ["collect", "src", "--output", "s3://bucket/results"]
    env = {}
    if how == "flag":
        args += ["--s3-endpoint", "notaurl"]
    elif how == "credentials":
        args += ["--s3-endpoint", f"http://user:{SECRET}@127.0.0.1:9"]
    else:
        env[how] = "notaurl"
    proc = cli(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    named = {"flag": "command line: --s3-endpoint", "credentials": "command line: --s3-endpoint"}.get(
        how, f"environment: {how}")
    assert named in lines[0] and "http(s)://host[:port]" in lines[0]
    assert SECRET not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_bad_s3_endpoint_flag_is_refused_for_local_outputs_too(tmp_path: Path):
    make_source(tmp_path / "src")
    proc = cli("collect", "src", "--output", "out", "--s3-endpoint", "notaurl", cwd=tmp_path)
    assert proc.returncode == 2 and "--s3-endpoint" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- 4. the plan of a Run folder without run_status.json -------------------------------------------------

def test_collect_holds_a_run_without_status_to_the_experiment_plan(tmp_path: Path):
    src = make_source(tmp_path / "src")
    write_jsonl(src / "r1" / "parts" / "shard-009.jsonl", [record("r1", 5, "success")])
    assert not (src / "r1" / "run_status.json").exists()
    result = collect([str(src)], str(tmp_path / "out"), report=True)
    run = result["runs"]["r1"]
    assert (run["counts"]["success"], run["counts"]["failure"], run["success_rate"]) == (0, 2, 0.0)
    assert run["set_aside"]["out_of_plan"] == 1 and run["planned_episodes"] == 2
    # The report of the collected folder and the analyses read the same plan.
    write_report(str(tmp_path / "out"))
    records = load_records([str(src)])
    assert [r["episode"] for r in records.records] == [0, 1] and records.set_aside.out_of_plan == 1


def test_the_plan_from_shared_rollout_limit(tmp_path: Path):
    src = make_source(tmp_path / "src")
    (src / "experiment.yaml").write_text("shared:\n  rollout_limit: {num_episodes: 2}\nruns:\n  r1: {}\n")
    write_jsonl(src / "r1" / "parts" / "shard-009.jsonl", [record("r1", 2, "success")])
    result = collect([str(src)], str(tmp_path / "out"))
    assert result["runs"]["r1"]["counts"]["success"] == 0
    assert result["runs"]["r1"]["set_aside"]["out_of_plan"] == 1
