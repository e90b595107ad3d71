"""nox sessions: `nox -s matrix` (the whole matrix, both environments), `tests`, `golden`, `lint`.

Every session gets its own virtualenv under .nox/. torch==2.13.0 is installed FIRST: the
project's own range (torch>=2.13) would otherwise let pip fetch the newest build, a download of
several GB. Reuse venvs with `nox -R` (= --reuse-existing-virtualenvs --no-install).

Each venv has its own TORCH_EXTENSIONS_DIR: DeepSpeed JIT-compiles a comm op on first use
(about 60 s) into that cache, and a cache shared between venvs with different torch paths is
rebuilt and overwritten every time the other venv runs.

    nox -s matrix                    both environments; exit 1 if either has an unexpected result
    nox -s matrix -- -k mlp          arguments after -- go to `python -m harness run`
    nox -s tests                     the test suite with and without deepspeed, and the
                                     numerics tests on this CPU made to look older (AVX2 only,
                                     no native fp16), in tests(deepspeed)'s venv, after its suite
    nox -s golden                    check goldens reproduce; `nox -s golden -- --update` rewrites
    nox -s versions                  the dependency-version sweep (docs/versions.md): every
                                     [environments.*] with sweep = true in matrix/matrix.toml, each
                                     with torch and deepspeed pinned; reports/versions/<env>/
    nox -s versions -- -k "cpu2 and zero"   fewer cells per environment
    nox -s foreign_goldens           the tests that read goldens (marker `goldens`, the matrix
                                     cells included) against goldens moved as a regeneration on
                                     another CPU would move them (harness/golden/foreign_goldens.py);
                                     tests(deepspeed) runs its whole suite against them too
    nox -s accelerate                Hugging Face Accelerate's cells (docs/implementations.md);
                                     reports/accelerate/
    nox -s calibrate                 the benign noise behind each tolerance and the detection
                                     thresholds (docs/calibration.md); reports/calibration.json
    nox -s lint                      ruff + mypy
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nox
import tomllib

PYTHON = "3.11"
TORCH = "torch==2.13.0"
# Environments of matrix/matrix.toml that run on a CPU; nodeepspeed first: the deepspeed run
# compares its non-DeepSpeed records with the nodeepspeed ones (cross-environment check).
ENVIRONMENTS = ["nodeepspeed", "deepspeed"]
# tests(deepspeed)'s venv also has the dev tools (ruff, mypy): CI lints in it after the tests
# rather than building a third venv with torch and deepspeed for two commands.
# The deepspeed venv also has Hugging Face Accelerate: tests/harness/implementations judges it
# (docs/implementations.md); the nodeepspeed venv stays without either.
EXTRAS = {"nodeepspeed": "test", "deepspeed": "deepspeed,test,dev,accelerate"}
REPORTS = Path("reports")
# The other CPU, simulated: torch's kernels, oneDNN and MKL capped at AVX2, so oneDNN (and so
# DeepSpeed) reports no native fp16, as on a CPU without AVX-512 FP16. A test that assumed the
# CPU it was written on fails here, on that same machine. Real caps, not patches: the kernels
# an AVX2-only CPU runs are the ones that run.
OLDER_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
# What touches numerics or fp16 detection (the whole suite again would double CI's time): the
# tests marked `numerics` (pyproject.toml): the goldens (regenerated under the caps) and the
# reference, the core against plain PyTorch on one process, DeepSpeed fp16 on CPU (native where
# there is one, the emulation, the refusal), fp16 availability and its fault cases, and what `env`
# says about the machine. A marker, not a list of paths: a test joins by being marked.
NUMERICS = ["tests", "-m", "numerics"]


def _sweep_environments() -> dict[str, dict[str, object]]:
    """[environments.*] of matrix.toml with sweep = true, in file order (the one source; read with
    tomllib because nox's own interpreter need not have the project installed)."""
    matrix = tomllib.loads(Path("matrix/matrix.toml").read_text(encoding="utf-8"))
    return {name: body for name, body in matrix.get("environments", {}).items() if body.get("sweep")}


SWEEP = _sweep_environments()
SWEEP_REPORTS = REPORTS / "versions"
ALLOW_UNSUPPORTED = "ACCELERATE_CORE_ALLOW_UNSUPPORTED_DEEPSPEED"  # accelerate_core/deepspeed_support.py
GOLDEN_DIR_VARIABLE = "HARNESS_GOLDEN_DIR"  # harness/paths.py

# The matrix items tests(nodeepspeed) runs: every strategy x precision of this environment for the
# tasks that take the core's distinct paths (AdamW groups, the scheduler and the uneven gather;
# shuffling over epochs; SyncBatchNorm; dropout's random streams and its declared DDP outcomes).
# No training path of the core depends on whether deepspeed is installed (only the strategy choice
# and the imports do, which the environment's other tests check), so the other tasks' cells would
# repeat tests(deepspeed)'s cells; `nox -s matrix` runs every cell of both environments.
NODEEPSPEED_CELLS = "classifier or shuffle or batchnorm_sync or dropout"

nox.options.sessions = ["lint", "tests", "matrix"]  # `versions` runs only when named (or scheduled)
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session, extras: str) -> None:
    _pip_install(session, TORCH)  # first, pinned: see the module docstring
    _pip_install(session, "-e", f".[{extras}]")
    _compile_installed(session)


