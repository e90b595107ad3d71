"""The dtype, as evidence names it ("bfloat16"), that each precision of the matrix computes in:
shared by the judge of every backend (harness.judge.evidence_check) and of FSDP2's
(harness.judge.fsdp_evidence_check), which must not import each other."""

from __future__ import annotations

COMPUTE_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
