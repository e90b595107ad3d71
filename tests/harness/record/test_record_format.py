"""Records: a save/load round trip, and clear errors for every way the files can be broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.record.record_format import Fingerprint, Record, RecordError


def _record() -> Record:
    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    return Record(
        task="lm", precision="fp16", losses=[1.5, 1.25, 1.0], lrs=[[0.1, 0.2], [0.1, 0.2]],
        skipped_steps=[1], loss_scales=[65536.0, 32768.0],
        eval_outputs={"logits": torch.randn(5, 3).half(), "labels": torch.arange(5)},
        # Tied weights share storage, which safetensors alone would refuse to write.
        state_dict={"embed.weight": weight, "head.weight": weight,
                    "scale": torch.tensor(2.0, dtype=torch.bfloat16)},
        fingerprint=Fingerprint.here(device="cpu", world_size=2, seed=3, precision="fp16",
                                     strategy="zero2", emulated=True),
        meta={"note": "test"},
    )


def test_round_trip_is_exact(tmp_path: Path) -> None:
    original = _record()
    original.save(tmp_path / "cell")
    loaded = Record.load(tmp_path / "cell")
    assert loaded.losses == original.losses and loaded.lrs == original.lrs
    assert loaded.skipped_steps == [1] and loaded.loss_scales == [65536.0, 32768.0]
    assert loaded.fingerprint == original.fingerprint and loaded.meta == {"note": "test"}
    for name in ("eval_outputs", "state_dict"):
        mine, theirs = getattr(loaded, name), getattr(original, name)
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert mine[key].dtype == theirs[key].dtype and torch.equal(mine[key], theirs[key])
    # No temp files left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.json", "cell.safetensors"]


def test_fingerprint_names_versions(tmp_path: Path) -> None:
    record = _record()
    assert {"python", "torch", "deepspeed"} <= set(record.fingerprint.versions)
    golden_like = Fingerprint.here(device="cpu", world_size=1, seed=1, precision="fp32", strategy="reference")
    assert "deepspeed" not in golden_like.versions  # goldens must not depend on it


def test_missing_json_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match=r"does not exist.*Fix:"):
        Record.load(tmp_path / "nothing")


def test_truncated_tensors_file_is_caught_by_its_hash(tmp_path: Path) -> None:
    _record().save(tmp_path / "cell")
    tensors = tmp_path / "cell.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-10])
    with pytest.raises(RecordError, match=r"sha256 differs.*truncated"):
        Record.load(tmp_path / "cell")


def test_tensors_replaced_after_the_json_are_caught(tmp_path: Path) -> None:
    _record().save(tmp_path / "a")
    other = _record()
    other.losses = [9.0, 9.0, 9.0]
    other.save(tmp_path / "b")
    (tmp_path / "a.safetensors").write_bytes((tmp_path / "b.safetensors").read_bytes())
    with pytest.raises(RecordError, match="sha256"):
        Record.load(tmp_path / "a")


def test_missing_tensors_file(tmp_path: Path) -> None:
    _record().save(tmp_path / "cell")
    (tmp_path / "cell.safetensors").unlink()
    with pytest.raises(RecordError, match="does not exist"):
        Record.load(tmp_path / "cell")


def test_garbled_json(tmp_path: Path) -> None:
    _record().save(tmp_path / "cell")
    (tmp_path / "cell.json").write_text("{not json")
    with pytest.raises(RecordError, match="not a record's JSON"):
        Record.load(tmp_path / "cell")
    (tmp_path / "cell.json").write_text(json.dumps({"tensors_sha256": "x", "format_version": 99}))
    with pytest.raises(RecordError, match="format_version"):
        Record.load(tmp_path / "cell")


def _edit_json(stem: Path, change: dict, rehash: bool) -> None:
    """Change fields of a saved record's JSON; `rehash`: recompute json_sha256 as a tool that
    knows the format would (then only the types stand between the edit and a silent read)."""
    from harness.record.record_format import json_sha256

    path = stem.with_name(stem.name + ".json")
    body = {**json.loads(path.read_text()), **change}
    if rehash:
        body["json_sha256"] = json_sha256(body)
    path.write_text(json.dumps(body, indent=2, sort_keys=True))


@pytest.mark.parametrize("change", [{"skipped_steps": [0, 1, 2]}, {"precision": "fp32"},
                                    {"meta": {"note": "edited"}}])
def test_an_edited_json_field_is_refused(tmp_path: Path, change: dict) -> None:
    _record().save(tmp_path / "cell")
    _edit_json(tmp_path / "cell", change, rehash=False)
    with pytest.raises(RecordError, match="edited after it was written"):
        Record.load(tmp_path / "cell")


def test_reindenting_the_json_changes_nothing(tmp_path: Path) -> None:
    _record().save(tmp_path / "cell")
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(json.loads(path.read_text())))
    assert Record.load(tmp_path / "cell").skipped_steps == [1]


@pytest.mark.parametrize(("field", "value", "named"), [
    ("skipped_steps", "abc", "skipped_steps: expected list, found 'abc'"),
    ("skipped_steps", [1, True], "skipped_steps[1]: expected int, found True"),
    ("fingerprint.world_size", "2", "fingerprint.world_size: expected int, found '2'"),
])
def test_a_mistyped_field_is_refused_even_with_a_matching_hash(tmp_path: Path, field: str, value: object,
                                                               named: str) -> None:
    record = _record()
    record.save(tmp_path / "cell")
    if field.startswith("fingerprint."):
        from dataclasses import asdict

        change = {"fingerprint": {**asdict(record.fingerprint), field.split(".")[1]: value}}
    else:
        change = {field: value}
    _edit_json(tmp_path / "cell", change, rehash=True)
    with pytest.raises(RecordError, match="mistypes") as info:
        Record.load(tmp_path / "cell")
    assert named in str(info.value)


def test_a_version_1_record_is_refused_with_the_fix(tmp_path: Path) -> None:
    _record().save(tmp_path / "cell")
    _edit_json(tmp_path / "cell", {"format_version": 1}, rehash=True)
    with pytest.raises(RecordError, match="format_version 1 is not this harness's") as info:
        Record.load(tmp_path / "cell", fix="regenerate it")
    assert "regenerate it" in str(info.value)
