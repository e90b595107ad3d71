"""What the matrix asks for: the Cell, the one Matrix read from matrix.toml (tolerances
included), selection (-k/-m) and whether a cell can run here."""
