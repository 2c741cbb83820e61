"""Process-wide settings of Mirage's Python API (`mi.global_config`,
`mi.set_gpu_device_id`, `mi.bypass_compile_errors`).

Mirage keeps these in a global object that its scripts set once at the top; they are
kept here for the same scripts. What each one does in this implementation:

- `gpu_device_id`: the CUDA device the search times its candidates on
  (`mirage.search.measure`). Calling a graph (`g(inputs=[...])`) runs on the device that
  holds the input tensors, as the runtime always does, so scripts that create their
  inputs on `cuda:<id>` get the same device.
- `bypass_compile_errors`: when the search times candidates on the GPU, a candidate
  that fails to lower is left out either way; with this set it is left out silently
  (noted in `SearchResult.notes`) instead of with a warning. In Mirage it silences the
  nvcc output of failing candidates, which are skipped there too.
- `verbose`: accepted for Mirage's scripts; `superoptimize(verbose=...)` is what
  controls the search's progress output here.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class GlobalConfig:
    verbose: bool = False
    gpu_device_id: int = 0
    bypass_compile_errors: bool = False


global_config = GlobalConfig()


def set_gpu_device_id(device_id: int) -> None:
    """Use CUDA device `device_id` for timing the search's candidates (see module doc)."""
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise ValueError(f"set_gpu_device_id: device_id must be a CUDA device index (an int >= 0), got {device_id!r}")
    torch = sys.modules.get("torch")  # checked only where torch is loaded already: importing it costs seconds
    if torch is not None and torch.cuda.is_available() and device_id >= torch.cuda.device_count():
        raise ValueError(f"set_gpu_device_id: no CUDA device {device_id} here "
                         f"(this machine has {torch.cuda.device_count()}: 0..{torch.cuda.device_count() - 1})")
    global_config.gpu_device_id = device_id


def bypass_compile_errors(value: bool = True) -> None:
    """Leave candidates that fail to lower out of GPU timing silently (see module doc)."""
    if not isinstance(value, bool):
        raise ValueError(f"bypass_compile_errors: value must be True or False, got {value!r}")
    global_config.bypass_compile_errors = value
