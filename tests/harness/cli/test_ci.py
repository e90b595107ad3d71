"""The CI workflow is rendered from matrix/matrix.toml, and the committed file must match it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.cli.ci import (
    CALIBRATE_JOB,
    HEADER,
    MERGE_JOB,
    REPO_ROOT,
    SENSITIVITY_JOB,
    SWEEP_CRON,
    SWEEP_DIR,
    SWEEP_MERGE_JOB,
    SWEEP_ONLY,
    TORCH,
    WORKFLOW,
    render_workflows,
    stale_workflows,
    to_yaml,
    workflow,
)
from harness.plan.matrix import load_matrix
from tests.harness.runner_helpers import write_matrix_file


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


def _regular() -> dict:  # type: ignore[type-arg]
    return {name: env for name, env in load_matrix().environments.items() if not env.sweep}


def _sweep() -> dict:  # type: ignore[type-arg]
    return {name: env for name, env in load_matrix().environments.items() if env.sweep}


def test_one_job_per_environment_on_its_runner_labels() -> None:
    environments = load_matrix().environments
    jobs = workflow()["jobs"]
    expected = [*(name.replace("_", "-") for name in environments), MERGE_JOB, SENSITIVITY_JOB, CALIBRATE_JOB]
    assert sorted(jobs) == sorted(expected + ([SWEEP_MERGE_JOB] if _sweep() else []))
    for name, env in _regular().items():
        job = jobs[name.replace("_", "-")]
        assert job["runs-on"] == list(env.runs_on)
        matrix_step = next(s for s in job["steps"] if s.get("name") == "Matrix")
        assert f"--env-name {name} " in matrix_step["run"]
        if env.device == "cuda":
            assert "self-hosted" in job["runs-on"], "GPU jobs run on self-hosted runners chosen by label"
            assert "pull_request" in job["if"], "self-hosted jobs must refuse forks' pull requests"


def test_every_job_installs_pinned_torch_before_the_project() -> None:
    # nox installs theirs (pinned): the sweep's jobs, the catalog's and calibrate's
    sweep_jobs = {name.replace("_", "-") for name in _sweep()} | {SENSITIVITY_JOB, CALIBRATE_JOB}
    for job_name, job in workflow()["jobs"].items():
        if job_name in sweep_jobs:
            continue
        install = next(s for s in job["steps"] if s.get("name", "").startswith("Install"))["run"]
        torch_at = install.index(f"pip install {TORCH}")
        project_at = install.index("pip install -e")
        assert torch_at < project_at
        if job["runs-on"] == ["ubuntu-latest"]:
            assert "download.pytorch.org/whl/cpu" in install, "hosted CPU runners need the CPU wheel"


def test_extras_follow_deepspeed_flag_of_each_environment() -> None:
    for name, env in _regular().items():
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
    write_matrix_file(matrix, changed)
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
    order = list(jobs)
    assert order.index(MERGE_JOB) > max(order.index(n.replace("_", "-")) for n in _regular())
    job = jobs[MERGE_JOB]
    cpu = [name for name, env in environments.items() if env.device == "cpu" and not env.sweep]
    assert sorted(job["needs"]) == sorted(name.replace("_", "-") for name in cpu)
    assert set(job["needs"]) == {"nodeepspeed", "deepspeed", "accelerate"}
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


def test_the_version_sweep_runs_on_a_schedule_and_never_on_push_or_pull_request() -> None:
    """The default CI keeps its time budget: sweep jobs run only when scheduled or started by hand,
    each its environment's `nox -s versions(NAME)`, after the environment it compares with."""
    sweep = _sweep()
    assert sweep, "matrix.toml declares the version sweep's environments"
    data = workflow()
    assert data["on"]["schedule"] == [{"cron": SWEEP_CRON}]
    jobs = data["jobs"]
    for name, env in sweep.items():
        job = jobs[name.replace("_", "-")]
        assert SWEEP_ONLY in job["if"]
        step = next(s for s in job["steps"] if s.get("name") == "Sweep")
        assert step["run"] == f'nox -s "versions({name})"\n'
        assert "download.pytorch.org/whl/cpu" in step["env"]["PIP_INDEX_URL"]
        if env.compare_with:
            assert job["needs"] == [env.compare_with.replace("_", "-")]
            download = next(s for s in job["steps"] if s.get("name") == f"Records of {env.compare_with}")
            assert download["with"]["path"] == f"{SWEEP_DIR}/{env.compare_with}"
    regular = {name.replace("_", "-") for name in _regular()}
    for job_name in regular:
        assert "Sweep" not in [s.get("name") for s in jobs[job_name]["steps"]]
    merge = jobs[SWEEP_MERGE_JOB]
    assert sorted(merge["needs"]) == sorted(name.replace("_", "-") for name in sweep)
    assert SWEEP_ONLY in merge["if"]
    run = next(s for s in merge["steps"] if s.get("name") == "Merge")["run"]
    assert all(f"{SWEEP_DIR}/{name}" in run for name in sweep)


