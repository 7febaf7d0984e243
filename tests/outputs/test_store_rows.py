"""The results store's episode rows (#53): Arrow's JSON reader, where store/rows.py lets it read a records file, gives
every column exactly as Python's json read line by line does (numbers Arrow formats otherwise, map keys absent or
null, text json.dumps escapes, blank lines); where it might not, it declines and Python reads the file."""

from __future__ import annotations

import json
import math
import random

import pytest

from evalfleet.outputs.storage import open_location
from evalfleet.store.rows import arrow_columns, python_columns

KEYS = ("object.mass", "light.intensity", "object.position", "camera.fov")
NUMBERS = (0.0, -0.0, 1.0, 3.0, 1e-4, 9.99e-5, 1e9, 1e16, 5e-324, 0.1, 2.0 ** 53, 1234.5678, 0.02, float("nan"))


def variations(rng: random.Random, shape: str) -> object:
    if shape == "floats":  # one type per key: Arrow reads them, some values Arrow formats otherwise than repr
        out: dict = {k: rng.choice([rng.uniform(0, 2), rng.uniform(1e9, 1e12), *NUMBERS]) for k in KEYS[:2]}
        out["object.position"] = [rng.uniform(-0.2, 0.2), rng.choice([0.02, 0.0, None])]
        if rng.random() < 0.1:
            out.pop("object.mass")  # absent here, null there: the same to Arrow
        if rng.random() < 0.1:
            out["light.intensity"] = None
        return rng.choice([{}, None, out]) if rng.random() < 0.1 else out
    if shape == "mixed":  # texts, booleans, nested maps and lists
        return {"n": rng.randint(-5, 5), "s": rng.choice(["a", "é", 'x"y', "b\\s", "/", "\u2028", "tab\t"]),
                "b": rng.choice([True, False]), "nested": {"k": [rng.randint(0, 3) for _ in range(rng.randrange(3))],
                                                            "z": {"deep": rng.choice([1.5, 2e-7])}}}
    return {k: rng.choice([1, "one", [1], {"a": 1}, None, 0.5]) for k in rng.sample(KEYS, 2)}  # types vary


def record_lines(rng: random.Random, shape: str, count: int = 400) -> bytes:
    lines = []
    for e in range(count):
        rec = {"run": "r", "episode": e, "seed": rng.getrandbits(40), "status": rng.choice(["success", "failure"]),
               "success": rng.choice([True, False, None]), "episode_length": rng.randint(1, 500),
               "duration_s": rng.choice([rng.uniform(0, 9), 2]), "attempt": 1, "timestamp": 1.7e9 + e / 3,
               "protocol": "p1", "variations": variations(rng, shape)}
        if rng.random() < 0.5:
            rec["failure_code"] = rng.choice(["step_limit", None])
        rec["progress"] = rng.choice([{"overall_score": rng.random()}, {"overall_score": None}, {"all_complete": True},
                                      None]) if shape != "mixed" else rng.choice([0, 1, 0.5])
        if rng.random() < 0.1:
            rec["policy_provenance"] = {"weights_sha256": "ab" * 8, "step": e}
        lines.append(json.dumps(rec, separators=(",", ":")))
        if rng.random() < 0.02:
            lines.append(rng.choice(["", "   "]))
    return ("\n".join(lines) + rng.choice(["\n", ""])).encode()


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("shape", ["floats", "mixed", "varying"])
@pytest.mark.parametrize("seed", range(3))
def test_arrow_reads_a_records_file_as_python_does_or_declines(shape: str, seed: int, tmp_path) -> None:
    data = record_lines(random.Random(seed), shape)
    by_python = python_columns(open_location(str(tmp_path)), "r.jsonl", data)
    by_arrow = arrow_columns(data)
    if shape == "varying":  # a key holding a number here and a map there: Arrow refuses, Python reads
        assert by_arrow is None
        return
    assert by_arrow is not None, "Arrow declined a file of one type per key"
    columns, declared = by_arrow
    assert declared == by_python[1]
    for name, expected in by_python[0].items():
        got, want = columns[name].to_pylist(), expected.to_pylist()
        assert len(got) == len(want), name
        bad = [(i, a, b) for i, (a, b) in enumerate(zip(want, got)) if not same(a, b)]
        assert not bad, f"{name}: first differences (row, python, arrow): {bad[:3]}"


@pytest.mark.parametrize("data", [b'{"episode":1}\r\n', '{"episode":1,"s":"\u00e9"}\n'.encode(),
                                  b'{"episode":1.5}\n', b'{"episode":1,"episode":2}\n', b"[1]\n", b"", b" \n"])
def test_arrow_declines_what_python_might_read_otherwise(data: bytes) -> None:
    assert arrow_columns(data) is None