def _pip_install(session: nox.Session, *args: str) -> None:
    """pip install without byte-compiling: pip compiles each file in turn on one core (about 20 s
    of torch's install alone); _compile_installed then compiles the whole venv on every core."""
    session.install("--no-compile", *args)


def _compile_installed(session: nox.Session) -> None:
    """Byte-compile the venv's site-packages in parallel, once, after its installs: without .pyc
    files every process would compile torch again on import (when PYTHONDONTWRITEBYTECODE is set)
    or race to write them. A file that does not compile (some packages ship templates) is skipped,
    as pip skips it."""
    session.run_install("python", "-c", "import compileall, sysconfig\n"
                        "for where in {sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}:\n"
                        "    compileall.compile_dir(where, quiet=2, workers=0)", silent=True)


def _environ(session: nox.Session) -> dict[str, str]:
    venv = Path(session.virtualenv.location)
    return {"TORCH_EXTENSIONS_DIR": str(venv / "torch_extensions")}


def _pytest(session: nox.Session, env_name: str, args: list[str], environ: dict[str, str],
            report_dir: Path | None = None) -> None:
    """pytest with the matrix items' options (tests/matrix/options.py): the environment they are
    in, and where their report goes when not reports/pytest/<env>."""
    matrix = ["--matrix-env", env_name]
    if report_dir is not None:
        matrix += ["--matrix-report-dir", str(report_dir.resolve())]
    session.run("python", "-m", "pytest", *matrix, *args, env=environ)


def _check_deepspeed(session: nox.Session, env_name: str) -> None:
    """Fail early when the venv does not match its environment (e.g. a reused, altered venv)."""
    wanted = env_name != "nodeepspeed"
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; found = importlib.util.find_spec('deepspeed') is not None; "
        f"wanted = {wanted}; "
        "sys.exit(0 if found == wanted else "
        f"'environment {env_name}: deepspeed installed=' + str(found) + ', expected ' + str(wanted) + "
        "'. Fix: remove the venv under .nox/ and run again without -R')",
        silent=True,
    )


def _build_deepspeed_ops(session: nox.Session, env_name: str) -> None:
    """JIT-compile DeepSpeed's CPU comm op once, before anything runs in parallel.

    Otherwise the first DeepSpeed launches compile it (about 60 s of g++ on every core) while
    other launches run: on a 2-core machine that starved gloo's rendezvous and TCP store threads
    of concurrent launches (ranks aborted with "terminate called without an active exception",
    seen in CI), which says nothing about the code under test."""
    if env_name == "nodeepspeed":
        return
    session.run(
        "python",
        "-c",
        "from deepspeed.accelerator import get_accelerator; "
        "builder = get_accelerator().create_op_builder('ShareMemCommBuilder'); "
        "builder is not None and builder.load()",
        env=_environ(session),
    )


