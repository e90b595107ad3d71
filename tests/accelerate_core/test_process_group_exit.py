"""The default process group is destroyed before interpreter exit, whoever created it.

Left to interpreter finalization, gloo's worker threads abort a rank now and then ("terminate
called without an active exception"; see accelerate_core.state.shutdown_process_group). That is
a race, so no test can show its absence; this shows the mechanism that removes it is in place.

The script-creates-group case has a launch of its own. The core-creates-group case is the first
run of the session's shared 2-rank launch (shared_launch.py): the core creates the group there,
and the script's exit hook reports on it when that launch's processes exit, after every other
module's runs; if that launch fails, the case fails with its output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.accelerate_core.conftest import SCRIPTS
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.distributed_helpers import run_distributed

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

# First of all (order -3): its hook must be registered before the group exists, as in the script
# alone, so that it runs after the core's own exit hook.
SHARED_LAUNCH = LaunchPart(
    scenarios=lambda out, fixtures: [Scenario("group at exit", "tests.accelerate_core.scripts.group_at_exit",
                                    ("--out", str(out)))],
    timeout=120, order=-3)


@pytest.mark.parametrize("own_group", [False, True], ids=["core-creates-group", "script-creates-group"])
def test_group_is_gone_when_the_scripts_exit_hooks_run(request: pytest.FixtureRequest, tmp_path: Path,
                                                       own_group: bool) -> None:
    if own_group:
        out = tmp_path
        run_distributed(SCRIPTS / "group_at_exit.py", 2, ["--out", str(out), "--own-group"], timeout=120)
    else:
        out = request.getfixturevalue("shared_launch_out")
    assert [(out / f"rank{r}").read_text() for r in range(2)] == ["destroyed", "destroyed"]
