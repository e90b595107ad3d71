"""`python -m harness script train.py [args]`: a user's own training script, written against
accelerate_core, run on every selected backend of the matrix through `accelerate-core launch`, and
judged against the same script's reference cell (docs/script-mode.md).

The script is not changed: its Accelerator records what it computed when the harness sets
`ACCELERATE_CORE_RECORD_DIR` (accelerate_core/recording.py). Phases, one module each:
`cells` (which cells, which reference, the script's arguments per cell), `launch` (one cell, one
launch), `record` (the core's record file as a harness Record), `judge` (evidence, then numbers).

A script written against Hugging Face Accelerate (`--implementation accelerate`) runs through
`accelerate launch` instead, recorded by a shim the launch installs in its processes and removes
afterwards: `accelerate_site` (the `sitecustomize.py` and its import hook) and
`accelerate_recording` (the core's recorder, told by the matrix's Accelerate shim).
"""
