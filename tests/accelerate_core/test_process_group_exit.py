"""The default process group is destroyed before interpreter exit, whoever created it.

Left to interpreter finalization, gloo's worker threads abort a rank now and then ("terminate
called without an active exception"; see accelerate_core.state.shutdown_process_group). That is
a race, so no test can show its absence; this shows the mechanism that removes it is in place.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.accelerate_core.conftest import SCRIPTS
from tests.distributed_helpers import run_distributed

pytestmark = [pytest.mark.ddp, pytest.mark.slow]


@pytest.mark.parametrize("own_group", [False, True], ids=["core-creates-group", "script-creates-group"])
def test_group_is_gone_when_the_scripts_exit_hooks_run(tmp_path: Path, own_group: bool) -> None:
    run_distributed(SCRIPTS / "group_at_exit.py", 2,
                    ["--out", str(tmp_path), *(["--own-group"] if own_group else [])], timeout=120)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["destroyed", "destroyed"]
