"""GEMM and fused-MoE shapes of a Hugging Face ``config.json`` after tensor-parallel sharding.

``shapes_from_model(config, tp, m_preset="pow2", ...) -> {variant: [shape]}``
``linear_layers(config, tp, ...) -> [{"layer", "n", "k", "variant", ...}]`` (one entry per distinct linear)

Shapes derived from a config are a *starting point*: real servers fuse/split projections differently and
pad M (Hyperloom measured that config-derived shapes covered 0.4 % of the runtime keys), so prefer shapes
mined from logs (shapelog) and use these to pre-tune a model before serving it.

Notation (config keys): h = hidden_size, nh = num_attention_heads, nkv = num_key_value_heads (default nh),
hd = head_dim (default h / nh), I = dense intermediate size, tp = tensor-parallel size.
N = output features of the linear (weight rows), K = input features; a GEMM is (M x K) @ (K x N).
Column-parallel layers shard N by tp; row-parallel layers shard K by tp (vLLM / SGLang layout).

Attention (Llama, Qwen2/3, Qwen3-MoE, Mixtral, Llama-4 text):
  qkv_proj (fused, column-parallel): N = (nh/tp + 2 * kv_per_rank) * hd, K = h,
      kv_per_rank = max(1, nkv // tp)  (KV heads are replicated when nkv < tp, as vLLM does)
  o_proj (row-parallel):             N = h, K = nh * hd / tp
MLA (DeepSeek-V2/V3/R1, Kimi-K2: config has kv_lora_rank), with q = qk_nope_head_dim + qk_rope_head_dim:
  fused_qkv_a_proj (replicated):     N = q_lora_rank + kv_lora_rank + qk_rope_head_dim, K = h
      (vLLM/SGLang fuse q_a_proj and kv_a_proj_with_mqa; ``fuse_qkv_a=False`` gives q_a_proj
      N = q_lora_rank and kv_a_proj_with_mqa N = kv_lora_rank + qk_rope_head_dim instead)
      without q_lora_rank (V2-Lite): q_proj N = nh * q / tp, K = h, plus kv_a_proj_with_mqa
  q_b_proj (column):                 N = nh * q / tp, K = q_lora_rank
  kv_b_proj (column):                N = nh * (qk_nope_head_dim + v_head_dim) / tp, K = kv_lora_rank
  o_proj (row):                      N = h, K = nh * v_head_dim / tp
  (the absorbed W_UK/W_UV batched GEMMs of MLA decode are not listed)
Dense MLP (all layers of dense models; DeepSeek's first ``first_k_dense_replace`` layers; Llama-4 layers
that are not MoE, with I = intermediate_size_mlp):
  gate_up_proj (merged column):      N = 2 * I / tp, K = h
  down_proj (row):                   N = h, K = I / tp
Shared experts (a dense MLP next to the routed experts): I_s = n_shared_experts * moe_intermediate_size
  (DeepSeek), shared_expert_intermediate_size (Qwen2-MoE), intermediate_size (Llama-4, one per MoE layer).
  With ``fuse_shared_experts=True`` (vLLM/SGLang AITER shared-expert fusion) DeepSeek's shared experts are
  instead appended to the MoE: expert = E + n_shared, topk = k + n_shared, and no shared GEMMs are listed.
Routed experts -> one MoE shape per model (variant ``moe_2stages``):
  model_dim = h; inter_dim = I_moe / tp (TP shards every expert's intermediate dim; with ``ep=True`` the
  experts are split across ranks instead and inter_dim = I_moe); expert = number of routed experts
  (n_routed_experts | num_experts | num_local_experts); topk = num_experts_per_tok;
  I_moe = moe_intermediate_size (DeepSeek, Qwen-MoE) or intermediate_size (Llama-4, Mixtral);
  act_type from hidden_act (silu -> ActivationType.Silu, gelu -> ActivationType.Gelu); use_g1u1 = 1 (gated
  gate_up weights); doweight_stage1 = 1 for Llama-4 (router weight applied to the expert input), else 0;
  dtype = torch_dtype (bfloat16 default).
Not listed: embeddings, lm_head and the MoE router (unquantized / not AITER CK GEMMs), norms, vision towers.

Variant and quant fields, from ``quantization_config`` (also read at the top level when the text config is
nested under ``text_config``):
  fp8 with ``weight_block_size`` (DeepSeek-V3, Qwen3-*-FP8)  -> GEMMs ``a8w8_blockscale``
      MoE q_dtype_a = q_dtype_w = fp8, q_type = QuantType.per_1x128 (the value AITER logs at runtime)
  other fp8 (per-tensor/per-channel weights with dynamic per-token activations: ``fp8``, ``fbgemm_fp8``,
      compressed-tensors float 8-bit, i.e. "FP8-Dynamic" checkpoints)  -> GEMMs ``a8w8`` with q_dtype_w = fp8
      MoE q_type = QuantType.per_Token (static per-tensor activation_scheme -> QuantType.per_Tensor)
  compressed-tensors int 8-bit                                    -> ``a8w8`` with q_dtype_w = torch.int8
  no quantization                                                 -> GEMMs ``a16w16`` (bf16; AITER's
      csrc/gemm_a16w16 tuner) with bias False, dtype = outdtype = torch_dtype, scaleab False, bpreshuffle False;
      MoE q_type QuantType.No with q_dtype_a = q_dtype_w = dtype
  anything else raises ValueError naming the quant_method.
  fp8 means torch.float8_e4m3fn (OCP, gfx950) unless ``gfx`` is a gfx94x (torch.float8_e4m3fnuz);
  ``gemm_variant=`` overrides the GEMM variant (e.g. "a8w8_blockscale_bpreshuffle" or "a8w8_bpreshuffle").
  ``modules_to_not_convert`` / ``ignore`` entries naming attention (``self_attn``/``attn``) or
  ``shared_expert`` keep those layers in ``a16w16``.

M: ``m_preset`` (shapelog presets: "pow2" default, "cudagraph", or a list) expands every GEMM (N, K) over M
and the MoE shape over tokens (powers of two 1..32768, what AITER's padded lookup can hit);
``m_preset=None`` returns the shapes without ``m``/``token``.
"""

