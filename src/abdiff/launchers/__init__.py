"""Launchers start worker processes: locally, or under mpirun / srun for several ranks."""
