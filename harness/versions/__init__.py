"""The dependency-version axis: what each pinned torch / DeepSpeed environment of matrix.toml
showed (docs/versions.md). `behaviours`: the DeepSpeed behaviours the core reconciles, as data;
`probe`: run their DeepSpeed-alone reproductions here; `status`: whether the core supports this
environment's release, and why not; `table`: the sweep's tables from report dirs."""
