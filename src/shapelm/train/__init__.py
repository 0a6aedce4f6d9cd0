"""Pretraining: `train(run_config, out_dir, data_dir=...)` and `shapelm train`.

See docs/TRAINING.md.
"""

from shapelm.train.loop import NonFiniteLossError, TrainResult, grad_accumulation, train
from shapelm.train.schedule import lr_at, param_groups

__all__ = ["NonFiniteLossError", "TrainResult", "grad_accumulation", "lr_at", "param_groups", "train"]
