"""The CI jobs of an environment with `shards = N` in matrix.toml (docs/shards.md).

Such an environment runs as N jobs, `<job>-shard-K-of-N`, each `python -m harness run --shard K/N`
uploading `report-<env>-shard-K-of-N`; a merge joins them: the final merge job for a CPU
environment, a job of its own (`<job>-merge`, uploading `report-<env>`) for the others. A job that
compares records with a sharded environment (`--compare-records`) waits for all its shards and
downloads their records into one folder (each shard's cells are its own, so no file collides).
An environment of one shard keeps the single job and artifact it always had.
"""

from __future__ import annotations

from typing import Any

from harness.layout.report_dir import ReportDir
from harness.plan.matrix import Environment


def shard_job_id(base: str, index: int, count: int) -> str:
    return f"{base}-shard-{index}-of-{count}"


def job_ids(env: Environment, base: str) -> list[str]:
    """Every job that runs the environment's cells."""
    if env.shards == 1:
        return [base]
    return [shard_job_id(base, k, env.shards) for k in range(1, env.shards + 1)]


def report_artifact(env: Environment, index: int = 0) -> str:
    """The report artifact of the whole environment (index 0) or of one shard."""
    return f"report-{env.name}" if index == 0 else f"report-{env.name}-shard-{index}-of-{env.shards}"


def shard_dirs(env: Environment) -> list[str]:
    """Where a merge downloads the environment's report dir(s)."""
    if env.shards == 1:
        return [f"reports/{env.name}"]
    return [f"reports/{env.name}/shard-{k}" for k in range(1, env.shards + 1)]


def report_downloads(env: Environment) -> list[dict[str, Any]]:
    """A merge's download steps: one per report dir of `shard_dirs` (a missing one is named by the
    merge itself: exit 2, with the fix)."""
    indexes = [0] if env.shards == 1 else list(range(1, env.shards + 1))
    return [
        {
            "name": f"Report of {env.name}" + (f" (shard {k}/{env.shards})" if k else ""),
            "uses": "actions/download-artifact@v4",
            "continue-on-error": True,
            "with": {"name": report_artifact(env, k), "path": path},
        }
        for k, path in zip(indexes, shard_dirs(env), strict=True)
    ]


def records_download(env: Environment) -> dict[str, Any]:
    """The step that brings the environment's records for --compare-records to reports/<env>."""
    if env.shards == 1:
        source: dict[str, Any] = {"name": report_artifact(env)}
    else:  # every shard's artifact into one folder: records/ united, report.json of one shard
        source = {"pattern": f"report-{env.name}-shard-*", "merge-multiple": True}
    return {"name": f"Records of {env.name}", "uses": "actions/download-artifact@v4",
            "continue-on-error": True, "with": {**source, "path": f"reports/{env.name}"}}


def merge_steps(envs: list[Environment], out: str) -> list[dict[str, Any]]:
    """Download every report dir of `envs`, merge them into `out`, summarise and upload it."""
    steps = [step for env in envs for step in report_downloads(env)]
    dirs = " ".join(d for env in envs for d in shard_dirs(env))
    return [*steps, {"name": "Merge", "run": f"python -m harness report merge {dirs} --out {out}\n"},
            {"name": "Step summary", "if": "always()",
             "run": f'cat {out}/{ReportDir.REPORT_MD} >> "$GITHUB_STEP_SUMMARY" || true\n'}]


def environment_merge_job(env: Environment, base: str, setup: list[dict[str, Any]],
                          condition: str) -> dict[str, Any]:
    """A sharded environment outside the final merge (a GPU one): its shards joined into one
    report, uploaded as `report-<env>` as its single job would have."""
    out = f"reports/{env.name}/merged"
    steps = [*setup, *merge_steps([env], out),
             {"name": "Upload merged report", "if": "always()", "uses": "actions/upload-artifact@v4",
              "with": {"name": report_artifact(env), "path": out, "if-no-files-found": "warn"}}]
    return {"name": f"{env.description or env.name} (merged shards)", "runs-on": ["ubuntu-latest"],
            "needs": job_ids(env, base), "if": condition, "timeout-minutes": 20, "steps": steps}
