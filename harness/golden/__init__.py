"""What makes or reads goldens: the plain-PyTorch reference, goldens, their deterministic
generation, check and show, the regeneration tolerance, foreign goldens, the precision-visible
guard, reference checkpoints, half-precision weights and the lock on torch's global RNG."""
