"""The command line: python -m harness list | run | golden | ci."""
