"""The `hfzoo` command: `hfzoo presets`, `hfzoo convert`, `hfzoo generate`, `hfzoo serve`, `hfzoo quickstart`, and the
recipes as subcommands.

A refused run (a config key, a file, a row or a checkpoint hfzoo cannot use) ends with one line saying what is wrong
and exit status 2; add --debug anywhere on the command line (or set HFZOO_DEBUG=1) for the traceback instead.
"""

import argparse
import importlib
import importlib.util
import sys

from .core.presets import PRESETS, count_preset_parameters, list_presets, preset_config, preset_family
from .core.refusals import DEBUG_SWITCH, run_command


def presets_table() -> list[dict[str, str]]:
    """One row per preset: the columns `hfzoo presets` prints."""
    rows = []
    for name in list_presets():
        config = preset_config(name)
        if preset_family(name) == "bilm":
            rows.append(_bilm_row(name, config))
            continue
        layers = str(config.num_hidden_layers)
        if getattr(config, "is_encoder_decoder", False):
            layers = f"{config.num_hidden_layers}+{config.num_decoder_layers}"
        activation = config.activation
        if config.num_experts:
            activation += f" moe{config.num_experts}/top{config.num_experts_per_tok}"
        rows.append(
            {
                "name": name,
                "family": preset_family(name),
                "parameters": f"{count_preset_parameters(name) / 1e6:.1f}M",
                "layers": layers,
                "hidden": str(config.hidden_size),
                "heads": str(config.num_attention_heads),
                "kv heads": str(config.num_key_value_heads),
                "positions": config.position_embedding,
                "norm": f"{config.norm_type} ({config.norm_position})",
                "activation": activation,
            }
        )
    return rows


def _bilm_row(name: str, config) -> dict[str, str]:
    """The biLSTM has no attention or norms: its row says what it has instead (LSTM cell -> projection)."""
    return {
        "name": name,
        "family": "bilm",
        "parameters": f"{count_preset_parameters(name) / 1e6:.1f}M",
        "layers": f"{config.num_hidden_layers}x2",
        "hidden": str(config.hidden_size),
        "heads": "-",
        "kv heads": "-",
        "positions": "recurrent",
        "norm": "-",
        "activation": f"lstm {config.cell_size}->{config.hidden_size}",
    }


def format_table(rows: list[dict[str, str]]) -> str:
    headers = list(rows[0])
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in headers}
    lines = ["  ".join(h.ljust(widths[h]) for h in headers), "  ".join("-" * widths[h] for h in headers)]
    lines += ["  ".join(r[h].ljust(widths[h]) for h in headers) for r in rows]
    return "\n".join(lines)


def _presets(args: argparse.Namespace) -> None:
    print(format_table(presets_table()))
    print(f"\n{len(PRESETS)} presets. Build one with hfzoo.preset_config(name, **overrides).")


def _quickstart(args: argparse.Namespace) -> None:
    from .quickstart import run_quickstart

    run_quickstart(output_dir=args.output_dir, scale=args.scale)


CONVERT_HELP = """Convert between hfzoo checkpoints and transformers' own classes (the native types listed below).

  hfzoo convert from-native SOURCE OUT   a native checkpoint folder -> an hfzoo checkpoint computing the same outputs
                                         (any class listed below); the hfzoo config is inferred from the native one
  hfzoo convert to-native SOURCE OUT     an hfzoo checkpoint folder -> the native class, loadable with the plain Auto
                                         classes and no remote code; a component the native class cannot express
                                         (e.g. a mixture of experts in GPT-2) is refused, naming the switch

  hfzoo convert adapter-to-native ADAPTER OUT --base BASE
                                         a PEFT adapter (LoRA or bottleneck) trained on an hfzoo model -> the same
                                         adapter on the native model's modules: PeftModel.from_pretrained(native, OUT)
                                         gives the hfzoo model's outputs (a LoRA on the fused qkv_proj becomes LoRAs on
                                         q, k and v with the same A and B's row blocks)
  hfzoo convert adapter-from-native ADAPTER OUT --base BASE
                                         a PEFT adapter trained on a native model -> the same adapter on the hfzoo model
                                         from-native makes of it (LoRAs on q, k, v join into one on qkv_proj)

Weights are mapped exactly (the round trip native -> hfzoo -> native is bit-identical) and SOURCE's tokenizer
files are copied to OUT. OUT must be new, empty or an earlier output of the same command (--overwrite_output_dir
writes into another folder, keeping its files of other names), and may not be SOURCE, inside it or around it;
only OUT's converted files change, each written atomically. For adapters, BASE is the native or the hfzoo base
model (either side: a folder), and an adapted module without an exact counterpart (a bottleneck on a fused
projection) is refused, naming it."""