from __future__ import annotations

from typing import Any

from ..shapelib.shapelog import expand_m, m_sweep
from ..variants import VARIANTS

__all__ = ["shapes_from_model", "linear_layers", "moe_shapes", "model_quant", "read_model", "check_model"]

MOE_VARIANT = next(v.name for v in VARIANTS.values() if v.family == "moe")


def serving_variant(kind: str) -> str | None:
    """The variant whose entry says the runtime serves a model's linears of this quantization kind through it
    (``KernelVariant.model_quant``; "none" = unquantized)."""
    return next((v.name for v in VARIANTS.values() if kind in v.model_quant), None)


def _text_config(config: dict) -> dict:
    cfg = dict(config.get("text_config") or {})
    if not cfg:
        return dict(config)
    for key in ("quantization_config", "compression_config", "torch_dtype"):
        if key not in cfg and key in config:
            cfg[key] = config[key]
    return cfg


def _fp8(gfx: str | None) -> str:
    return "torch.float8_e4m3fnuz" if gfx and gfx.startswith("gfx94") else "torch.float8_e4m3fn"


def _dtype(cfg: dict) -> str:
    d = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
    return f"torch.{d}"


def model_quant(config: dict, gfx: str | None = None) -> dict:
    """{"kind": "block_fp8"|"fp8"|"int8"|"none", "q_dtype", "moe_q_type", "ignore": [..]}."""
    cfg = _text_config(config)
    q = cfg.get("quantization_config") or cfg.get("compression_config")
    if not q:
        return {"kind": "none", "q_dtype": None, "moe_q_type": "QuantType.No", "ignore": []}
    method = str(q.get("quant_method") or q.get("format") or "").lower()
    ignore = list(q.get("modules_to_not_convert") or q.get("ignore") or q.get("ignored_layers") or [])
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8"):
        if q.get("weight_block_size"):
            return {"kind": "block_fp8", "q_dtype": _fp8(gfx), "moe_q_type": "QuantType.per_1x128",
                    "ignore": ignore}
        static = str(q.get("activation_scheme", "dynamic")).lower() == "static"
        return {"kind": "fp8", "q_dtype": _fp8(gfx),
                "moe_q_type": "QuantType.per_Tensor" if static else "QuantType.per_Token", "ignore": ignore}
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = next((g.get("weights") or {} for g in groups.values()), {})
        inputs = next((g.get("input_activations") or {} for g in groups.values()), {}) or {}
        bits, typ = weights.get("num_bits"), str(weights.get("type", "")).lower()
        if bits == 8:
            strategy = str(inputs.get("strategy", "token")).lower()
            dynamic = inputs.get("dynamic", True)
            moe_q = "QuantType.per_Tensor" if (strategy == "tensor" and not dynamic) else "QuantType.per_Token"
            if weights.get("block_structure") or str(weights.get("strategy", "")).lower() == "block":
                return {"kind": "block_fp8", "q_dtype": _fp8(gfx), "moe_q_type": "QuantType.per_1x128",
                        "ignore": ignore}
            if typ == "int":
                return {"kind": "int8", "q_dtype": "torch.int8", "moe_q_type": moe_q, "ignore": ignore}
            return {"kind": "fp8", "q_dtype": _fp8(gfx), "moe_q_type": moe_q, "ignore": ignore}
    raise ValueError(
        f"unsupported quantization_config quant_method {method or '?'!r}: tune-remote derives shapes for "
        "fp8 (block or per-channel), compressed-tensors int8/fp8, or unquantized models")


