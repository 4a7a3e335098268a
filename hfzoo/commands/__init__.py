"""The recipes, each readable top to bottom: `pretrain` (a preset from scratch), `finetune` (a checkpoint on a
labelled task, fully or with an adapter) and `compose` (a router or AdapterFusion over trained adapters).

Each module has its config class, the recipe function and `main(argv)`, which `recipes/<name>.py` and
`hfzoo <name>` call; what they share is in `hfzoo.training`.
"""
