"""CI workflows rendered from matrix/matrix.toml: one GitHub Actions job per environment.

`python -m harness ci` writes them; `python -m harness ci --check` (and tests/harness/cli/test_ci.py)
fail when the committed files and the matrix disagree, so the matrix stays the one source.

Each `[environments.NAME]` of the matrix becomes a job: CPU jobs on hosted runners (deepspeed
installed / absent), GPU jobs on self-hosted runners chosen by the labels in `runs_on`. The
deepspeed CPU job waits for the nodeepspeed one and compares its non-DeepSpeed records with
that job's (`--compare-records`): the cross-environment check. A final job, `merge`, waits for
every CPU job, downloads their reports and writes one merged report with
`python -m harness report merge` (one grid, the cross-environment comparison, one verdict).

Over 300 lines because a workflow is one document whose jobs refer to each other (needs,
artifacts, the merge's inputs): rendered in one module, those references cannot drift apart.

An environment with `shards = N` runs as N jobs, each `--shard K/N`, merged by the merge job (a
GPU one by a merge job of its own): harness/cli/ci_shards.py, docs/shards.md.

The dependency-version sweep (environments with `sweep = true`, docs/versions.md) is not part of
a push or pull request: its jobs run on a schedule (SWEEP_CRON) and by hand (workflow_dispatch),
each `nox -s "versions(NAME)"` in its own runner, those with `compare_with` after that
environment's job (its records are the baseline); a last job merges their reports (the version
table, the behaviour x version table, the record changes).

The whole bug catalog (`nox -s sensitivity -- --kill-matrix`, docs/sensitivity.md) runs on the same
schedule, in a job of its own: the control on every cell an entry touches, then each entry on all
of them, reported as a kill matrix (caught in N of M affected cells, each miss with its closest
comparison). That is 30-40 minutes of launches on 2 cores, too long for every push, where the
tests run the fast subset; its JSON and every entry's report are kept as the artifact
`report-sensitivity`.

`nox -s calibrate` runs on every push, in a job of its own (reference only, a minute or two of
training): it measures the benign noise behind each tolerance on the runner's own CPU and fails
where a tolerance in force is below it, so a runner whose kernels round differently from the
machines the tolerances were measured on says so by name (docs/calibration.md); its figures are
kept as the artifact `report-calibration`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.cli.ci_shards import (
    environment_merge_job,
    job_ids,
    merge_steps,
    records_download,
    report_artifact,
    shard_job_id,
)
from harness.layout.report_dir import ReportDir
from harness.paths import REPO_ROOT
from harness.plan.matrix import Environment, load_matrix

WORKFLOW = ".github/workflows/matrix.yml"
TORCH = "torch==2.13.0"  # pinned, installed first: the project's range would pull a newer build
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # the CPU wheel; the default one is a CUDA build
HEADER = (
    "# GENERATED from matrix/matrix.toml by `python -m harness ci`: do not edit by hand.\n"
    "# `python -m harness ci --check` (and tests/harness/cli/test_ci.py) fail when this file and the\n"
    "# matrix disagree.\n"
)
# The nodeepspeed job's records feed the deepspeed job's cross-environment check.
CROSS_CHECK = {"deepspeed": "nodeepspeed"}
MERGE_JOB = "merge"  # the final job: one report of every CPU environment
MERGED_DIR = "reports/merged"
SWEEP_CRON = "17 3 * * 1"  # the version sweep: Mondays 03:17 UTC (and workflow_dispatch)
SWEEP_MERGE_JOB = "versions-merge"
SENSITIVITY_JOB = "sensitivity"  # the whole catalog, scheduled
SENSITIVITY_REPORTS = "reports/sensitivity"  # every trial's report; noxfile writes reports/sensitivity.json
CALIBRATE_JOB = "calibrate"  # the tolerances against the runner's own noise, every push
SWEEP_DIR = "reports/versions"  # noxfile.py's `versions` session writes reports/versions/<env>
SWEEP_ONLY = "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
NOT_FROM_FORKS = ("github.event_name != 'pull_request' || "
                  "github.event.pull_request.head.repo.full_name == github.repository")
# The CPU wheel for every pip install of the sweep (nox installs torch itself, pinned).
SWEEP_PIP_ENV = {"PIP_INDEX_URL": CPU_INDEX, "PIP_EXTRA_INDEX_URL": "https://pypi.org/simple"}


def job_id(env: Environment) -> str:
    return env.name.replace("_", "-")


def _markexpr(env: Environment) -> str:
    """The -m selection of a job: the environment's own, or every cell of its device."""
    if env.markexpr:
        return env.markexpr
    # Every CUDA cell carries `gpu` or `multi_gpu` (Cell.markers), so this is "the CPU cells".
    return "not gpu and not multi_gpu" if env.device == "cpu" else "gpu or multi_gpu"


