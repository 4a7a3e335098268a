"""What every layer above needs, importing only `hfzoo.models` and `hfzoo.integrations`: the preset table
(`presets`), registering hfzoo's classes with transformers' Auto classes and PEFT (`registration`), recipe configs
(`recipe_config`), how every command refuses bad input (`refusals`), atomic writes, output folders and the cache
folder (`files`), paths as run records write them (`recorded_paths`), and the CPU weight layouts hfzoo applies to the
models it runs (`cpu_layout`).
"""
