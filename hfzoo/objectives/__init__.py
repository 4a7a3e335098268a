"""Pretraining objectives, as `hfzoo.tasks` holds the fine-tuning tasks: the table that ties each objective to
its collator, Auto class and family (`objective`), and ELECTRA's generator-discriminator pair (`electra`), the one
objective that trains a module other than the model it keeps.
"""

from .objective import OBJECTIVES, Objective, get_objective

__all__ = ["OBJECTIVES", "Objective", "get_objective"]
