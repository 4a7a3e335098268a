"""The one deprecation warning PEFT 0.21 triggers on every adapter under transformers 5, ignored where it is raised.

`PeftModel.__init__` reads `model.is_gradient_checkpointing`, which transformers 5 deprecates (a FutureWarning:
"use `is_activation_checkpointing`") on every `get_peft_model` and `PeftModel.from_pretrained`. PEFT has no argument
that avoids the read, and the warning is about PEFT's code, which the user cannot change. So it is ignored around
hfzoo's calls that build a `PeftModel`, by category and message only: every other warning still shows, and so does
this one where the user's own code reads the deprecated attribute.
"""

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

PEFT_DEPRECATION = r"`is_gradient_checkpointing` is deprecated"


@contextmanager
def building_peft_model() -> Iterator[None]:
    """Wrap a call that builds a `PeftModel` (`get_peft_model`, `PeftModel.from_pretrained`, `AutoPeftModel*`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PEFT_DEPRECATION, category=FutureWarning)
        yield