def test_the_whole_catalog_runs_as_a_kill_matrix_on_the_schedule_and_keeps_its_report() -> None:
    """Every catalog entry on every cell it touches (the control on all of them first) once a
    week and by hand, never on a push: the tests run the fast subset there."""
    job = workflow()["jobs"][SENSITIVITY_JOB]
    assert job["if"] == "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
    run = next(s for s in job["steps"] if s.get("name") == "Catalog")["run"]
    assert run.startswith("nox -s sensitivity -- --kill-matrix --keep-reports reports/sensitivity")
    assert "--only" not in run and "--fast" not in run
    upload = next(s for s in job["steps"] if s.get("name") == "Upload catalog report")
    assert upload["if"] == "always()" and upload["with"]["name"] == "report-sensitivity"
    assert "reports/sensitivity.json" in upload["with"]["path"]
    assert workflow()["on"]["schedule"] == [{"cron": SWEEP_CRON}]


def test_calibrate_runs_on_every_push_against_the_runners_own_noise_and_keeps_its_figures() -> None:
    """The tolerances in force against the benign noise measured on the runner's CPU: a runner
    whose kernels round differently from the machines they were measured on fails by name."""
    job = workflow()["jobs"][CALIBRATE_JOB]
    assert "if" not in job, "every push and pull request, not only on the schedule"
    step = next(s for s in job["steps"] if s.get("name") == "Calibrate")
    assert step["run"] == "nox -s calibrate\n" and step["env"]["PIP_INDEX_URL"].endswith("/cpu")
    upload = next(s for s in job["steps"] if s.get("name") == "Upload calibration figures")
    assert upload["if"] == "always()" and upload["with"]["name"] == "report-calibration"
    assert upload["with"]["path"] == "reports/calibration.json\n"


def test_sweep_environments_pin_exact_releases_and_compare_with_a_sweep_environment() -> None:
    sweep = _sweep()
    for name, env in sweep.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", env.torch_version), name
        assert re.fullmatch(r"\d+\.\d+\.\d+", env.deepspeed_version), name
        assert "deepspeed" not in env.extras, f"{name}: the pin replaces the declared range"
        assert not env.compare_with or env.compare_with in sweep, name


def test_a_pin_that_is_not_one_release_is_refused_at_load(tmp_path: Path) -> None:
    text = (REPO_ROOT / "matrix" / "matrix.toml").read_text()
    changed = text.replace('deepspeed_version = "0.16.9"', 'deepspeed_version = ">=0.16"')
    assert changed != text
    matrix = tmp_path / "matrix.toml"
    write_matrix_file(matrix, changed)
    from harness.errors import MatrixError

    with pytest.raises(MatrixError, match=r"deepspeed_0_16\]\.deepspeed_version.*one exact release"):
        load_matrix(matrix)