ALLOW_OTHER_BASE_HELP = (
    "use an adapter on a base of its model type and sizes whose weights or config.json differ from those it recorded "
    "as its base (hfzoo_base.json), saying so, instead of refusing it"
)


def _convert(args: argparse.Namespace) -> None:
    from .convert.adapters import adapter_from_native, adapter_to_native
    from .convert.api import FROM_NATIVE, from_native, save_converted, to_native
    from .data.corpus import missing_local_path
    from .core.files import check_output_folder

    for folder in (args.source, getattr(args, "base", None)):  # transformers would take a mistyped path for a Hub name
        if folder and missing_local_path(folder):
            raise FileNotFoundError(f"{folder} does not exist")

    overwrite = args.overwrite_output_dir
    if args.direction.startswith("adapter-"):
        mapping = adapter_to_native if args.direction == "adapter-to-native" else adapter_from_native
        mapping(args.source, args.out, args.base, overwrite, allow_other_base=args.allow_other_base)
        print(f"adapter {args.source} mapped to {args.out} ({args.direction.removeprefix('adapter-')})")
        return
    if args.direction == "from-native":
        check_output_folder(args.out, FROM_NATIVE, overwrite=overwrite, inputs=[args.source])  # before loading
        model = from_native(args.source, args.preset)
        save_converted(model, args.out, args.source, FROM_NATIVE, overwrite)
    else:
        model = to_native(args.source, args.out, native_type=args.native_type, overwrite=overwrite)
    print(f"{type(model).__name__} ({model.num_parameters() / 1e6:.1f}M parameters) written to {args.out}")


def _add_convert(commands) -> None:
    from .convert.api import FAMILIES, native_types_help

    native_types = f"Native types (model_type, then the classes converted both ways):\n{native_types_help()}"
    convert = commands.add_parser(
        "convert",
        help="convert checkpoints between hfzoo and transformers' native classes, both directions",
        description=f"{CONVERT_HELP}\n\n{native_types}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    directions = convert.add_subparsers(
        dest="direction", required=True, metavar="{from-native,to-native,adapter-to-native,adapter-from-native}"
    )
    into_zoo = directions.add_parser("from-native", help="a native transformers checkpoint folder -> hfzoo")
    into_zoo.add_argument("--preset", help="import into this preset's config (must fit the weights; default: inferred)")
    to_native_parser = directions.add_parser("to-native", help="an hfzoo checkpoint folder -> native transformers")
    to_native_parser.add_argument(
        "--native-type", choices=list(FAMILIES),
        help="the native family (default: the one the model was imported from, else chosen by its switches)",
    )
    for parser in (into_zoo, to_native_parser):
        parser.add_argument("source", help="folder of the checkpoint to convert")
        parser.add_argument("out", help="folder to write: new, empty, or an earlier output of this command")
    adapter_directions = {
        "adapter-to-native": "a PEFT adapter trained on an hfzoo model -> the native model",
        "adapter-from-native": "a PEFT adapter trained on a native model -> hfzoo",
    }
    for direction, help_text in adapter_directions.items():
        parser = directions.add_parser(direction, help=help_text)
        parser.add_argument("source", help="the PEFT adapter folder (adapter_config.json, adapter_model.safetensors)")
        parser.add_argument("out", help="folder to write the mapped adapter to (as OUT above)")
        parser.add_argument("--base", required=True, help="the native or hfzoo base model folder (either side)")
        parser.add_argument("--allow_other_base", action="store_true", help=ALLOW_OTHER_BASE_HELP)
    for parser in directions.choices.values():
        parser.add_argument("--overwrite_output_dir", action="store_true",
                            help="write into OUT although it holds other files (those of other names are kept)")
    convert.set_defaults(func=_convert)


GENERATE_EPILOG = """examples:
  hfzoo generate runs/pretrain --prompt "The module" --max_new_tokens 20
  hfzoo generate runs/pretrain --adapter a=runs/a-lora --adapter b=runs/b-lora \
      --prompt "x" --prompt "y" --adapter_names a b
  hfzoo generate t5-folder --prompt "translate English to German: Hello" --num_beams 4"""


def _generate(args: argparse.Namespace) -> None:
    from transformers import set_seed

    from .generation import GenerationRequest, generate_text, load_for_generation, parse_adapters

    sampling = {"do_sample": args.do_sample, "num_beams": args.num_beams}
    for key in ("temperature", "top_k", "top_p", "repetition_penalty"):
        if getattr(args, key) is not None:
            sampling[key] = getattr(args, key)
    if args.seed is not None:
        set_seed(args.seed)
    request = GenerationRequest(  # checked before the model loads
        prompts=args.prompt, adapter_names=args.adapter_names, prompt_format=args.prompt_format,
        max_new_tokens=args.max_new_tokens, sampling=sampling, static_cache=args.static_cache, compile=args.compile,
    )
    model, tokenizer, family = load_for_generation(
        args.model, parse_adapters(args.adapter), args.composition, device=args.device,
        allow_other_base=args.allow_other_base,
    )
    generate_text(model, tokenizer, family, request)