@nox.session(python=PYTHON)
@nox.parametrize("env", ENVIRONMENTS, ids=ENVIRONMENTS)
def matrix(session: nox.Session, env: str) -> None:
    """The whole matrix in one environment; the report goes to reports/<env>/."""
    _install(session, EXTRAS[env])
    _check_deepspeed(session, env)
    _build_deepspeed_ops(session, env)
    # reports/<env> belongs to this session: each run replaces the last (--overwrite says so).
    command = ["python", "-m", "harness", "run", "--env-name", env, "--report-dir", str(REPORTS / env),
               "--overwrite"]
    other = REPORTS / "nodeepspeed"
    if env == "deepspeed" and (other / "report.json").is_file():
        command += ["--compare-records", str(other)]
    elif env == "deepspeed":
        session.warn(f"no {other}/report.json: the cross-environment check is skipped this time")
    session.run(*command, *session.posargs, env=_environ(session))


@nox.session(python=PYTHON)
@nox.parametrize("env", ENVIRONMENTS, ids=ENVIRONMENTS)
def tests(session: nox.Session, env: str) -> None:
    """The test suite (the matrix items included); in the deepspeed environment, then the
    numerics tests (marker `numerics`) once more with the CPU made to look older (OLDER_CPU), in the
    same venv (a venv of its own cost CI a torch + deepspeed install and a DeepSpeed op build).
    Arguments after -- replace the defaults (and skip the older-CPU pass)."""
    _install(session, EXTRAS[env])
    _check_deepspeed(session, env)
    _build_deepspeed_ops(session, env)
    # --dist loadfile keeps each test module on one worker, so a module's launch fixtures (2-rank
    # DeepSpeed launches of a minute) run once, not once per worker: 568 s against 621 s with
    # loadgroup (which xdist 3.8 does not honour on pytest 9.2). The matrix items share their
    # launches by themselves (tests/matrix/session.py).
    # Without deepspeed, only the tests whose outcome depends on it (marker `nodeepspeed`: the
    # core's imports and refusals, its launches and checkpoints without deepspeed, the skips that
    # name the missing dependency, the matrix cells of NODEEPSPEED_CELLS); every other test runs
    # identically in both environments and runs once, in tests(deepspeed).
    paths = (["tests", "-m", "nodeepspeed", "--matrix-select", NODEEPSPEED_CELLS] if env == "nodeepspeed"
             else ["tests"])
    # --durations: the slowest tests in every CI log (a CI run must stay short; see README).
    # --junitxml: every test's time, for the CI system and for benchmarks/suite_time.py.
    args = session.posargs or [*paths, "-n", "2", "--dist", "loadfile", "-ra", "--durations=15",
                               f"--junitxml={REPORTS / f'junit-tests-{env}.xml'}"]
    environ = _environ(session)
    if env == "deepspeed":
        # The goldens this suite reads look made on another machine: a test that assumes they
        # were made on the machine running it fails here, not on a user's CPU of another vendor.
        # tests(nodeepspeed)'s cells and the older-CPU pass read the checked-in ones.
        environ[GOLDEN_DIR_VARIABLE] = _foreign_goldens(session)
    _pytest(session, env, args, environ)
    if env == "deepspeed" and not session.posargs:
        _numerics_on_an_older_cpu(session)


def _foreign_goldens(session: nox.Session) -> str:
    """The checked-in goldens, each moved as a regeneration on another CPU would move it."""
    folder = REPORTS / "foreign-goldens"
    session.run("python", "-m", "harness.golden.foreign_goldens", str(folder))
    return str(folder.resolve())


@nox.session(python=PYTHON)
def foreign_goldens(session: nox.Session) -> None:
    """Every test that reads goldens (marker `goldens`: the golden, judge and comparison tests and
    the matrix cells) against goldens moved as another CPU would move them. Arguments after --
    replace the default pytest arguments."""
    _install(session, EXTRAS["deepspeed"])
    _check_deepspeed(session, "deepspeed")
    _build_deepspeed_ops(session, "deepspeed")
    environ = {**_environ(session), GOLDEN_DIR_VARIABLE: _foreign_goldens(session)}
    args = session.posargs or ["tests", "-m", "goldens", "-n", "2", "--dist", "loadfile", "-ra"]
    _pytest(session, "deepspeed", args, environ, report_dir=REPORTS / "pytest" / "foreign-goldens")


