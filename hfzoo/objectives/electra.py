"""ELECTRA's pretraining (Clark et al., 2020): a small generator fills masked tokens, the discriminator finds them.

The generator is a narrower masked LM; its samples replace the masked tokens, and the discriminator
(`ZooEncoderForReplacedTokenDetection`) predicts for every token whether it was replaced. Both train together on
`generator MLM loss + discriminator_weight * discriminator loss`; no gradient flows through the sampling. The pair
is a training-time module: what a run keeps is the discriminator (`kept_model`), a normal encoder checkpoint.

Weight sharing follows the paper for a small generator (sec. 3.2): the token, position and token-type embeddings
(`embedding_size` wide, by default the discriminator's hidden size) are the discriminator's. The generator projects
them to its own width (transformers' `ElectraModel.embeddings_project`), and its masked-LM head maps back to the
embedding width and scores against the same token embedding, as transformers' `ElectraForMaskedLM` does with tied
embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.utils import ModelOutput

from ..data.collators import replaced_token_detection_batch
from ..data.collators.common import IGNORE_INDEX
from ..models import ZooEncoderConfig, ZooEncoderForReplacedTokenDetection, ZooEncoderModel
from ..models.component_options import GATED_ACTIVATIONS
from ..models.layers import build_norm
from .training_module import PretrainingModule

# Positions added to the token embeddings live in the shared embeddings; the others act inside attention, where the
# generator keeps its own (parameter-free, or sized to its own heads).
ADDED_POSITIONS = ("learned", "sinusoidal")


def generator_config(config: ZooEncoderConfig, generator_size: float) -> ZooEncoderConfig:
    """The generator's config: the discriminator's, with hidden size, attention heads and intermediate size scaled by
    `generator_size` (the paper's 1/4 for Small and Large, 1/3 for Base), dense, with multi-head attention, and with
    no embedding parts of its own (it reads the discriminator's)."""
    if not 0.0 < generator_size <= 1.0:
        raise ValueError(
            f"config key 'objective_options': generator_size is the generator's width as a fraction of the "
            f"discriminator's, in (0, 1] (ELECTRA: 1/4 or 1/3), got {generator_size}."
        )
    hidden_size = round(config.hidden_size * generator_size)
    heads = max(1, round(config.num_attention_heads * generator_size))
    if hidden_size < 1 or hidden_size % heads:
        raise ValueError(
            f"config key 'objective_options': generator_size={generator_size} gives the generator hidden_size "
            f"{hidden_size} and {heads} attention head(s), which do not divide it; choose a generator_size for which "
            f"{config.hidden_size} x size is a multiple of the scaled head count."
        )
    overrides = {
        "hidden_size": hidden_size,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "intermediate_size": max(1, round(config.intermediate_size * generator_size)),
        "num_experts": 0,
        "type_vocab_size": 0,
        "embedding_norm": False,
        "scale_embeddings": False,
        "add_pooling_layer": False,
        "embedding_size": None,
    }
    if config.position_embedding in ADDED_POSITIONS:
        overrides["position_embedding"] = "none"
    return ZooEncoderConfig.from_dict({**config.to_dict(), **overrides})


def _init_linear(layer: nn.Linear, std: float) -> nn.Linear:
    nn.init.normal_(layer.weight, std=std)
    nn.init.zeros_(layer.bias)
    return layer


class ElectraGenerator(nn.Module):
    """A masked LM of the generator's width that reads and predicts through the discriminator's embeddings."""

    def __init__(self, config: ZooEncoderConfig, embedding_config: ZooEncoderConfig):
        super().__init__()
        std, embedding_size = config.initializer_range, embedding_config.embedding_size or embedding_config.hidden_size
        self.embeddings_project = _init_linear(nn.Linear(embedding_size, config.hidden_size), std)
        self.encoder = ZooEncoderModel(config, add_pooling_layer=False)
        self.encoder.embed_tokens = None  # the discriminator's token embedding stands in for it
        self.dense = _init_linear(nn.Linear(config.hidden_size, embedding_size), std)
        self.act_fn = ACT2FN[GATED_ACTIVATIONS.get(config.activation, config.activation)]
        self.norm = build_norm(embedding_config, embedding_size)
        self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(
        self,
        embeddings: torch.Tensor,
        attention_mask: torch.Tensor,
        masked: torch.Tensor,
        token_embedding: torch.Tensor,
    ) -> torch.Tensor:
        """Vocabulary logits at the `masked` positions only (`[num_masked, vocab]`, row-major order), from the
        shared `embeddings` of the inputs and the shared `token_embedding` matrix."""
        hidden = self.encoder(inputs_embeds=self.embeddings_project(embeddings), attention_mask=attention_mask)
        hidden = self.norm(self.act_fn(self.dense(hidden.last_hidden_state[masked])))
        return F.linear(hidden, token_embedding, self.output_bias)


@dataclass
class ElectraPreTrainingOutput(ModelOutput):
    """`loss` = `generator_loss` + discriminator_weight * `discriminator_loss`. `generator_logits` are the masked
    positions' (`[num_masked, vocab]`); `discriminator_labels` mark the replaced tokens (1), originals (0), padding
    (-100) of the discriminator's input `discriminator_input_ids`.

    `discriminator_constant_loss` is what the discriminator's loss would be if it guessed the batch's share of
    replaced tokens for every token (the entropy of that share), so a discriminator whose loss sits there has learned
    nothing about which tokens were replaced: the sign of a collapsed one, which the loss alone cannot show, since the
    share falls as the generator improves. Not part of `loss`."""

    loss: torch.FloatTensor | None = None
    generator_loss: torch.FloatTensor | None = None
    discriminator_loss: torch.FloatTensor | None = None
    discriminator_constant_loss: torch.FloatTensor | None = None
    generator_logits: torch.FloatTensor | None = None
    discriminator_logits: torch.FloatTensor | None = None
    discriminator_input_ids: torch.LongTensor | None = None
    discriminator_labels: torch.LongTensor | None = None


class ElectraPreTraining(PretrainingModule):
    """Generator + discriminator with the combined loss, trained on `electra_collator` batches.

    Args:
        config: the discriminator's config (a preset of the encoder family).
        generator_size: the generator's hidden size, attention heads and intermediate size as a fraction of the
            discriminator's (default 1/4, ELECTRA-Small's and -Large's; Base used 1/3).
        discriminator_weight: lambda, the discriminator loss's weight (50 in the paper).
        sampling_temperature: the generator's logits are divided by it before sampling (ELECTRA's `temperature`,
            1 in the paper). Above 1 the samples spread to rarer tokens: at small compute a generator soon samples
            about as well as the unigram distribution, whose replacements a young discriminator cannot yet tell
            from the originals; flatter samples keep some it can.
    """

    kept = "discriminator"

    def __init__(
        self,
        config: ZooEncoderConfig,
        generator_size: float = 0.25,
        discriminator_weight: float = 50.0,
        sampling_temperature: float = 1.0,
    ):
        super().__init__()
        self.check_options(config, generator_size, discriminator_weight, sampling_temperature)
        self.discriminator = ZooEncoderForReplacedTokenDetection(config)
        self.generator = ElectraGenerator(generator_config(config, generator_size), config)
        self.discriminator_weight = discriminator_weight
        self.sampling_temperature = sampling_temperature
        self.config = config  # what the run's log and card describe: the model it keeps

    @staticmethod
    def check_options(
        config: ZooEncoderConfig,
        generator_size: float = 0.25,
        discriminator_weight: float = 50.0,
        sampling_temperature: float = 1.0,
    ):
        """Raise, naming the config key, if the options do not make an ELECTRA pair of `config`."""
        generator_config(config, generator_size)
        if not sampling_temperature > 0:
            raise ValueError(
                "config key 'objective_options': sampling_temperature divides the generator's logits before "
                f"sampling and must be > 0 (ELECTRA: 1), got {sampling_temperature}."
            )
        if discriminator_weight < 0:
            raise ValueError(
                "config key 'objective_options': discriminator_weight (lambda) weighs the discriminator's loss "
                f"against the generator's and must be >= 0 (ELECTRA: 50), got {discriminator_weight}."
            )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> ElectraPreTrainingOutput:
        """`labels` are the generator's masked-LM targets (-100 where nothing was masked), as `electra_collator`
        makes them; the discriminator's input and labels are built here from the generator's samples."""
        if labels is None:
            raise ValueError("ElectraPreTraining needs labels: the masked positions' tokens (from electra_collator).")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        masked = labels != IGNORE_INDEX
        token_embedding = self.discriminator.get_input_embeddings().weight
        embeddings = self.discriminator.model.embed(input_ids, token_type_ids)
        generator_logits = self.generator(embeddings, attention_mask, masked, token_embedding)
        generator_loss = F.cross_entropy(generator_logits.float(), labels[masked])
        with torch.no_grad():  # sampling is not differentiable: the discriminator's loss does not reach the generator
            probabilities = torch.softmax(generator_logits.float() / self.sampling_temperature, dim=-1)
            samples = torch.multinomial(probabilities, 1).squeeze(-1)
        sampled_ids = torch.zeros_like(input_ids).masked_scatter(masked, samples)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        detection = replaced_token_detection_batch(batch, sampled_ids)
        discriminated = self.discriminator(**detection)
        with torch.no_grad():
            replaced = detection["labels"][detection["labels"] != IGNORE_INDEX].float().mean()
            constant_loss = F.binary_cross_entropy(replaced, replaced)  # the entropy of the replaced share
        return ElectraPreTrainingOutput(
            loss=generator_loss + self.discriminator_weight * discriminated.loss,
            generator_loss=generator_loss,
            discriminator_loss=discriminated.loss,
            discriminator_constant_loss=constant_loss,
            generator_logits=generator_logits,
            discriminator_logits=discriminated.logits,
            discriminator_input_ids=detection["input_ids"],
            discriminator_labels=detection["labels"],
        )
