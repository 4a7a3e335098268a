"""Train a router or AdapterFusion over task adapters: `python recipes/compose.py --config <a compose YAML>`.

The recipe, step by step, is `hfzoo.training.compose.train_composition` (hfzoo/training/compose.py): config (all of
fine-tuning's keys plus `adapters`, `composition`, `composition_options`, `baseline`) -> examples -> tokenizer ->
base model with a fresh head -> `hfzoo.adapters.compose` (base and adapters frozen; routers or AdapterFusion and the
head trainable) -> fine-tuning's loop -> validation metrics -> `metrics.json`, `predictions.jsonl`, `composition/`,
a model card, and a reload check. A learned composition (soft, hard, fusion) first trains the uniform average of the
same adapters as its baseline. It lives in the package so that `hfzoo compose` runs the very same code:

    python recipes/compose.py --config recipes/configs/compose/stdlib-area-fusion.yaml --composition soft
    python recipes/compose.py --model runs/bert-tiny-mlm --task sequence-classification \
        --train_file runs/data/area/train.csv --validation_file runs/data/area/validation.csv \
        --adapters module=runs/module-lora,area=runs/area-bottleneck --composition average

Any config key can be overridden on the command line (`--key value`, `--composition_options.top_k 2`); `--help`
lists them all with their defaults.
"""

from hfzoo.training.compose import main

if __name__ == "__main__":
    main()
