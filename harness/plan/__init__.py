"""What a run plans from the matrix: the Cell, the one Matrix read from matrix.toml (tolerances
and resume cells included), selection (-k/-m) and whether a cell can run here."""
