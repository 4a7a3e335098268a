"""Fine-tune a pretrained model on a labelled task: `python recipes/finetune.py --config recipes/configs/finetune/sst2.yaml`.

The recipe, step by step, is `hfzoo.commands.finetune.finetune` (hfzoo/commands/finetune.py): config -> examples
(checked row by row) -> tokenizer -> model with the task's head, full or with a PEFT adapter -> features laid out
for the model's family -> AdamW + warmup/cosine -> Accelerator -> loop -> validation metrics -> `metrics.json`,
`predictions.jsonl`, the model or adapter and a model card in `output_dir`. It lives in the package so that
`hfzoo finetune` runs the very same code; this file is the script you launch:

    python recipes/finetune.py --config recipes/configs/finetune/conll2003.yaml --method lora
    python recipes/finetune.py --model runs/bert-small-mlm --task sequence-classification \
        --dataset ../shared/data/rte --text_column sentence1 --text_pair_column sentence2 --max_steps 300
    accelerate launch recipes/finetune.py --config ...   # one process, or per accelerate config

Any config key can be overridden on the command line (`--key value`, `--method_options.r 16`); `--help` lists them
all with their defaults.
"""

from hfzoo.commands.finetune import main
from hfzoo.core.refusals import run_command

if __name__ == "__main__":
    run_command("finetune", None, main)  # as `hfzoo finetune`: a refusal is one line and exit status 2