def _install(env: Environment) -> str:
    torch = f"python -m pip install {TORCH}" + (f" --index-url {CPU_INDEX}" if env.device == "cpu" else "")
    extras = ",".join(env.extras)
    project = f'python -m pip install -e ".[{extras}]"' if extras else "python -m pip install -e ."
    return "\n".join(["python -m pip install --upgrade pip", torch, project, "python -m pip list"]) + "\n"


VENV = 'python3 -m venv .venv\necho "$PWD/.venv/bin" >> "$GITHUB_PATH"\n'


def _setup_steps() -> list[dict[str, Any]]:
    return [
        {"uses": "actions/checkout@v4"},
        {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
        {"name": "Virtual environment", "run": VENV},
    ]


def _merge_setup() -> list[dict[str, Any]]:
    """A merge job's checkout and install: it reads records through safetensors (the test
    extra); deepspeed is never needed."""
    installer = Environment(name=MERGE_JOB, description="", deepspeed=False, device="cpu", extras=("test",))
    return [*_setup_steps(), {"name": "Install (torch first, pinned)", "run": _install(installer)}]


def _merge_job(environments: dict[str, Environment]) -> dict[str, Any] | None:
    """The final job: the CPU jobs' report artifacts merged into one report (`report-merged`).
    Environments without deepspeed come first: their records are the baseline of the comparison."""
    cpu = sorted((env for env in environments.values() if env.device == "cpu" and not env.sweep),
                 key=lambda env: env.deepspeed)
    if not cpu:
        return None
    steps = _merge_setup()
    # A sharded environment's report dirs, one per shard, are joined by the merge itself.
    steps += merge_steps(cpu, MERGED_DIR)
    steps.append(
        {
            "name": "Upload merged report",
            "if": "always()",
            "uses": "actions/upload-artifact@v4",
            "with": {"name": "report-merged", "path": MERGED_DIR, "if-no-files-found": "warn"},
        }
    )
    return {
        "name": "Merged report (" + ", ".join(env.name for env in cpu) + ")",
        "runs-on": ["ubuntu-latest"],
        "needs": [job for env in cpu for job in job_ids(env, job_id(env))],
        # Runs also when a CPU job failed: the merged report is where that failure is read.
        "if": "${{ !cancelled() }}",
        "timeout-minutes": 20,
        "steps": steps,
    }


def _job(env: Environment, environments: dict[str, Environment], shard: int = 0) -> dict[str, Any]:
    """The environment's job; with `shard` K, its K-th of `env.shards` jobs (`--shard K/N`)."""
    report_dir = f"reports/{env.name}"
    markexpr = _markexpr(env)
    hosted = list(env.runs_on) == ["ubuntu-latest"] or "self-hosted" not in env.runs_on
    steps: list[dict[str, Any]] = [{"uses": "actions/checkout@v4"}]
    if hosted:
        steps.append({"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}})
    steps.append(
        {
            "name": "Virtual environment",
            "run": 'python3 -m venv .venv\necho "$PWD/.venv/bin" >> "$GITHUB_PATH"\n',
        }
    )
    steps.append({"name": "Install (torch first, pinned)", "run": _install(env)})
    # The unit tests first (CUDA tests skip themselves without a device); the matrix runs even
    # when they fail, so one job shows both answers. Of a sharded environment, its first shard's
    # job runs them: the others would only repeat them.
    if shard <= 1:
        steps.append({"name": "Tests", "run": 'python -m pytest tests -m "not matrix" -ra\n'})
    run = f'python -m harness run --env-name {env.name} --report-dir {report_dir} -m "{markexpr}"'
    if env.implementation != "core":
        run += f" --implementation {env.implementation}"
    name = env.description or env.name
    if shard:
        run += f" --shard {shard}/{env.shards}"
        name += f" (shard {shard}/{env.shards})"
    job: dict[str, Any] = {"name": name, "runs-on": list(env.runs_on)}
    other = CROSS_CHECK.get(env.name)
    if other in environments:
        # Runs also when the other job failed: a regression there must not hide this report.
        job["needs"] = job_ids(environments[other], job_id(environments[other]))
        job["if"] = "${{ !cancelled() }}"
        steps.append(records_download(environments[other]))
        run = (
            f"if [ -f reports/{other}/{ReportDir.REPORT_JSON} ]; then\n"
            f"  {run} --compare-records reports/{other}\n"
            f"else\n"
            f'  echo "::warning::no records of {other}: cross-environment check not run"\n'
            f"  {run}\n"
            f"fi"
        )
    if not hosted:
        # Self-hosted runners must not run code from forks' pull requests.
        job["if"] = NOT_FROM_FORKS
    steps.append({"name": "Matrix", "if": "${{ !cancelled() }}", "run": run + "\n"})
    steps.append(
        {
            "name": "Step summary",
            "if": "always()",
            "run": f'cat {report_dir}/{ReportDir.REPORT_MD} >> "$GITHUB_STEP_SUMMARY" || true\n',
        }
    )
    steps.append(
        {
            "name": "Upload report",
            "if": "always()",
            "uses": "actions/upload-artifact@v4",
            "with": {"name": report_artifact(env, shard), "path": report_dir, "if-no-files-found": "warn"},
        }
    )
    job["timeout-minutes"] = 60
    job["steps"] = steps
    return job


def _jobs(env: Environment, environments: dict[str, Environment]) -> dict[str, dict[str, Any]]:
    """Job id -> job of one environment: its job, or its shards' jobs (and, outside the final CPU
    merge, the job that merges them)."""
    if env.shards == 1:
        return {job_id(env): _job(env, environments)}
    jobs = {shard_job_id(job_id(env), k, env.shards): _job(env, environments, k)
            for k in range(1, env.shards + 1)}
    if env.device != "cpu":
        hosted = "self-hosted" not in env.runs_on
        condition = "${{ !cancelled() }}" if hosted else "${{ !cancelled() && (" + NOT_FROM_FORKS + ") }}"
        jobs[f"{job_id(env)}-merge"] = environment_merge_job(env, job_id(env), _merge_setup(), condition)
    return jobs


def _sweep_job(env: Environment, environments: dict[str, Environment]) -> dict[str, Any]:
    """One environment of the version sweep: its nox session (pins, op build, probe, cells)."""
    report_dir = f"{SWEEP_DIR}/{env.name}"
    steps = _setup_steps()
    steps.append({"name": "Install nox", "run": "python -m pip install nox\n"})
    job: dict[str, Any] = {"name": f"versions: {env.description or env.name}", "runs-on": list(env.runs_on),
                           "if": SWEEP_ONLY}
    baseline = environments.get(env.compare_with)
    if baseline is not None:
        # After the baseline's job: its records are what this environment's numbers are compared with.
        job["needs"] = [job_id(baseline)]
        job["if"] = "${{ !cancelled() && (" + SWEEP_ONLY + ") }}"
        steps.append({"name": f"Records of {baseline.name}", "uses": "actions/download-artifact@v4",
                      "continue-on-error": True,
                      "with": {"name": f"report-{baseline.name}", "path": f"{SWEEP_DIR}/{baseline.name}"}})
    steps.append({"name": "Sweep", "env": dict(SWEEP_PIP_ENV), "run": f'nox -s "versions({env.name})"\n'})
    steps.append({"name": "Step summary", "if": "always()",
                  "run": f'cat {report_dir}/{ReportDir.REPORT_MD} >> "$GITHUB_STEP_SUMMARY" || true\n'})
    steps.append({"name": "Upload report", "if": "always()", "uses": "actions/upload-artifact@v4",
                  "with": {"name": f"report-{env.name}", "path": report_dir, "if-no-files-found": "warn"}})
    job["timeout-minutes"] = 90
    job["steps"] = steps
    return job


def _sweep_merge_job(sweep: list[Environment]) -> dict[str, Any]:
    """The sweep's reports as one: the version table, behaviour x version, the record changes."""
    installer = Environment(name=SWEEP_MERGE_JOB, description="", deepspeed=False, device="cpu",
                            extras=("test",))
    steps = _setup_steps()
    steps.append({"name": "Install (torch first, pinned)", "run": _install(installer)})
    for env in sweep:
        steps.append({"name": f"Report of {env.name}", "uses": "actions/download-artifact@v4",
                      "continue-on-error": True,
                      "with": {"name": f"report-{env.name}", "path": f"{SWEEP_DIR}/{env.name}"}})
    dirs = " ".join(f"{SWEEP_DIR}/{env.name}" for env in sweep)
    out = f"{SWEEP_DIR}/merged"
    steps += [
        {"name": "Merge", "run": f"python -m harness report merge {dirs} --out {out}\n"},
        {"name": "Step summary", "if": "always()",
         "run": f'cat {out}/{ReportDir.REPORT_MD} >> "$GITHUB_STEP_SUMMARY" || true\n'},
        {"name": "Upload merged report", "if": "always()", "uses": "actions/upload-artifact@v4",
         "with": {"name": "report-versions-merged", "path": out, "if-no-files-found": "warn"}},
    ]
    return {"name": "Version sweep report (" + ", ".join(env.name for env in sweep) + ")",
            "runs-on": ["ubuntu-latest"], "needs": [job_id(env) for env in sweep],
            "if": "${{ !cancelled() && (" + SWEEP_ONLY + ") }}", "timeout-minutes": 20, "steps": steps}


def _nox_job(name: str, step: str, command: str, artifact: tuple[str, str, str], timeout_minutes: int,
             condition: str | None = None) -> dict[str, Any]:
    """A job that runs one nox session (nox makes its venv, torch pinned from the CPU index) and
    keeps what it wrote as an artifact, also when it failed: `artifact` is (the upload step's name,
    the artifact's name, its paths)."""
    upload, artifact_name, paths = artifact
    steps = _setup_steps()
    steps.append({"name": "Install nox", "run": "python -m pip install nox\n"})
    steps.append({"name": step, "env": dict(SWEEP_PIP_ENV), "run": command + "\n"})
    steps.append({"name": upload, "if": "always()", "uses": "actions/upload-artifact@v4",
                  "with": {"name": artifact_name, "path": paths, "if-no-files-found": "warn"}})
    job: dict[str, Any] = {"name": name, "runs-on": ["ubuntu-latest"]}
    if condition is not None:
        job["if"] = condition
    return {**job, "timeout-minutes": timeout_minutes, "steps": steps}


def _sensitivity_job() -> dict[str, Any]:
    """The whole catalog as a kill matrix (each entry on every CPU cell it touches, after the
    control run on all of them), on the sweep's schedule."""
    return _nox_job("Bug catalog (harness sensitivity --kill-matrix, every entry)", "Catalog",
                    f"nox -s sensitivity -- --kill-matrix --keep-reports {SENSITIVITY_REPORTS}",
                    ("Upload catalog report", "report-sensitivity",
                     f"{SENSITIVITY_REPORTS}.json\n{SENSITIVITY_REPORTS}/\n"), 120, SWEEP_ONLY)


def _calibrate_job() -> dict[str, Any]:
    """`nox -s calibrate` on every push: the tolerances in force against the benign noise of the
    plain reference measured on this runner's CPU (it exits 1 where a tolerance, or an own-semantics
    entry, is below that noise: the cells would fail there on rounding alone), figures kept."""
    return _nox_job("Tolerances against this runner's noise (harness calibrate)", "Calibrate",
                    "nox -s calibrate", ("Upload calibration figures", "report-calibration",
                                         "reports/calibration.json\n"), 30)


def workflow(matrix_path: str | Path | None = None) -> dict[str, Any]:
    """The workflow as data (what the YAML text parses back to)."""
    matrix = load_matrix(matrix_path)
    envs = matrix.environments
    regular = {name: env for name, env in envs.items() if not env.sweep}
    sweep = [env for env in envs.values() if env.sweep]
    jobs: dict[str, Any] = {}
    for env in regular.values():
        jobs.update(_jobs(env, regular))
    merge = _merge_job(regular)
    if merge is not None:
        jobs[MERGE_JOB] = merge
    jobs.update({job_id(env): _sweep_job(env, envs) for env in sweep})
    if sweep:
        jobs[SWEEP_MERGE_JOB] = _sweep_merge_job(sweep)
    jobs[SENSITIVITY_JOB] = _sensitivity_job()
    jobs[CALIBRATE_JOB] = _calibrate_job()
    triggers: dict[str, Any] = {"push": {"branches": ["main"]}, "pull_request": {}, "workflow_dispatch": {},
                                "schedule": [{"cron": SWEEP_CRON}]}
    return {
        "name": "matrix",
        "on": triggers,
        # By event too: a push to main must not cancel the scheduled sweep running on main.
        "concurrency": {"group": "matrix-${{ github.ref }}-${{ github.event_name }}",
                        "cancel-in-progress": True},
        "permissions": {"contents": "read"},
        "jobs": jobs,
    }


# Long `if:` expressions and shell lines stay on one line (PyYAML folds at 80 columns otherwise).
_LINE_WIDTH = 4096


def to_yaml(data: dict[str, Any]) -> str:
    """Block-style YAML in the data's own key order. safe_dump quotes whatever YAML would read as
    something else (`on` becomes 'on', a key GitHub still reads by name; '3.11' stays a string)."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=_LINE_WIDTH)


def render_workflows(matrix_path: str | Path | None = None) -> dict[str, str]:
    """Relative path -> YAML text of every workflow the matrix defines."""
    return {WORKFLOW: HEADER + to_yaml(workflow(matrix_path))}


def stale_workflows(root: Path = REPO_ROOT, matrix_path: str | Path | None = None) -> list[str]:
    """Paths whose committed text differs from the rendering (missing files included)."""
    stale = []
    for rel, text in render_workflows(matrix_path).items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
    return stale


def write_workflows(root: Path = REPO_ROOT, matrix_path: str | Path | None = None) -> list[str]:
    """Write every rendered workflow under `root`; returns the paths written."""
    from harness.atomic_files import write_text_atomic

    rendered = render_workflows(matrix_path)
    for rel, text in rendered.items():
        write_text_atomic(root / rel, text)
    return list(rendered)
