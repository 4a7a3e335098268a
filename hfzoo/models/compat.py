"""What differs between the transformers versions hfzoo runs on, kept in one place.

Imported relatively (`from .compat import ...`), so `save_pretrained` copies it next to the weights; delete an entry
once the oldest supported transformers no longer needs it.
"""

from dataclasses import fields

from transformers.cache_utils import Cache
from transformers.modeling_outputs import BaseModelOutputWithPast

# The outputs' cache field: `past_key_values` up to transformers 5.23, `cache` from 5.24, where building an output
# with the old keyword or reading `outputs.past_key_values` logs "`past_key_values`/`cache_params` are deprecated"
# (on every training run, since every forward builds outputs). Build and read outputs through this name only.
CACHE_FIELD = "cache" if "cache" in {field.name for field in fields(BaseModelOutputWithPast)} else "past_key_values"


def output_cache(outputs) -> Cache | None:
    """The cache a model output carries, read by this version's field name (no deprecation warning)."""
    return getattr(outputs, CACHE_FIELD, None)


def cache_argument(past_key_values: Cache | None, kwargs: dict) -> Cache | None:
    """The cache a caller passed, as `past_key_values` (transformers <= 5.23) or as `cache` (5.24 renamed it, and
    its `generate` passes `cache=`); taken out of `kwargs` so it does not travel on to the attention functions.

    Both arrive when PEFT's prefix tuning (which passes its prefix as `past_key_values`) runs under 5.24's
    `generate`: at the first step generate's cache is still empty and the prefix is the one to extend; at every
    later step generate's cache already holds the prefix and the tokens so far, and PEFT's fresh prefix is stale.
    """
    cache = kwargs.pop("cache", None)
    if cache is None:
        return past_key_values
    if past_key_values is not None and cache.get_seq_length() == 0:
        return past_key_values
    return cache
