"""Runs: the executor loop around a scheduler, the workloads fed to it, ranks over
torch.distributed, and the scenario files that describe runs (docs/DESIGN.md maps the modules)."""
