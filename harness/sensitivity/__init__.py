"""The harness's own detection rate: realistic bugs patched into a temporary copy of the core,
one at a time, each run against the smallest selection of cells that should expose it
(`python -m harness sensitivity`, docs/sensitivity.md)."""