def _numerics_on_an_older_cpu(session: nox.Session) -> None:
    """The tests marked `numerics` with torch, oneDNN and MKL capped at AVX2 (OLDER_CPU).

    On a CPU that has nothing above AVX2 the caps change no kernel, so a numerics test that reads no
    golden would repeat, bit for bit, what it did in the main pass: there only the tests that read
    goldens run again, against the checked-in goldens (the main pass read moved ones)."""
    environ = {**_environ(session), **OLDER_CPU}
    # Say what the tests will see, before they see it.
    session.run("python", "-m", "accelerate_core.commands.main", "env", env=environ)
    selection = NUMERICS
    already_older = _nothing_above_avx2()
    if already_older:
        session.log(f"this CPU is already the older CPU ({already_older}): the caps change no kernel, so "
                    "only the numerics tests that read goldens run again, against the checked-in ones")
        selection = ["tests", "-m", "numerics and goldens"]
    _pytest(session, "deepspeed", [*selection, "-n", "2", "--dist", "loadfile", "-ra"], environ)


# CPU flags (Linux /proc/cpuinfo names) of instructions above AVX2 that torch, oneDNN or MKL use for
# fp32/fp16/bf16 kernels; OLDER_CPU's caps turn off exactly these.
_ABOVE_AVX2 = ("avx512", "amx", "avx_vnni", "avx_ne_convert", "avx_ifma", "avx10")