def _ignored(ignore: list, *patterns: str) -> bool:
    for entry in ignore:
        e = str(entry)
        if any(p in e for p in patterns):
            return True
    return False


def _div(x: int, tp: int, what: str) -> int:
    if x % tp:
        raise ValueError(f"{what} = {x} is not divisible by tp = {tp}")
    return x // tp


def _moe_info(cfg: dict) -> dict | None:
    experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    if not experts:
        return None
    llama4 = "intermediate_size_mlp" in cfg or str(cfg.get("model_type", "")).startswith("llama4")
    inter = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
    return {"experts": int(experts), "topk": int(cfg.get("num_experts_per_tok") or 1), "inter": int(inter),
            "llama4": llama4}


def _layer_kinds(cfg: dict, moe: dict | None) -> tuple[bool, bool]:
    """(has dense-MLP layers, has MoE layers)."""
    n_layers = int(cfg.get("num_hidden_layers") or 1)
    if moe is None:
        return True, False
    if "first_k_dense_replace" in cfg or "n_routed_experts" in cfg:          # DeepSeek
        first = int(cfg.get("first_k_dense_replace") or 0)
        freq = int(cfg.get("moe_layer_freq") or 1)
        moe_layers = [i for i in range(n_layers) if i >= first and i % freq == 0]
    elif moe["llama4"]:
        moe_layers = cfg.get("moe_layers")
        if moe_layers is None:
            step = int(cfg.get("interleave_moe_layer_step") or 1)
            moe_layers = list(range(step - 1, n_layers, step))
    else:                                                                      # Qwen-MoE, Mixtral
        step = int(cfg.get("decoder_sparse_step") or 1)
        only = set(cfg.get("mlp_only_layers") or [])
        moe_layers = [i for i in range(n_layers) if i not in only and (i + 1) % step == 0]
    return len(moe_layers) < n_layers, len(moe_layers) > 0


