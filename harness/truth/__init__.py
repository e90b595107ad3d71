"""What is true: the plain-PyTorch reference, goldens and their regeneration, records,
comparison, the judge and a cell's outcome."""
