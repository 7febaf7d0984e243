"""Backend settings that end up in a script line or a workflow (#52, polish): a value with a trailing line break
once passed the `^...$` checks (`re.match`'s `$` matches before a final newline) and reached an `#SBATCH` line;
each is refused now, naming its key; and a wait has an upper bound."""

from __future__ import annotations

import pytest

from evalfleet.backend_registry import backend_settings
from evalfleet.errors import UserError
from evalfleet.plugins import load_registries

load_registries()

GOOD = {
    "slurm": {"partition": "gpu", "account": "lab", "qos": "normal", "mem": "16G", "gres": "gpu:1",
              "constraint": "a100", "job_name": "eval", "time": "4:00:00"},
    "osmo": {"pool": "my-pool", "platform": "dgx", "credential": "creds", "memory": "64Gi", "storage": "10Gi",
             "workflow_name": "eval", "image": "nvcr.io/team/arena:1.0", "exec_timeout": "12h"},
}


@pytest.mark.parametrize(("root", "key"), [(root, key) for root, keys in GOOD.items() for key in keys])
def test_a_trailing_line_break_is_refused_where_the_value_alone_is_taken(root: str, key: str) -> None:
    backend_settings(root, {root: {key: GOOD[root][key]}})  # the value itself is fine
    for bad in (GOOD[root][key] + "\n", GOOD[root][key] + "\n--exclusive"):
        with pytest.raises(UserError) as refused:
            backend_settings(root, {root: {key: bad}})
        assert refused.value.key == f"{root}.{key}"


def test_a_server_wait_is_at_most_a_week() -> None:
    assert backend_settings("slurm", {"slurm": {"server_wait_s": 7 * 86400}}).server_wait_s == 7 * 86400
    with pytest.raises(UserError) as refused:
        backend_settings("slurm", {"slurm": {"server_wait_s": 1e18}})
    assert refused.value.key == "slurm.server_wait_s"
