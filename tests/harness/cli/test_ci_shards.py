"""`shards = N` in matrix.toml: the generated workflow runs the environment as N jobs, each
`python -m harness run --shard K/N`, and merges them (docs/shards.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli.ci import MERGE_JOB, WORKFLOW, render_workflows, workflow
from harness.errors import MatrixError
from harness.paths import MATRIX_PATH
from tests.harness.runner_helpers import write_matrix_file


def sharded_matrix(tmp_path: Path, **shards: int) -> Path:
    """The repository's matrix with `shards = N` added to the named environments."""
    text = MATRIX_PATH.read_text()
    for name, count in shards.items():
        header = f"[environments.{name}]\n"
        assert header in text, f"the test shards environment {name}; update it if the matrix renamed it"
        text = text.replace(header, f"{header}shards = {count}\n")
    path = write_matrix_file(tmp_path / "matrix.toml", text)
    return path


def step(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if s.get("name") == name)


def test_one_shard_is_the_single_job_it_always_was(tmp_path: Path) -> None:
    assert render_workflows(sharded_matrix(tmp_path, nodeepspeed=1)) == render_workflows()


def test_a_sharded_cpu_environment_runs_n_jobs_merged_by_the_merge_job(tmp_path: Path) -> None:
    jobs = workflow(sharded_matrix(tmp_path, nodeepspeed=3))["jobs"]
    assert "nodeepspeed" not in jobs
    ids = [f"nodeepspeed-shard-{k}-of-3" for k in (1, 2, 3)]
    for k, job_id in enumerate(ids, start=1):
        job = jobs[job_id]
        assert job["name"] == f"CPU, deepspeed absent (shard {k}/3)"
        run = step(job, "Matrix")["run"]
        assert run.startswith("python -m harness run --env-name nodeepspeed --report-dir reports/nodeepspeed")
        assert run.endswith(f" --shard {k}/3\n")
        assert step(job, "Upload report")["with"]["name"] == f"report-nodeepspeed-shard-{k}-of-3"
        # The unit tests once, in the first shard's job: the others would only repeat them.
        assert ("Tests" in [s.get("name") for s in job["steps"]]) == (k == 1)
    merge = jobs[MERGE_JOB]
    assert merge["needs"] == [*ids, "deepspeed", "accelerate"]
    downloads = [s["with"] for s in merge["steps"] if "download-artifact" in s.get("uses", "")]
    shards = [{"name": f"report-nodeepspeed-shard-{k}-of-3", "path": f"reports/nodeepspeed/shard-{k}"}
              for k in (1, 2, 3)]
    assert downloads == [*shards, {"name": "report-deepspeed", "path": "reports/deepspeed"},
                         {"name": "report-accelerate", "path": "reports/accelerate"}]
    assert step(merge, "Merge")["run"] == (
        "python -m harness report merge reports/nodeepspeed/shard-1 reports/nodeepspeed/shard-2 "
        "reports/nodeepspeed/shard-3 reports/deepspeed reports/accelerate --out reports/merged\n")
    # The deepspeed job compares records with every nodeepspeed shard's, downloaded into one folder.
    deepspeed = jobs["deepspeed"]
    assert deepspeed["needs"] == ids
    assert step(deepspeed, "Records of nodeepspeed")["with"] == {
        "pattern": "report-nodeepspeed-shard-*", "merge-multiple": True, "path": "reports/nodeepspeed"}
    assert "--compare-records reports/nodeepspeed" in step(deepspeed, "Matrix")["run"]


def test_a_sharded_environment_that_compares_records_does_so_in_every_shard(tmp_path: Path) -> None:
    jobs = workflow(sharded_matrix(tmp_path, deepspeed=2))["jobs"]
    for k in (1, 2):
        job = jobs[f"deepspeed-shard-{k}-of-2"]
        assert job["needs"] == ["nodeepspeed"]
        assert step(job, "Records of nodeepspeed")["with"] == {"name": "report-nodeepspeed",
                                                               "path": "reports/nodeepspeed"}
        run = step(job, "Matrix")["run"]
        # Both branches (records there or not) run the same shard.
        assert run.count(f" --shard {k}/2") == 2 and "--compare-records reports/nodeepspeed" in run
    assert jobs[MERGE_JOB]["needs"] == ["nodeepspeed", "deepspeed-shard-1-of-2", "deepspeed-shard-2-of-2",
                                         "accelerate"]


def test_a_sharded_gpu_environment_gets_a_merge_job_of_its_own(tmp_path: Path) -> None:
    jobs = workflow(sharded_matrix(tmp_path, gpu=2))["jobs"]
    ids = ["gpu-shard-1-of-2", "gpu-shard-2-of-2"]
    for job_id in ids:
        assert "self-hosted" in jobs[job_id]["runs-on"] and "pull_request" in jobs[job_id]["if"]
    merge = jobs["gpu-merge"]
    assert merge["needs"] == ids and merge["runs-on"] == ["ubuntu-latest"]
    assert "!cancelled()" in merge["if"] and "head.repo.full_name == github.repository" in merge["if"]
    assert step(merge, "Merge")["run"] == (
        "python -m harness report merge reports/gpu/shard-1 reports/gpu/shard-2 --out reports/gpu/merged\n")
    assert step(merge, "Upload merged report")["with"]["name"] == "report-gpu"
    cpu = {"nodeepspeed", "deepspeed", "accelerate"}
    assert set(jobs[MERGE_JOB]["needs"]) == cpu, "the CPU merge is unchanged"
    assert yaml.safe_load(render_workflows(sharded_matrix(tmp_path, gpu=2))[WORKFLOW])["jobs"] == jobs


@pytest.mark.parametrize("value", ["0", '"3"', "65", "true"])
def test_a_bad_shards_value_is_refused_at_load(tmp_path: Path, value: str) -> None:
    path = tmp_path / "matrix.toml"
    header = "[environments.gpu]\n"
    write_matrix_file(path, MATRIX_PATH.read_text().replace(header, f"{header}shards = {value}\n"))
    refusal = r"\[environments\.gpu\]\.shards = .*a whole number of CI jobs.*Valid: 1\.\.64"
    with pytest.raises(MatrixError, match=refusal):
        workflow(path)


def test_a_sweep_environment_cannot_be_sharded(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match=r"deepspeed_0_19\]\.shards = 2: a version-sweep environment"):
        workflow(sharded_matrix(tmp_path, deepspeed_0_19=2))