def _add_generate(commands) -> None:
    generate = commands.add_parser(
        "generate",
        help="generate text with any hfzoo or native causal / seq2seq model, with adapters per prompt",
        description="Text in, text out: each --prompt's continuation, streamed to the terminal as it comes (one prompt "
        "token by token; several prompts in one batch, each printed when it ends). Adapters are served with "
        "fixed routing: prompts that name different adapters run in one batch.",
        epilog=GENERATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    generate.add_argument("model", help="model folder or Hub name (hfzoo or native transformers; with its tokenizer)")
    generate.add_argument("--prompt", action="append", required=True, help="a prompt (repeat for a batch)")
    generate.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                          help="a PEFT adapter folder (LoRA, IA3, bottleneck) under a name (repeat for several)")
    generate.add_argument("--adapter_names", nargs="+", metavar="NAME",
                          help="the adapter of each prompt, in order ('__base__': none); one name applies to all")
    generate.add_argument("--composition", help="a saved composition folder (hfzoo compose's output), not --adapter")
    generate.add_argument("--prompt_format", choices=["plain", "task"], default="plain",
                          help="task: as hfzoo finetune --task seq2seq formats a decoder's prompt (bos source delim)")
    generate.add_argument("--max_new_tokens", type=int, default=50)
    generate.add_argument("--do_sample", action="store_true", help="sample instead of greedy / beam search")
    generate.add_argument("--temperature", type=float)
    generate.add_argument("--top_k", type=int)
    generate.add_argument("--top_p", type=float)
    generate.add_argument("--repetition_penalty", type=float)
    generate.add_argument("--num_beams", type=int, default=1)
    generate.add_argument("--seed", type=int, help="seed for sampling")
    generate.add_argument("--static_cache", action="store_true", help="transformers' static (preallocated) cache")
    generate.add_argument("--compile", action="store_true", help="static cache + torch.compile'd decoding step")
    generate.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    generate.add_argument("--allow_other_base", action="store_true", help=ALLOW_OTHER_BASE_HELP)
    generate.set_defaults(func=_generate)


SERVE_EPILOG = """examples:
  hfzoo serve runs/pretrain --adapter a=runs/a-lora --adapter b=runs/b-lora --port 8000
  curl localhost:8000/v1/completions -H 'Content-Type: application/json' \
      -d '{"model": "a", "prompt": "The module", "max_tokens": 20, "temperature": 0}'
  hfzoo serve runs/bert --adapter sst2=runs/sst2-lora --adapter ner=runs/conll2003-lora
  curl localhost:8000/v1/classify -H 'Content-Type: application/json' \
      -d '{"model": "sst2", "input": ["a gripping film", "dull and long"]}'"""


