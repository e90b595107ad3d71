"""The record format: what one run produced (`Record`, `Fingerprint`) and its files."""
