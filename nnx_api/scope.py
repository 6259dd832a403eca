"""What NNx documents that this implementation leaves out, by name.

These names can be imported (``from nnx_api import NNTransformerParams``, ``from
nnx_api.nn.net.graph_conv_nn import GraphConvNN``), so a script or test module that merely
imports one still loads; *using* one — calling it, reading an attribute, ``Nets.GRAPH_CONV(...)``
— raises :class:`OutOfScopeError` naming the scope, instead of an ``AttributeError`` that would
look like a typo. ``isinstance(x, placeholder)`` is simply False. ``docs/nnx-compat.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from nnx_core.errors import OutOfScopeError

GRAPH = "graph nets"
LM = "transformers and language-model helpers"
PEFT = "LoRA and the other adapter (PEFT) methods"
QUANT = "quantisation"
GGUF = "GGUF / Ollama export"
MOE = "mixture-of-experts nets"
PARADIGMS = "the training paradigms beyond supervised learning and distillation (diffusion, JEPA, DPO, contrastive)"
SURGERY = "model surgery and pruning"
EXTRAS = "calibration, abstention, run bundles, provenance manifests and embedding export"
PROVIDERS = "the NLI and Jev decision providers (FixedHeadProvider answers from a trained model)"
HUB = "the Hugging Face Hub (save_pretrained / push_to_hub / from_pretrained)"
SPLITS = "split manifests (data_splits)"
PREPROCESSING = "fitted preprocessing (preprocessing)"
TRANSFORMS = "replayable transform recipes (LoRA adapters and model surgery: low-rank factorisation)"
VIZ = "the visualisation helpers of NNx's viz extras (torchinfo, captum, netron)"

SCOPES: dict[str, str] = {
    **dict.fromkeys(["GraphNNBase", "GraphConvNN", "GraphSageNN", "GraphAttNN", "NNGraphDataset", "graph_tasks",
                     "link_tasks"], GRAPH),
    **dict.fromkeys(["TransformerNN", "NNTransformerParams", "NNTransformerParamsBuilder", "NNTokenizerParams",
                     "train_bpe", "GenerativeNNModel", "ViTNN", "ViTBlock", "NNViTParams", "LogitsChain",
                     "LogitsChainBuilder", "LogitsProcessor", "TemperatureScaling", "TopKFilter", "TopPFilter",
                     "RepetitionPenalty", "apply_chain", "sample_next_token", "OrderedLogitsPipeline", "generation",
                     "lm_tasks"], LM),
    **dict.fromkeys(["LoRALinear", "apply_lora_to", "save_lora_weights", "load_lora_weights", "DoRALinear",
                     "apply_dora_to", "IA3Linear", "apply_ia3_to", "PrefixTuner", "PromptTuner", "AdapterLayer",
                     "peft"], PEFT),
    **dict.fromkeys(["quantize_int8", "qat_train_step_factory", "QATLifecycleCallback", "quantize"], QUANT),
    **dict.fromkeys(["interop"], GGUF),
    **dict.fromkeys(["FeedFwdMoENN", "NNMoEParams", "MoELinear", "moe_train_step_factory"], MOE),
    **dict.fromkeys(["DiffusionMLP", "DiffusionObjective", "NoiseSchedule", "NoiseSchedulers", "diffusion_objective",
                     "diffusion_train_step_factory", "sample", "diffusion", "jepa_objective", "jepa_train_step_factory",
                     "JEPAObjective", "JEPAPredictor", "JEPATrainStep", "build_target_encoder", "update_ema",
                     "random_block_mask", "dpo_train_step_factory", "simclr_train_step_factory", "nt_xent_loss",
                     "text_contrastive_train_step_factory", "embeddings", "NNPreferenceDataset",
                     "feature_kd_train_step_factory", "born_again_train", "mixup_train_step_factory",
                     "cutmix_train_step_factory"], PARADIGMS),
    **dict.fromkeys(["widen", "deepen", "drop_layer", "low_rank_factorize", "expand_embedding", "surgery", "prune"],
                    SURGERY),
    **dict.fromkeys(["calibration", "abstention", "bundles", "provenance"], EXTRAS),
    "transforms": TRANSFORMS,
}
"""NNx's public names that are out of scope here, and the scope each falls in."""


def refuse(name: str, scope: str | None = None) -> NoReturn:
    """Raise ``OutOfScopeError`` for NNx's ``name``."""
    scope = scope or SCOPES.get(name.rsplit(".", 1)[-1], "this feature")
    raise OutOfScopeError(f"{name}: out of scope of this implementation of NNx's API — {scope} (see docs/nnx-compat.md)")


class OutOfScope(type):
    """The type of an out-of-scope placeholder: calling it, subclass instances included, or
    reading any public attribute raises ``OutOfScopeError`` naming the scope."""

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(cls.__qualname__, cls.__scope__)

    def __getattr__(cls, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        refuse(f"{cls.__qualname__}.{name}", cls.__scope__)

    def __repr__(cls) -> str:
        return f"<out of scope: {cls.__qualname__} ({cls.__scope__})>"


def placeholder(name: str, scope: str | None = None) -> type:
    """The importable stand-in of NNx's out-of-scope ``name`` (``nnx.nn.net.graph_conv_nn.GraphConvNN``)."""
    short = name.rsplit(".", 1)[-1]
    scope = scope or SCOPES.get(short, "this feature")
    cls = OutOfScope(short, (), {"__scope__": scope, "__doc__": f"Out of scope here: {scope} (docs/nnx-compat.md)."})
    cls.__qualname__ = name
    return cls


def refusing_method(name: str, scope: str) -> Callable[..., NoReturn]:
    """A method (or class-level function) of NNx's ``name`` that raises ``OutOfScopeError``."""

    def method(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(name, scope)

    method.__name__ = name.rsplit(".", 1)[-1]
    method.__doc__ = f"Out of scope here: {scope} (docs/nnx-compat.md)."
    return method


def refusing_module(module: str, scope: str) -> Callable[[str], type]:
    """A module ``__getattr__`` giving a placeholder for every public name of NNx's ``module``."""

    def getattr_(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{module}.{name}", scope)

    return getattr_