def _serve(args: argparse.Namespace) -> None:
    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"hfzoo serve needs the serve extra ({' and '.join(missing)} missing): "
                         "pip install 'hfzoo[serve]'")  # fmt: skip
    for key in ("max_batch_size", "max_queue"):
        if getattr(args, key) < 1:
            raise ValueError(f"--{key} is {getattr(args, key)}: it must be at least 1")
    if args.max_wait_ms < 0:
        raise ValueError(f"--max_wait_ms is {args.max_wait_ms}: it must be 0 or more")
    import uvicorn

    from transformers import AutoTokenizer

    from .generation import check_device, generation_config, load_for_generation, parse_adapters
    from .serving.app import create_app
    from .serving.classification import ClassifyEngine, classifying_task, composition_task, share_weights
    from .serving.scheduler import BatchingEngine
    from .tasks import model_family

    adapters = parse_adapters(args.adapter)
    compositions = parse_adapters(args.composition, "--composition")
    if clash := sorted({args.model} & (set(adapters) | set(compositions)) | (set(adapters) & set(compositions))):
        raise ValueError(f"the name {clash[0]!r} is given to two models (base, --adapter, --composition): name each "
                         "once")  # fmt: skip
    check_device(args.device)
    config = generation_config(args.model)
    family = model_family(config)
    if family == "encoder_decoder":
        raise ValueError(f"{args.model} is an encoder-decoder model: hfzoo serve serves decoders and encoders")
    classifying = {name: path for name, path in adapters.items() if classifying_task(path)}
    generating = {name: path for name, path in adapters.items() if name not in classifying}
    classifying_compositions = {name: path for name, path in compositions.items() if composition_task(path)}
    generating_compositions = {n: p for n, p in compositions.items() if n not in classifying_compositions}
    if family == "encoder" and (generating or generating_compositions):
        names = ", ".join([*generating, *generating_compositions])
        raise ValueError(f"{args.model} is an encoder, which serves classification adapters and compositions only: "
                         f"{names} classifies nothing (by an adapter's task_type, a composition's compose "
                         "run)")  # fmt: skip
    engine, held, decoders = None, [], {}
    options = (args.max_batch_size, args.max_wait_ms, args.max_queue)
    if family == "decoder":
        model, tokenizer, _ = load_for_generation(args.model, generating, device=args.device)
        engine, held = BatchingEngine(model, tokenizer, generating, *options), [model]
        for name, path in generating_compositions.items():
            composed, tokenizer, _ = load_for_generation(args.model, composition=path, device=args.device)
            share_weights(composed, held)
            decoders[name] = BatchingEngine(composed, tokenizer, {}, *options)
            held.append(composed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)  # the classifiers' own: fast tokenizers are not shared
    context = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    classify = ClassifyEngine(args.model, family, tokenizer, args.device, context, held, *options)
    for name, path in classifying.items():
        classify.add(name, path).result()  # a refusal ends the start-up, naming the adapter
    for name, path in classifying_compositions.items():
        classify.add_composition(name, path).result()
    served = [*adapters, *compositions]
    print(f"hfzoo serve: {args.model} with {served} on http://{args.host}:{args.port}", flush=True)
    app = create_app(engine, classify, args.model, context, decoders)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def _add_serve(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve a model and its adapters over HTTP (OpenAI-style completions, classification), batched across "
        "adapters",
        description="An OpenAI-style /v1/completions endpoint whose `model` field names the base or an adapter, and "
        "/v1/classify for classification and tagging adapters (PEFT task_type SEQ_CLS, TOKEN_CLS) of a decoder or an "
        "encoder; requests for different adapters run together, one forward per step. Needs `pip install "
        "'hfzoo[serve]'`.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("model", help="model folder or Hub name (a causal LM or an encoder, with its tokenizer); also "
                       "its served name")  # fmt: skip
    serve.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                       help="a PEFT adapter folder (LoRA, IA3, bottleneck) served under NAME (repeat for several): a "
                       "classification one answers /v1/classify, any other /v1/completions")  # fmt: skip
    serve.add_argument("--composition", action="append", default=[], metavar="NAME=PATH",
                       help="a saved composition (or the hfzoo compose run that trained it) served under NAME "
                       "(repeat for several): one trained to classify answers /v1/classify, any other "
                       "/v1/completions")  # fmt: skip
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max_batch_size", type=int, default=16, help="most prompts decoded together")
    serve.add_argument("--max_wait_ms", type=float, default=10.0,
                       help="how long an idle server waits for more requests to batch with the first")
    serve.add_argument("--max_queue", type=int, default=256,
                       help="most prompts queued or decoding; more are answered 429")
    serve.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    serve.set_defaults(func=_serve)


# Subcommands that run a recipe with all remaining arguments (`hfzoo pretrain --help` lists its keys).
RECIPES = {
    "pretrain": ("hfzoo.commands.pretrain", "pretrain a preset from scratch (recipes/pretrain.py)"),
    "finetune": ("hfzoo.commands.finetune", "fine-tune any checkpoint, fully or with an adapter (recipes/finetune.py)"),
    "compose": ("hfzoo.commands.compose", "train a router or AdapterFusion over task adapters (recipes/compose.py)"),
}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((token for token in argv if token != DEBUG_SWITCH), "hfzoo")
    if command in RECIPES:
        # Recipes parse their own arguments (any config key can be overridden), so hand them all over.
        argv.remove(command)
        run_command(command, argv, importlib.import_module(RECIPES[command][0]).main)
        return
    parser = argparse.ArgumentParser(
        prog="hfzoo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in RECIPES.items():
        commands.add_parser(name, help=help_text, add_help=False)
    commands.add_parser("presets", help="list the model presets").set_defaults(func=_presets)
    _add_convert(commands)
    _add_generate(commands)
    _add_serve(commands)
    quickstart = commands.add_parser("quickstart", help="the end-to-end tour on the embedded default corpus")
    quickstart.add_argument("--output_dir", default="runs/quickstart")
    quickstart.add_argument("--scale", default="full", choices=["full", "smoke"], help="smoke: a few steps per stage, a wiring check")
    quickstart.set_defaults(func=_quickstart)

    def dispatch(argv: list[str]) -> None:
        args = parser.parse_args(argv)
        args.func(args)

    run_command(command, argv, dispatch)


if __name__ == "__main__":
    sys.exit(main())
