"""`python -m harness calibrate`: where the comparison tolerances come from, and how tight they are.

Two measurements, both on the plain-PyTorch reference only (a tolerance measured on the code under
test would calibrate the harness on the thing it tests):

- noise (noise.py): the reference rerun under the perturbations that legitimately change bits in a
  cell (variants.py: a global batch split over ranks, more threads, this machine's kernels against
  goldens made in the deterministic mode, a backend's own half-precision semantics), compared with
  the goldens; per precision x tolerance family x kind of quantity, the atol each needs.
- detection thresholds (thresholds.py): the smallest uniform gradient error (every gradient times
  1 + e before each optimizer step) that fails the comparison with the tolerances in force, per
  task x precision x family, found by bisection.

report.py prints both; docs/calibration.md holds the figures and what they say.
"""
