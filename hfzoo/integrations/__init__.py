"""The one seam between hfzoo and the internals of the libraries it builds on.

Everything hfzoo does with a third-party private attribute, a private op or module, or a library's global state
lives here, one module per library (`peft`, `transformers`, `accelerate`, `torch`), each function behind a guard
(`versions.written_for`) that names the versions it was written for. An upgrade that breaks an internal then fails
here, with a message naming the range, rather than somewhere deep in a training run; and a reader sees in one
place what an upgrade has to re-check. `tests/test_layering.py` keeps every other module of hfzoo, the recipes,
benchmarks and card generators off these internals.

The shipped model code (`hfzoo/models/`) cannot import this package (it must load where hfzoo is not installed):
the few internals any transformers model of its own reads stay there, listed with their reasons in the test. For
the same reason `models/compat.py` (the output cache field transformers 5.24 renamed) stays with the model code; it
reads only public names (the output dataclass's fields) and mutates nothing.
"""
