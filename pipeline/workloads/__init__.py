"""GPU workloads the pipeline can record GEMMs from (run as ``python -m``; they import torch)."""
