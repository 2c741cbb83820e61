"""`transformers` decoder layers at a decode step, for the examples, tests and benchmarks.

`decode_step(family, dims, batch, context, dtype)` builds one decoder layer of a model
family ("llama", "qwen2", "mistral") from `transformers` with random weights, in eval mode,
and returns `(step, inputs)`: `step(hidden, cos, sin, past_k, past_v)` runs the layer on one
new token per sequence with a KV cache of `context` positions (a `DynamicCache` filled with
`past_k`, `past_v`) and returns `(out, keys, values)`, the layer's output and the updated
cache. `cos`/`sin` are the rotary embeddings of the new position (computed by the model's
rotary module, outside the layer, as in the model). Attention is `transformers`' "eager"
implementation (see docs/torch.md: its "sdpa" one decomposes into ops kn does not take).
"""
from __future__ import annotations

import numpy as np
import torch

LLAMA3_8B = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 intermediate_size=14336)
QWEN2_7B = dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4, head_dim=128,
                intermediate_size=18944)
SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128)


def _family(name: str):
    if name == "llama":
        from transformers import LlamaConfig as C
        from transformers.models.llama import modeling_llama as M
        return C, M.LlamaDecoderLayer, M.LlamaRotaryEmbedding, M.LlamaRMSNorm, M.LlamaMLP
    if name == "qwen2":
        from transformers import Qwen2Config as C
        from transformers.models.qwen2 import modeling_qwen2 as M
        return C, M.Qwen2DecoderLayer, M.Qwen2RotaryEmbedding, M.Qwen2RMSNorm, M.Qwen2MLP
    if name == "mistral":
        from transformers import MistralConfig as C
        from transformers.models.mistral import modeling_mistral as M
        return C, M.MistralDecoderLayer, M.MistralRotaryEmbedding, M.MistralRMSNorm, M.MistralMLP
    raise ValueError(f"unknown model family {name!r} (llama, qwen2, mistral)")


def config(family: str, dims: dict):
    C = _family(family)[0]
    cfg = C(num_hidden_layers=1, **dims)
    cfg._attn_implementation = "eager"
    return cfg


class DecodeStep(torch.nn.Module):
    """One decoder layer at a decode step with an explicit KV cache (see the module doc)."""

    def __init__(self, layer, cfg):
        super().__init__()
        self.layer = layer
        self.cfg = cfg

    def forward(self, hidden, cos, sin, past_k, past_v):
        cache = new_cache(self.cfg, past_k, past_v)
        out = self.layer(hidden, position_embeddings=(cos, sin), use_cache=True, **{_CACHE_ARG: cache})
        if isinstance(out, tuple):  # transformers 4.x returns (hidden_states, ...)
            out = out[0]
        return (out,) + cache_tensors(cache)


def _cache_arg() -> str:
    """The decoder layers' name of the cache argument: `cache` since transformers 5.24,
    `past_key_values` before, `past_key_value` in 4.x. (A wrong name is not an error: the
    layer takes **kwargs and silently runs without the cache.)"""
    import inspect

    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    params = inspect.signature(LlamaDecoderLayer.forward).parameters
    return next(n for n in ("cache", "past_key_values", "past_key_value") if n in params)


try:
    _CACHE_ARG = _cache_arg()
except ImportError:  # no transformers: the module still imports (its users say what is missing)
    _CACHE_ARG = "past_key_values"


def new_cache(cfg, keys, values):
    """A `DynamicCache` holding `keys`, `values` for layer 0."""
    from transformers.cache_utils import DynamicCache

    try:
        cache = DynamicCache(config=cfg)
    except TypeError:  # transformers 4.x
        cache = DynamicCache()
    cache.update(keys, values, 0)
    return cache


def cache_tensors(cache):
    """Layer 0's (keys, values) of a `DynamicCache` (transformers 5.x or 4.x)."""
    if hasattr(cache, "layers"):
        return cache.layers[0].keys, cache.layers[0].values
    return cache.key_cache[0], cache.value_cache[0]


def _randn(rng, shape, std=1.0):
    # numpy's generator: the same values on every machine and torch version (the GPU
    # benchmark rebuilds the weights from the seed)
    return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32) * np.float32(std))


def layer(family: str, dims: dict, dtype=torch.float32, seed: int = 0):
    """A decoder layer with random weights, eval mode: matrices and biases normal with std
    0.02 (transformers' init), norm gains uniform in [0.5, 1.5]."""
    cfg = config(family, dims)
    lay = _family(family)[1](cfg, 0)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in sorted(lay.named_parameters()):
            if "norm" in name:
                p.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, tuple(p.shape)).astype(np.float32)))
            else:
                p.copy_(_randn(rng, tuple(p.shape), 0.02))
    return lay.eval().to(dtype), cfg


def decode_inputs(family: str, cfg, batch: int, context: int, dtype=torch.float32, seed: int = 1):
    """(hidden, cos, sin, past_k, past_v) for one new token after `context` cached ones."""
    rng = np.random.default_rng(seed)
    hidden = _randn(rng, (batch, 1, cfg.hidden_size)).to(dtype)
    rot = _family(family)[2](config=cfg)
    cos, sin = rot(hidden, torch.full((batch, 1), context))
    kv = (batch, cfg.num_key_value_heads, context, cfg.head_dim)
    past_k = _randn(rng, kv).to(dtype)
    past_v = _randn(rng, kv).to(dtype)
    return [hidden, cos.to(dtype), sin.to(dtype), past_k, past_v]


def decode_step(family: str, dims: dict, batch: int, context: int, dtype=torch.float32, seed: int = 0):
    lay, cfg = layer(family, dims, dtype, seed)
    return DecodeStep(lay, cfg).eval(), decode_inputs(family, cfg, batch, context, dtype, seed + 1)


def norm_and_mlp(family: str, dims: dict, dtype=torch.float32, seed: int = 0):
    """The family's RMSNorm and MLP modules, random weights, eval mode."""
    _, _, _, Norm, MLP = _family(family)
    cfg = config(family, dims)
    norm = Norm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    mlp = MLP(cfg)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, norm.weight.shape).astype(np.float32)))
        for _, p in sorted(mlp.named_parameters()):
            p.copy_(_randn(rng, tuple(p.shape), 0.02))
    return norm.eval().to(dtype), mlp.eval().to(dtype)
