"""hfzoo: transformer architectures, pretraining recipes and composable adapters, native to Hugging Face.

Importing hfzoo registers every family with transformers' Auto classes and PEFT's default targets.
"""

from . import adapters  # registers the bottleneck adapters as PEFT method "BOTTLENECK"
from . import models
from .core.presets import list_presets, preset_config
from .core.registration import register as _register
from .models import *  # noqa: F403  (every family's configuration and models: hfzoo.models.__all__)

_register()

__version__ = "0.1.0"

__all__ = [*models.__all__, "list_presets", "preset_config"]