def _nothing_above_avx2() -> str | None:
    """Why the OLDER_CPU caps are a no-op on this CPU (it has AVX2 and nothing above it); None when
    they are not, or when the CPU's flags cannot be read (then the whole numerics pass runs)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return None
    lines = [line for line in text.splitlines() if line.startswith("flags")]
    if not lines:
        return None
    flags = set(lines[0].split(":", 1)[-1].split())
    if "avx2" not in flags or any(flag.startswith(_ABOVE_AVX2) for flag in flags):
        return None
    return "its flags have avx2 and nothing above it"


@nox.session(python=PYTHON)
def golden(session: nox.Session) -> None:
    """Goldens come from plain torch (harness.golden.reference): no deepspeed needed."""
    _install(session, "test")
    session.run("python", "-m", "harness", "golden", *(session.posargs or ["--check"]))


@nox.session(python=PYTHON)
def sensitivity(session: nox.Session) -> None:
    """The harness's detection rate: the whole bug catalog, each bug patched into a temporary
    copy of the core (docs/sensitivity.md); exits non-zero below 100%. Arguments after -- go to
    `python -m harness sensitivity` (e.g. -- --only ddp_never_syncs)."""
    _install(session, EXTRAS["deepspeed"])
    _check_deepspeed(session, "deepspeed")
    _build_deepspeed_ops(session, "deepspeed")
    session.run("python", "-m", "harness", "sensitivity", "--json", str(REPORTS / "sensitivity.json"),
                *session.posargs, env=_environ(session))


@nox.session(python=PYTHON)
def accelerate(session: nox.Session) -> None:
    """Hugging Face Accelerate's cells (the `accelerate` implementation, docs/implementations.md),
    with deepspeed installed so that its ZeRO cells can show what it does with a DeepSpeedPlugin;
    the report goes to reports/accelerate/. Arguments after -- go to `python -m harness run`."""
    _install(session, EXTRAS["deepspeed"])
    _check_deepspeed(session, "deepspeed")
    _build_deepspeed_ops(session, "deepspeed")
    session.run("python", "-m", "harness", "run", "--implementation", "accelerate", "--env-name", "deepspeed",
                "--report-dir", str(REPORTS / "accelerate"), "--overwrite",
                *(session.posargs or ["-m", "not gpu and not multi_gpu"]), env=_environ(session))


@nox.session(python=PYTHON)
def calibrate(session: nox.Session) -> None:
    """Where the tolerances come from (docs/calibration.md): the benign noise of the plain reference
    and the smallest gradient error each cell catches; the figures go to reports/calibration.json.
    Reference only: no deepspeed needed. Arguments after -- go to `python -m harness calibrate`
    (e.g. -- --task sgd_accum, or -- --check-records reports/deepspeed after `nox -s matrix`)."""
    _install(session, "test")
    session.run("python", "-m", "harness", "calibrate", "--json", str(REPORTS / "calibration.json"),
                *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    _install(session, "test,dev")
    session.run("ruff", "check", ".")
    session.run("mypy")


def _write_json(path: Path, data: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


@nox.session(python=PYTHON)
@nox.parametrize("env", list(SWEEP), ids=list(SWEEP))
def versions(session: nox.Session, env: str) -> None:
    """One environment of the version sweep: torch and deepspeed (and accelerate, in an environment
    of the accelerate implementation) pinned as matrix.toml says, the support status and the
    DeepSpeed-alone behaviours (`harness versions probe`), then its cells (of its implementation),
    records compared with its `compare_with` environment. A release the core refuses is still
    run (ALLOW_UNSUPPORTED), to show its first failing cell; its failures do not fail the session,
    a supported environment's do. Seconds per phase go to sweep_times.json (docs/versions.md)."""
    spec = SWEEP[env]
    out = SWEEP_REPORTS / env
    times: dict[str, float] = {}
    pins = {"torch": str(spec["torch_version"]), "deepspeed": str(spec["deepspeed_version"])}
    if spec.get("accelerate_version"):  # an Accelerate release: installed after torch and deepspeed
        pins["accelerate"] = str(spec["accelerate_version"])

    def timed(phase: str, step: object) -> None:
        start = time.monotonic()
        try:
            step()  # type: ignore[operator]
        finally:
            times[phase] = round(times.get(phase, 0.0) + time.monotonic() - start, 1)
            _write_json(out / "sweep_times.json", times)

    def fail(stage: str, reason: str) -> None:
        status = {**pins, "supported": False, "stage": stage, "reason": reason}
        _write_json(out / "version_status.json", status)
        session.error(reason)

    def install() -> None:
        requirements = [f"torch=={pins['torch']}", "-e .[test]", f"deepspeed=={pins['deepspeed']}"]
        requirements += [f"accelerate=={pins['accelerate']}"] if "accelerate" in pins else []
        for requirement in requirements:
            try:  # torch first, pinned; the project without its deepspeed extra: the pin replaces it
                _pip_install(session, *requirement.split())
            except nox.command.CommandFailed:
                fail("install", f"install error: pip install {requirement} failed (the session log has "
                     "pip's output)")
        _compile_installed(session)

    timed("install", install)
    environ = _environ(session)
    try:
        timed("op build", lambda: _build_deepspeed_ops(session, env))
    except nox.command.CommandFailed:
        fail("op build", "op build error: DeepSpeed's CPU comm op did not build or load (the session log "
             "has the error)")
    probe = ["python", "-m", "harness", "versions", "probe", "--report-dir", str(out)]
    timed("probe", lambda: session.run(*probe, env=environ))
    status = json.loads((out / "version_status.json").read_text(encoding="utf-8"))
    if status.get("stage") in ("install", "import", "op build"):
        return  # nothing can run; version_status.json says why
    command = ["python", "-m", "harness", "run", "--env-name", env, "--report-dir", str(out), "--overwrite",
               "-m", str(spec.get("markexpr") or "not gpu and not multi_gpu")]
    if spec.get("implementation", "core") != "core":
        command += ["--implementation", str(spec["implementation"])]
    baseline = SWEEP_REPORTS / str(spec.get("compare_with", ""))
    if spec.get("compare_with") and (baseline / "report.json").is_file():
        command += ["--compare-records", str(baseline)]
    elif spec.get("compare_with"):
        session.warn(f"no {baseline}/report.json: run {spec['compare_with']} first for the record comparison")
    if not status.get("supported"):  # measure what the refused release does; never fail on it
        environ = {**environ, ALLOW_UNSUPPORTED: "1"}
    timed("cells", lambda: session.run(*command, *session.posargs, env=environ,
                                       success_codes=[0] if status.get("supported") else [0, 1]))
