"""Model cards from what a run wrote: a `RunRecord` (resolved config, log records, summary, model config) rendered
through an ordered list of `Section`s under Hub metadata.

Nothing in a card is typed by hand, and nothing edits a finished card: a recipe picks its sections (pretraining,
fine-tuning, composition, or adds its own) and `write_card` writes README.md and the loss curve atomically. Cards
sit below the training package (they import presets, the config machinery and adapters only), so the record is
plain data built by the recipe.
"""

from .composition import composition_sections
from .finetuning import FINETUNE_METRICS, FINETUNE_SECTIONS, bottleneck_loading, finetune_metadata, library
from .pretraining import (
    ARCHITECTURE_FIELDS,
    DEFAULT_CORPUS,
    PRETRAINING_SECTIONS,
    architecture_rows,
    describe_objective,
    pretraining_metadata,
    training_data,
)
from .render import (
    CARD,
    LIBRARIES,
    LOCAL_DATA,
    LOSS_CURVE,
    Curve,
    RunRecord,
    Section,
    hub_id,
    markdown_table,
    model_card_data,
    plot_loss_curve,
    plot_losses,
    render_card,
    write_card,
)

__all__ = [
    "ARCHITECTURE_FIELDS", "CARD", "DEFAULT_CORPUS", "FINETUNE_METRICS", "FINETUNE_SECTIONS", "LIBRARIES",
    "LOCAL_DATA", "LOSS_CURVE", "PRETRAINING_SECTIONS", "Curve", "RunRecord", "Section", "architecture_rows",
    "bottleneck_loading", "composition_sections", "describe_objective", "finetune_metadata", "hub_id", "library", "markdown_table",
    "model_card_data", "plot_loss_curve", "plot_losses", "pretraining_metadata", "render_card", "training_data",
    "write_card",
]  # fmt: skip
