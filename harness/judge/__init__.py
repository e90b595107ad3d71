"""Judging a cell: its evidence checked against the cell, its record compared with the golden,
the resume verdict, a cell's outcome (`CellResult`), and a record against another environment's."""
