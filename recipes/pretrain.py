"""Pretrain an hfzoo preset from scratch: `python recipes/pretrain.py --config recipes/configs/gpt-small-clm.yaml`.

The recipe, step by step, is `hfzoo.commands.pretrain.pretrain` (hfzoo/commands/pretrain.py): config ->
corpus -> tokenizer -> collator -> model -> AdamW + warmup/cosine -> Accelerator -> loop (eval and
atomic checkpoints every N steps) -> model + tokenizer + model card in `output_dir`. It lives in the
package so that `hfzoo pretrain` runs the very same code; this file is the script you launch:

    python recipes/pretrain.py --config recipes/configs/gpt-small-clm.yaml --max_steps 200
    python recipes/pretrain.py --preset llama-tiny --objective clm --output_dir runs/llama-tiny
    accelerate launch recipes/pretrain.py --config ...                      # one process, or per accelerate config
    accelerate launch --config_file recipes/configs/accelerate/ddp.yaml recipes/pretrain.py --config ...
    torchrun --nproc_per_node 2 recipes/pretrain.py --config ...            # 2 processes: GPUs, or CPU with gloo
    torchrun --nproc_per_node 2 recipes/pretrain.py --config ... --sharding fsdp   # sharded (FSDP2), same on CPU
    python recipes/pretrain.py --config ... --resume                        # continue after a crash, exactly

Any config key can be overridden on the command line (`--key value`, `--model.hidden_dropout 0`);
`--help` lists them all with their defaults.
"""

from hfzoo.commands.pretrain import main
from hfzoo.core.refusals import run_command

if __name__ == "__main__":
    run_command("pretrain", None, main)  # as `hfzoo pretrain`: a refusal is one line and exit status 2
