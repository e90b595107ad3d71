"""The CI workflow is rendered from matrix/matrix.toml, and the committed file must match it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.cli.ci import (
    HEADER,
    MERGE_JOB,
    REPO_ROOT,
    TORCH,
    WORKFLOW,
    render_workflows,
    stale_workflows,
    to_yaml,
    workflow,
)
from harness.spec.matrix import load_matrix


def test_committed_workflow_matches_the_matrix() -> None:
    stale = stale_workflows()
    assert stale == [], f"{stale} differ from matrix/matrix.toml: run `python -m harness ci` and commit"


def test_rendered_yaml_parses_back_to_the_workflow_data() -> None:
    assert yaml.safe_load(render_workflows()[WORKFLOW]) == workflow()


def test_rendered_file_keeps_the_header_the_key_order_and_a_key_named_on() -> None:
    text = render_workflows()[WORKFLOW]
    assert text.startswith(HEADER)
    data = yaml.safe_load(text)
    # YAML 1.1 reads a bare `on` as True: it must come back as the string key GitHub expects.
    assert list(data) == ["name", "on", "concurrency", "permissions", "jobs"]


def test_one_job_per_environment_on_its_runner_labels() -> None:
    environments = load_matrix().environments
    jobs = workflow()["jobs"]
    assert sorted(jobs) == sorted([*(name.replace("_", "-") for name in environments), MERGE_JOB])
    for name, env in environments.items():
        job = jobs[name.replace("_", "-")]
        assert job["runs-on"] == list(env.runs_on)
        matrix_step = next(s for s in job["steps"] if s.get("name") == "Matrix")
        assert f"--env-name {name} " in matrix_step["run"]
        if env.device == "cuda":
            assert "self-hosted" in job["runs-on"], "GPU jobs run on self-hosted runners chosen by label"
            assert "pull_request" in job["if"], "self-hosted jobs must refuse forks' pull requests"


def test_every_job_installs_pinned_torch_before_the_project() -> None:
    for job in workflow()["jobs"].values():
        install = next(s for s in job["steps"] if s.get("name", "").startswith("Install"))["run"]
        torch_at = install.index(f"pip install {TORCH}")
        project_at = install.index("pip install -e")
        assert torch_at < project_at
        if job["runs-on"] == ["ubuntu-latest"]:
            assert "download.pytorch.org/whl/cpu" in install, "hosted CPU runners need the CPU wheel"


def test_extras_follow_deepspeed_flag_of_each_environment() -> None:
    environments = load_matrix().environments
    for name, env in environments.items():
        install = next(
            s for s in workflow()["jobs"][name.replace("_", "-")]["steps"] if "Install" in s.get("name", "")
        )["run"]
        extras = re.search(r'-e "\.\[([^\]]*)\]"', install)
        assert extras is not None
        assert ("deepspeed" in extras.group(1).split(",")) == env.deepspeed


def test_deepspeed_job_checks_records_of_the_nodeepspeed_job() -> None:
    job = workflow()["jobs"]["deepspeed"]
    assert job["needs"] == ["nodeepspeed"]
    run = next(s for s in job["steps"] if s.get("name") == "Matrix")["run"]
    assert "--compare-records reports/nodeepspeed" in run
    upload = next(s for s in workflow()["jobs"]["nodeepspeed"]["steps"] if s.get("name") == "Upload report")
    assert upload["with"]["name"] == "report-nodeepspeed"


def test_a_matrix_change_makes_the_check_fail(tmp_path: Path) -> None:
    text = (REPO_ROOT / "matrix" / "matrix.toml").read_text()
    changed = text.replace('"self-hosted", "linux", "gpu"]', '"self-hosted", "linux", "a100"]')
    assert changed != text, "the test edits the gpu runner labels; update it if the matrix moved them"
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(changed)
    assert stale_workflows(matrix_path=matrix) == [WORKFLOW]
    jobs = yaml.safe_load(render_workflows(matrix)[WORKFLOW])["jobs"]
    assert any("a100" in job["runs-on"] for job in jobs.values())


@pytest.mark.parametrize(
    "value",
    [
        {"on": {"push": {}}, "yes": "no", "y": [], "x": "3.11"},
        {"s": "a: b # c", "q": 'say "hi"', "star": "*", "tilde": "~", "empty": ""},
        {"run": "line one\n\nline 'three' after a blank\n", "n": 60, "b": False},
        {"run": "no final newline\nsecond", "other": "x"},
        {"steps": [{"uses": "a@v1", "with": {"k": "v"}}, {"name": "x", "run": "echo $X\n"}]},
        {"nested": [["a", "b"], {"k": [1, 2]}]},
    ],
)
def test_to_yaml_round_trips_through_a_yaml_parser(value: dict[str, object]) -> None:
    assert yaml.safe_load(to_yaml(value)) == value


def test_a_final_job_merges_the_reports_of_every_cpu_environment() -> None:
    environments = load_matrix().environments
    jobs = workflow()["jobs"]
    assert list(jobs)[-1] == MERGE_JOB, "the merge job comes last"
    job = jobs[MERGE_JOB]
    cpu = [name for name, env in environments.items() if env.device == "cpu"]
    assert sorted(job["needs"]) == sorted(name.replace("_", "-") for name in cpu)
    assert set(job["needs"]) == {"nodeepspeed", "deepspeed"}
    assert job["if"] == "${{ !cancelled() }}", "a failing environment job must not hide the merged report"
    downloads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact")]
    assert {(s["with"]["name"], s["with"]["path"]) for s in downloads} == {
        (f"report-{name}", f"reports/{name}") for name in cpu
    }
    # Each downloaded artifact is what the environment's own job uploads.
    for name in cpu:
        upload = next(s for s in jobs[name.replace("_", "-")]["steps"] if s.get("name") == "Upload report")
        assert (upload["with"]["name"], upload["with"]["path"]) == (f"report-{name}", f"reports/{name}")
    merge = next(s for s in job["steps"] if s.get("name") == "Merge")["run"]
    assert merge.startswith("python -m harness report merge reports/nodeepspeed reports/deepspeed ")
    assert "--out reports/merged" in merge
    names = [s.get("name", s.get("uses")) for s in job["steps"]]
    assert names.index("Merge") > max(names.index(f"Report of {name}") for name in cpu)
    upload = next(s for s in job["steps"] if s.get("name") == "Upload merged report")
    assert upload["if"] == "always()" and upload["with"]["name"] == "report-merged"
    assert upload["with"]["path"] == "reports/merged"
