"""Configuration of the bidirectional LSTM language model family (ELMo, Peters et al., 2018)."""

import inspect
import os

from transformers import PreTrainedConfig

from .component_options import check_field_types


class ZooBiLMConfig(PreTrainedConfig):
    r"""
    A forward and a backward LSTM language model over shared token embeddings and a shared softmax, as in ELMo
    ("Deep contextualized word representations", Peters et al., 2018). Each direction is a stack of LSTMs with a
    projection (Sak et al., 2014; torch's `nn.LSTM(proj_size=...)`), with residual connections between layers; the
    softmax is tied to the input embedding. ELMo's own model reads characters through a CNN; this family reads tokens
    from a trained tokenizer (ELMo's character CNN is not part of it).

    Args:
        vocab_size (`int`, defaults to 8192): size of the token vocabulary.
        hidden_size (`int`, defaults to 512): width of the token embedding and of each direction's LSTM output (the
            projection, ELMo's `projection_dim` 512). A layer's representation concatenates both directions:
            `2 * hidden_size` wide.
        cell_size (`int`, defaults to 2048): width of each LSTM's memory cell (ELMo: 4096), projected down to
            `hidden_size` at every step. Equal to `hidden_size` means an LSTM without projection.
        num_hidden_layers (`int`, defaults to 2): LSTM layers per direction (ELMo: 2).
        residual_connections (`bool`, defaults to `True`): add each layer's input to its output from the second
            layer on (ELMo's residual connection between the LSTM layers).
        hidden_dropout (`float`, defaults to 0.1): dropout on the embeddings, between layers and before the softmax.
        initializer_range (`float`, defaults to 0.02): standard deviation of the embedding's normal initialisation
            (the LSTMs keep torch's uniform initialisation).
        tie_word_embeddings (`bool`, defaults to `True`): the softmax of both directions is the input embedding.
    """

    model_type = "hfzoo_bilm"

    vocab_size: int = 8192
    hidden_size: int = 512
    cell_size: int = 2048
    num_hidden_layers: int = 2
    residual_connections: bool = True
    hidden_dropout: float = 0.1
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        try:
            check_field_types(self, inspect.get_annotations(ZooBiLMConfig))
            self._validate_sizes()
            super().__post_init__(**kwargs)
        except (TypeError, ValueError) as error:
            # Loaded from a checkpoint (`from_pretrained` passes its folder as `name_or_path`): name its config file.
            if not kwargs.get("name_or_path"):
                raise
            raise type(error)(f"{os.path.join(kwargs['name_or_path'], 'config.json')}: {error}") from error

    def _validate_sizes(self) -> None:
        for name in ("vocab_size", "hidden_size", "cell_size", "num_hidden_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.cell_size < self.hidden_size:
            raise ValueError(
                f"cell_size ({self.cell_size}) must be >= hidden_size ({self.hidden_size}): the LSTM projects its "
                "cell down to hidden_size; raise cell_size, or set it equal to hidden_size for no projection."
            )
        if not 0.0 <= self.hidden_dropout < 1.0:
            raise ValueError(f"hidden_dropout must be in [0, 1), got {self.hidden_dropout}.")
        if self.initializer_range < 0:
            raise ValueError(f"initializer_range must be >= 0, got {self.initializer_range}.")

    @property
    def projection_size(self) -> int:
        """`nn.LSTM`'s `proj_size`: 0 (no projection) when the cell is as wide as the output."""
        return 0 if self.cell_size == self.hidden_size else self.hidden_size
