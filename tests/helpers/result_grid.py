"""The result grid (model_cards/generate_finetune_results.py) at a tiny scale: the overrides that make each of its
runs take seconds instead of the reported lengths."""

TINY = ["--max_steps", "2", "--max_train_samples", "32", "--max_eval_samples", "16", "--per_device_batch_size", "8"]
