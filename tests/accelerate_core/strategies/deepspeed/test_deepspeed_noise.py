"""DeepSpeed's known, harmless output shows once per run; everything else shows as before.

Before: `accelerate-core launch --cpu --num-processes 2 --backend deepspeed --zero-stage 3
--mixed-precision bf16 examples/train.py` printed 107 lines, 104 of them two torch FutureWarnings
about DeepSpeed's collectives (on every step, on every rank), 2 "op built successfully" lines.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest

from accelerate_core.strategies.deepspeed.noise import (
    KNOWN_FUTURE_WARNINGS,
    KNOWN_STDOUT_LINES,
    known_lines_once,
    show_known_warnings_once,
)
from tests.accelerate_core.commands.cli_helpers import REPO_ROOT, cli_environ, describe, run_cli
from tests.run_if import run_if

SCRIPT = REPO_ROOT / "tests" / "accelerate_core" / "scripts" / "zero3_noise.py"
WORLD = 2
STEPS = 6  # as in the script


def shown_warnings(main_process: bool, emit: list[tuple[str, type[Warning]]]) -> list[str]:
    """What reaches the display when `emit` is warned, with the filters reset before each
    warning (what DeepSpeed's per-step `numactl` subprocess does to Python's registries)."""
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, category, *args, **kwargs: shown.append(
            f"{category.__name__}: {message}")
        show_known_warnings_once(main_process)
        show_known_warnings_once(main_process)  # a second Accelerator: still one wrapper
        for text, category in emit:
            with warnings.catch_warnings():  # the registry reset
                pass
            warnings.warn(text, category, stacklevel=1)
    return shown


def test_each_known_warning_shows_once_on_the_main_process_and_not_on_the_others() -> None:
    known = [(text, FutureWarning) for text in KNOWN_FUTURE_WARNINGS] * 5
    assert shown_warnings(True, known) == [f"FutureWarning: {text}" for text in KNOWN_FUTURE_WARNINGS]
    assert shown_warnings(False, known) == []


def test_other_warnings_are_untouched_even_when_they_look_alike() -> None:
    own = [("my step warning", UserWarning), ("my own deprecated call", FutureWarning),
           (KNOWN_FUTURE_WARNINGS[0], UserWarning),  # the same text, another category
           (KNOWN_FUTURE_WARNINGS[0] + " (and more)", FutureWarning)]  # not the exact message
    expected = [f"{category.__name__}: {text}" for text, category in own]
    for main in (True, False):
        assert shown_warnings(main, own * 2) == expected * 2


def test_an_error_filter_still_raises_for_a_known_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        show_known_warnings_once(False)
        with pytest.raises(FutureWarning):
            warnings.warn(KNOWN_FUTURE_WARNINGS[1], FutureWarning, stacklevel=1)


def test_the_known_stdout_line_is_printed_by_the_main_process_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for main, expected in ((True, [KNOWN_STDOUT_LINES[0], "other line", "partial"]),
                           (False, ["other line", "partial"])):
        out = io.StringIO()
        monkeypatch.setattr("sys.stdout", out)
        with known_lines_once(main):
            print(KNOWN_STDOUT_LINES[0])
            print("other", end=" ")
            print("line")
            print("partial", end="")
        assert out.getvalue().splitlines() == expected


@pytest.mark.deepspeed
@pytest.mark.slow
@run_if(deepspeed=True)
def test_zero3_bf16_launch_shows_known_noise_once_and_the_users_own_output(tmp_path: Path) -> None:
    result = run_cli(["launch", "--cpu", "--num-processes", str(WORLD), "--backend", "deepspeed",
                      "--zero-stage", "3", "--mixed-precision", "bf16", str(SCRIPT)],
                     cli_environ(tmp_path / "cfg"), timeout=300)
    assert result.returncode == 0, describe(result)
    out = result.stdout + result.stderr
    for known in (*KNOWN_FUTURE_WARNINGS, *KNOWN_STDOUT_LINES):
        # Once per run (the main process); it was 2 per step before, one per rank.
        assert out.count(known) <= 1, f"{known!r} shown {out.count(known)} times\n{describe(result)}"
    # Nothing the script printed or warned is lost: every step of every rank, and its own
    # warnings (Python shows them at least once per rank, here on every step).
    for rank in range(WORLD):
        for step in range(STEPS):
            assert f"rank {rank} step {step} done" in result.stdout, describe(result)
    assert out.count("UserWarning: user warning from the script") >= WORLD, describe(result)
    assert out.count("FutureWarning: the script's own deprecated call") >= WORLD, describe(result)
    # What is left is short: the script's own lines and warnings, and DeepSpeed's few.
    own = STEPS * WORLD * (1 + 2 * 2)  # its print, and two warnings of two lines each
    assert len(out.splitlines()) <= own + 10, describe(result)

