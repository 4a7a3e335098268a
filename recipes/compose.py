"""Train a router or AdapterFusion over task adapters: `python recipes/compose.py --config <a compose YAML>`.

The recipe, step by step, is `hfzoo.commands.compose.run_composition` (hfzoo/commands/compose.py): config (the
fine-tuning recipe's sections `data`, `training`, `checkpoints`, `run`, plus `adapters`, `strategy`,
`strategy_options`, `baseline`) -> examples -> tokenizer -> base model with a fresh head -> `hfzoo.adapters.compose`
(base and adapters frozen; routers or AdapterFusion and the head trainable) -> AdamW + warmup/cosine -> Accelerator
-> checkpoints and resume -> the loop -> validation metrics -> `metrics.json`, `predictions.jsonl`, `composition/`,
a model card, and a reload check. A learned composition (soft, hard, fusion) first trains the uniform average of the
same adapters as its baseline. It lives in the package so that `hfzoo compose` runs the very same code:

    python recipes/compose.py --config recipes/configs/compose/stdlib-area-fusion.yaml --strategy soft
    python recipes/compose.py --model runs/bert-tiny-mlm --task sequence-classification \
        --train_file runs/data/area/train.csv --validation_file runs/data/area/validation.csv \
        --adapters module=runs/module-lora,area=runs/area-bottleneck --strategy average

Any config key can be overridden on the command line (`--key value`, `--strategy_options.top_k 2`); `--help`
lists them all with their defaults.
"""

from hfzoo.commands.compose import main
from hfzoo.core.refusals import run_command

if __name__ == "__main__":
    run_command("compose", None, main)  # as `hfzoo compose`: a refusal is one line and exit status 2
