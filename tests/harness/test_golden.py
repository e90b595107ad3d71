"""Goldens: checked in, verified on load, reproducible bit for bit, and loud when broken."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.golden import GOLDEN_DIR, GoldenError, check_goldens, load_golden, update_goldens
from harness.reference import PRECISIONS
from harness.tasks import get_task, task_names

OWN_GOLDENS = ("regression", "classifier", "lm", "scalar", "root_param")


@pytest.fixture
def golden_copy(tmp_path: Path) -> Path:
    for name in ("classifier-fp32", "classifier-fp16"):
        for suffix in (".json", ".safetensors"):
            shutil.copy(GOLDEN_DIR / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", OWN_GOLDENS)
def test_every_golden_loads_and_carries_its_metadata(name: str, precision: str) -> None:
    golden = load_golden(name, precision)
    meta = golden.meta["golden"]
    task = get_task(name)
    assert meta["task_definition_hash"] == task.definition_hash()
    assert meta["data_sha256"] == task.data_sha256() and meta["seed"] == task.seed
    assert golden.fingerprint.strategy == "reference" and golden.fingerprint.world_size == 1
    assert {"python", "torch"} <= set(golden.fingerprint.versions)


def test_regenerating_reproduces_the_checked_in_files_bit_for_bit() -> None:
    assert check_goldens() == []


def test_canaries_borrow_a_golden_instead_of_owning_one() -> None:
    files = {p.name.split("-")[0] for p in GOLDEN_DIR.glob("*.json")}
    assert files == set(OWN_GOLDENS)
    assert all(n in files or getattr(get_task(n), "golden_of", None) in files for n in task_names())


def test_missing_golden(tmp_path: Path) -> None:
    with pytest.raises(GoldenError, match=r"no golden for task 'lm' at bf16.*golden --update"):
        load_golden("lm", "bf16", golden_dir=tmp_path)


def test_unknown_task_or_precision(golden_copy: Path) -> None:
    with pytest.raises(GoldenError, match="no such task"):
        load_golden("nope", "fp32", golden_dir=golden_copy)
    with pytest.raises(GoldenError, match="fp8"):
        load_golden("classifier", "fp8", golden_dir=golden_copy)


def test_truncated_golden_is_an_error_not_a_comparison(golden_copy: Path) -> None:
    tensors = golden_copy / "classifier-fp32.safetensors"
    tensors.write_bytes(tensors.read_bytes()[: len(tensors.read_bytes()) // 2])
    with pytest.raises(GoldenError, match=r"classifier-fp32 is unusable.*sha256.*truncated"):
        load_golden("classifier", "fp32", golden_dir=golden_copy)


def test_tampered_tensor_fails_the_hash(golden_copy: Path) -> None:
    tensors = golden_copy / "classifier-fp32.safetensors"
    data = bytearray(tensors.read_bytes())
    data[-3] ^= 0x01  # one bit of the last tensor's data
    tensors.write_bytes(bytes(data))
    with pytest.raises(GoldenError, match="sha256"):
        load_golden("classifier", "fp32", golden_dir=golden_copy)


def test_golden_of_another_task_definition(golden_copy: Path) -> None:
    path = golden_copy / "classifier-fp16.json"
    body = json.loads(path.read_text())
    body["meta"]["golden"]["task_definition_hash"] = "0" * 64
    path.write_text(json.dumps(body))
    with pytest.raises(GoldenError, match=r"another task definition.*golden --update"):
        load_golden("classifier", "fp16", golden_dir=golden_copy)


def test_update_writes_new_goldens_then_reports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = update_goldens(tasks=["regression"], precisions=["fp32", "fp16"], golden_dir=tmp_path)
    assert changed == [f"regression-{p}: new (no golden file yet)" for p in ("fp32", "fp16")]
    assert "regression-fp16: new" in capsys.readouterr().out
    name = "regression-fp32.safetensors"
    assert (tmp_path / name).read_bytes() == (GOLDEN_DIR / name).read_bytes()
    assert update_goldens(tasks=["regression"], precisions=["fp32", "fp16"], golden_dir=tmp_path) == []


def test_check_names_what_changed(golden_copy: Path) -> None:
    from harness.record import Record

    stem = golden_copy / "classifier-fp32"
    record = Record.load(stem)
    record.state_dict["body.weight"][1, 2] += 0.5
    record.losses[3] += 0.25
    record.save(stem)  # consistent files (hash matches), different numbers
    lines = check_goldens(tasks=["classifier"], precisions=["fp32"], golden_dir=golden_copy)
    assert "classifier-fp32: state_dict/body.weight changed (max |diff| 0.5)" in lines
    assert "classifier-fp32: losses changed (max |diff| 0.25)" in lines
    assert len(lines) == 2
