"""Issue 7: a crash, a hang or a NaN in one cell never costs the others, and says what happened.

Each canary is judged where a run that holds it already happens, so this module launches none of
them again (it holds no test of its own):
- the crash (crashed, "rank 1 died (exit code 13)", rank 1's tail, the cells after it in a fresh
  launch that pass, in bounded time): run/test_runner.py,
  test_crash_fails_its_cell_with_the_dying_ranks_tail_and_the_rest_runs_afresh, on its grouped
  run, where canary_crash-cpu2-ddp-fp32 is the first of the cpu2 cells;
- the hang (timeout with every rank's Python stack): faults/test_interrupt.py,
  test_hang_times_out_with_every_ranks_python_stack, on its --resume run, whose one cell to run
  is canary_hang-cpu2-ddp-fp32 with --timeout 8;
- the NaN (failed, exit 1, "NaN first at step 4", the losses' first divergence at step 4):
  cli/test_cli.py, test_the_nan_canary_fails_and_the_diagnosis_names_the_step, on its
  --last-failed run, whose one cell to run is canary_nan-cpu1-single-fp32 (and, run among other
  cells, run/test_runner.py, test_nan_canary_diagnosis_names_the_step).
"""