def linear_layers(config: dict, tp: int, gfx: str | None = None, gemm_variant: str | None = None,
                  fuse_qkv_a: bool = True, fuse_shared_experts: bool = False) -> list[dict]:
    """Distinct (N, K) linears per projection: [{"layer", "n", "k", "variant", "q_dtype_w"?}]."""
    if tp < 1:
        raise ValueError("tp must be >= 1")
    cfg = _text_config(config)
    quant = model_quant(config, gfx)
    h = int(cfg["hidden_size"])
    nh = int(cfg["num_attention_heads"])
    moe = _moe_info(cfg)
    has_dense, has_moe = _layer_kinds(cfg, moe)

    quant_variant = serving_variant(quant["kind"]) if quant["kind"] != "none" else None
    plain_variant = serving_variant("none")
    if gemm_variant and quant_variant:
        quant_variant = gemm_variant
    attn_plain = _ignored(quant["ignore"], "self_attn", ".attn", "attention")
    shared_plain = _ignored(quant["ignore"], "shared_expert")
    out: list[dict] = []

    def add(layer: str, n: int, k: int, quantized: bool = True) -> None:
        if quant_variant and quantized:
            entry = {"layer": layer, "n": n, "k": k, "variant": quant_variant}
            if quant_variant in VARIANTS and "q_dtype_w" in VARIANTS[quant_variant].key_columns:
                entry["q_dtype_w"] = quant["q_dtype"]
        else:
            entry = {"layer": layer, "n": n, "k": k, "variant": plain_variant}
        out.append(entry)

    if "kv_lora_rank" in cfg:                                                   # MLA
        q_lora = cfg.get("q_lora_rank")
        kv_lora = int(cfg["kv_lora_rank"])
        rope = int(cfg["qk_rope_head_dim"])
        nope = int(cfg["qk_nope_head_dim"])
        vhd = int(cfg["v_head_dim"])
        qd = nope + rope
        if q_lora:
            if fuse_qkv_a:
                add("fused_qkv_a_proj", int(q_lora) + kv_lora + rope, h, not attn_plain)
            else:
                add("q_a_proj", int(q_lora), h, not attn_plain)
                add("kv_a_proj_with_mqa", kv_lora + rope, h, not attn_plain)
            add("q_b_proj", _div(nh * qd, tp, "num_heads*qk_head_dim"), int(q_lora), not attn_plain)
        else:
            add("q_proj", _div(nh * qd, tp, "num_heads*qk_head_dim"), h, not attn_plain)
            add("kv_a_proj_with_mqa", kv_lora + rope, h, not attn_plain)
        add("kv_b_proj", _div(nh * (nope + vhd), tp, "num_heads*(qk_nope+v_head)"), kv_lora, not attn_plain)
        add("o_proj", h, _div(nh * vhd, tp, "num_heads*v_head_dim"), not attn_plain)
    else:
        nkv = int(cfg.get("num_key_value_heads") or nh)
        hd = int(cfg.get("head_dim") or h // nh)
        kv_per_rank = max(1, nkv // tp)
        add("qkv_proj", (_div(nh, tp, "num_attention_heads") + 2 * kv_per_rank) * hd, h, not attn_plain)
        add("o_proj", h, _div(nh * hd, tp, "num_attention_heads*head_dim"), not attn_plain)

    if has_dense:
        dense_i = cfg.get("intermediate_size_mlp") if (moe and moe["llama4"]) else cfg.get("intermediate_size")
        dense_i = int(dense_i)
        add("mlp.gate_up_proj", 2 * _div(dense_i, tp, "intermediate_size"), h)
        add("mlp.down_proj", h, _div(dense_i, tp, "intermediate_size"))

    if has_moe:
        shared_i = 0
        if cfg.get("n_shared_experts") and not fuse_shared_experts:
            shared_i = int(cfg["n_shared_experts"]) * int(cfg.get("moe_intermediate_size") or moe["inter"])
        elif cfg.get("shared_expert_intermediate_size"):
            shared_i = int(cfg["shared_expert_intermediate_size"])
        elif moe["llama4"]:
            shared_i = int(cfg["intermediate_size"])
        if shared_i:
            add("shared_experts.gate_up_proj", 2 * _div(shared_i, tp, "shared intermediate"), h, not shared_plain)
            add("shared_experts.down_proj", h, _div(shared_i, tp, "shared intermediate"), not shared_plain)

    # one entry per distinct (variant, n, k[, q_dtype_w]); layer names joined
    merged: dict[tuple, dict] = {}
    for e in out:
        key = (e["variant"], e["n"], e["k"], e.get("q_dtype_w"))
        if key in merged:
            merged[key]["layer"] += "," + e["layer"]
        else:
            merged[key] = dict(e)
    if quant["kind"] == "none" or any(e["variant"] == plain_variant for e in merged.values()):
        dt = _dtype(cfg)
        for e in merged.values():
            if e["variant"] == plain_variant:   # its key columns besides n, k, as `run --nk` fills them in
                e.update({**VARIANTS[plain_variant].nk_defaults, "dtype": dt, "outdtype": dt})
    return list(merged.values())


def moe_shapes(config: dict, tp: int, gfx: str | None = None, ep: bool = False,
               fuse_shared_experts: bool = False) -> list[dict]:
    """The routed-expert MoE shape (without ``token``), or [] for dense models."""
    cfg = _text_config(config)
    moe = _moe_info(cfg)
    if moe is None or not _layer_kinds(cfg, moe)[1]:
        return []
    quant = model_quant(config, gfx)
    dt = _dtype(cfg)
    qd = quant["q_dtype"] or dt
    experts, topk = moe["experts"], moe["topk"]
    if fuse_shared_experts and cfg.get("n_shared_experts"):
        experts += int(cfg["n_shared_experts"])
        topk += int(cfg["n_shared_experts"])
    act = str(cfg.get("hidden_act") or "silu").lower()
    act_type = "ActivationType.Gelu" if act.startswith("gelu") else "ActivationType.Silu"
    return [{
        "model_dim": int(cfg["hidden_size"]),
        "inter_dim": moe["inter"] if ep else _div(moe["inter"], tp, "moe intermediate size"),
        # EP: each rank holds experts/tp whole experts; fused_moe keys the lookup with its local count
        # (w1.shape[0]; gemm_moe_ep_tune.py: "expert as the local expert count") and `topk -= int(is_ep)` (#3999)
        "expert": _div(experts, tp, "experts") if ep else experts,
        "topk": topk - 1 if ep else topk,
        "act_type": act_type,
        "dtype": dt,
        "q_dtype_a": qd,
        "q_dtype_w": qd,
        "q_type": quant["moe_q_type"],
        "use_g1u1": 1,
        "doweight_stage1": 1 if moe["llama4"] else 0,
    }]


def shapes_from_model(config: dict, tp: int, m_preset: Any = "pow2", gfx: str | None = None,
                      gemm_variant: str | None = None, ep: bool = False, fuse_qkv_a: bool = True,
                      fuse_shared_experts: bool = False) -> dict[str, list[dict]]:
    """{variant: [shape]} for the model's linears and routed experts at tensor parallelism ``tp``."""
    out: dict[str, list[dict]] = {}
    for e in linear_layers(config, tp, gfx=gfx, gemm_variant=gemm_variant, fuse_qkv_a=fuse_qkv_a,
                           fuse_shared_experts=fuse_shared_experts):
        shape = {k: v for k, v in e.items() if k not in ("layer", "variant")}
        out.setdefault(e["variant"], []).append(shape)
    moe = moe_shapes(config, tp, gfx=gfx, ep=ep, fuse_shared_experts=fuse_shared_experts)
    if moe:
        out[MOE_VARIANT] = moe
    if m_preset is None:
        return out
    expanded: dict[str, list[dict]] = {}
    for variant, shapes in out.items():
        if variant == MOE_VARIANT:
            expanded[variant] = expand_m([{"token": 1, **s} for s in shapes], "pow2", keep_logged=False,
                                         tokens=m_sweep(m_preset))
        else:
            expanded[variant] = expand_m([{"m": 1, **s} for s in shapes], m_preset, keep_logged=False)
    return expanded


def read_model(path: str) -> dict:
    """A model's config.json, or one line (exit 2) saying why not."""
    import json
    from pathlib import Path

    from ..errors import UsageError
    try:
        cfg = json.loads(Path(path).read_text())
    except ValueError as exc:
        raise UsageError(f"--model {path} is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"--model {path} is not a model config (a JSON object)")
    return cfg


def check_model(config: dict, tp: int, path: str, **kw) -> None:
    """``config`` at ``tp`` gives shapes, or one line (exit 2) saying why not (a missing key, a head count not
    divisible by tp, an unknown quant_method), before anything runs on a node."""
    from ..errors import UsageError
    try:
        shapes_from_model(config, tp, m_preset=None, **kw)
        return
    except KeyError as exc:
        problem = f"no {exc.args[0]!r} in the config"
    except (ValueError, TypeError, AttributeError) as exc:
        problem = str(exc)
    raise UsageError(f"--model {path} at --tp {tp}: {problem}",
                     hint="a Hugging Face config.json of the served model, and the server's --tp")
