"""How far the goldens move with the CPU underneath: the measurement behind the regeneration
tolerances in matrix/matrix.toml ([regeneration.*]) and behind docs/goldens.md.

Every golden is made in the deterministic generation mode (harness.golden.golden_generation) with the
instruction set capped at several levels, and also the ordinary way (the kernels the CPU picks)
under the same caps. A cap through DNNL_MAX_CPU_ISA / MKL_ENABLE_INSTRUCTIONS /
ATEN_CPU_CAPABILITY makes this CPU run the kernels an older CPU would run, so one machine shows
both what the deterministic mode holds and how much kernel choice alone moves a golden. Prints,
per precision, the largest |difference| from the deterministic, uncapped goldens:

    python benchmarks/golden_portability.py [--task lm ...]
"""

from __future__ import annotations

import argparse
import time

import torch

from harness.golden.golden_generation import generate
from harness.golden.golden_store import owned_golden_pairs

# Capping oneDNN and MKL (and torch's own dispatch, in the ordinary mode) at an instruction set.
CAPS: dict[str, dict[str, str]] = {
    "none": {},
    "avx512_core": {"DNNL_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx2": {"DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"},
    "sse41": {"DNNL_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
              "ATEN_CPU_CAPABILITY": "default"},
}


def _worst(reference: dict, other: dict) -> dict[str, tuple[float, float, str]]:
    """Per precision: (max |diff|, max |diff| / (|golden| + tiny), where)."""
    out: dict[str, tuple[float, float, str]] = {}
    for (task, precision), record in other.items():
        golden = reference[(task, precision)].tensors()
        for key, tensor in record.tensors().items():
            diff = (tensor.double() - golden[key].double()).abs()
            if diff.numel() == 0:
                continue
            worst_abs = float(diff.max())
            worst_rel = float((diff / (golden[key].double().abs() + 1e-30)).max())
            best = out.get(precision, (0.0, 0.0, "-"))
            if worst_abs > best[0]:
                out[precision] = (worst_abs, max(best[1], worst_rel), f"{task} {key}")
            else:
                out[precision] = (best[0], max(best[1], worst_rel), best[2])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", default=None)
    args = parser.parse_args()
    pairs = [p for p in owned_golden_pairs() if args.task is None or p[0] in args.task]
    print(f"CPU capability here: {torch.backends.cpu.get_cpu_capability()}; {len(pairs)} goldens")
    start = time.perf_counter()
    reference = generate(pairs)
    print(f"deterministic, no cap: made in {time.perf_counter() - start:.1f} s")
    ordinary_uncapped = None
    for deterministic in (True, False):
        mode = "deterministic" if deterministic else "ordinary"
        for cap, environment in CAPS.items():
            if deterministic and cap == "none":
                continue
            if deterministic:  # the mode pins ATEN_CPU_CAPABILITY itself
                environment = {k: v for k, v in environment.items() if k != "ATEN_CPU_CAPABILITY"}
            made = generate(pairs, deterministic=deterministic, extra_environment=environment)
            _print_row(f"{mode:>13} cap={cap:<12} vs deterministic", reference, made, pairs)
            if not deterministic and ordinary_uncapped is None:
                ordinary_uncapped = made
            elif not deterministic:
                # What another CPU means in the ordinary mode: kernel choice alone.
                _print_row(f"{mode:>13} cap={cap:<12} vs ordinary uncapped", ordinary_uncapped, made, pairs)


def _print_row(label: str, reference: dict, made: dict, pairs: list) -> None:
    identical = sum(made[p].tensor_bytes() == reference[p].tensor_bytes() for p in pairs)
    print(f"{label}: bit-identical {identical}/{len(pairs)}", end="")
    for precision, (worst_abs, worst_rel, where) in sorted(_worst(reference, made).items()):
        if worst_abs > 0:
            print(f"  {precision}: max|d| {worst_abs:.3g} (rel {worst_rel:.3g}, {where})", end="")
    print()


if __name__ == "__main__":
    main()
