"""The pretraining model card comes from the run log and the configs alone.
"""

from __future__ import annotations

import math

import yaml

import hfzoo
from hfzoo.card_writing import (
    LOSS_CURVE,
    PRETRAINING_SECTIONS,
    RunRecord,
    describe_objective,
    pretraining_metadata,
    render_card,
    write_card,
)
from hfzoo.commands.pretrain import PretrainConfig
from hfzoo.core.recipe_config import from_dict
from hfzoo.training import get_objective
from hfzoo.training.logging import RunLogger, read_log


def test_model_card_comes_from_the_log_and_the_configs(tmp_path):
    values = {"preset": "llama-tiny", "objective": "clm", "max_steps": 3, "dataset": "wikitext"}
    config = from_dict(PretrainConfig, values)
    model_config = hfzoo.preset_config("llama-tiny", vocab_size=300)
    log = RunLogger(tmp_path, enabled=True, max_steps=3, tensorboard=False)
    log.write(
        "start",
        step=0,
        num_processes=2,
        distributed_type="MULTI_CPU",
        device="cpu",
        mixed_precision="no",
        global_batch_size=16,
        parameters=123456,
    )
    for step, loss in enumerate((6.0, 5.5, 5.1), 1):
        log.train(step, loss=loss, lr=1e-3, grad_norm=1.0, tokens_per_s=1000.0 * step, tokens_seen=512 * step)
    log.write("eval", step=3, eval_loss=5.0, perplexity=math.exp(5.0), eval_targets=100)
    log.write("end", step=3, tokens_seen=1536, elapsed=4.2)
    log.close()

    objective = describe_objective(get_objective("clm", "llama-tiny"))
    record = RunRecord(tmp_path.name, config.to_dict(), read_log(tmp_path), objective, model_config.to_dict())
    card_path = write_card(tmp_path, record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    card = card_path.read_text()
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert metadata["library_name"] == "transformers" and metadata["pipeline_tag"] == "text-generation"
    assert metadata["datasets"] == ["wikitext"]
    assert {"hfzoo", "llama-tiny", "decoder", "clm"} <= set(metadata["tags"])
    result = metadata["model-index"][0]["results"][0]
    assert result["task"]["type"] == "text-generation" and result["dataset"]["name"] == "wikitext"
    metrics = {m["type"]: m["value"] for m in result["metrics"]}
    assert metrics == {"perplexity": round(math.exp(5.0), 4), "loss": 5.0}
    for field in ("num_hidden_layers", "hidden_size", "num_key_value_heads", "position_embedding"):
        assert f"| {field} | {getattr(model_config, field)} |" in card
    assert "| parameters | 123,456 |" in card and "| processes | 2 (MULTI_CPU, cpu) |" in card
    assert "| tokens seen | 1,536 |" in card and "num_experts" not in card  # dense model: no MoE rows
    assert "trust_remote_code=True" in card and "import hfzoo" in card
    assert (tmp_path / LOSS_CURVE).read_bytes()[:4] == b"\x89PNG"
    assert card == render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))
