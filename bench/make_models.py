"""make_models.py - writes the benchmark's checkpoints: for one family, transformers' own model
class with random weights at a mid-size configuration (the released model's widths - hidden size,
heads, head dims, expert width, top-k - cut to 4 blocks, 32 routed experts and a 32768-token
vocabulary; DeepSeek-V4 keeps 16 experts, since transformers builds its fp32 model of 32 in more
than this 24 GiB machine's memory), saved with save_pretrained once in fp32 and once in bf16 (the
same weights rounded).

    python make_models.py FAMILY OUT_DIR [--scale mid|small] [--layout hf|release]

FAMILY is minimax_m2, mimo_v2_flash, kimi_linear or deepseek_v4. OUT_DIR receives fp32/ and
bf16/. --scale small divides every width by 8 (a quick check of the benchmark itself).

--layout release also writes OUT_DIR/release/: the same random model in the layout and encoding
its family's release ships, with that release's config.json spelling:
  minimax_m2     hub names (block_sparse_moe, per-expert w1/w3/w2); every attention projection and
                 expert FP8 e4m3 with an F32 `weight_scale_inv` per 128x128 block; router bias F32;
                 router gate, embeddings, norms and lm_head BF16; quantization_config
  mimo_v2_flash  hub names and config keys; q/k/v, dense MLP and experts FP8 (128x128, F32 scales),
                 the full-attention blocks' k_proj/v_proj quantised per key/value head over each
                 head's fused [key rows; value rows] padded to whole blocks (the first blocks' scales
                 in k_proj's grid, the rest in v_proj's: sglang-jax pull request 969); sliding
                 blocks plain; o_proj, norms, sinks, embeddings, lm_head BF16; router F32
  deepseek_v4    DeepSeek's native names (layers.N.attn.wq_a.weight, ...); attention projections,
                 the indexer's query projection and the shared expert FP8 with an E8M0 `.scale`
                 per 128x128 block; routed experts FP4 e2m1 packed two a byte (I8 [out, in/2]) with
                 an E8M0 `.scale` per 32 inputs; hyper-connection parameters, sinks, position
                 biases and router bias F32; tid2eid I64; the rest BF16
  kimi_linear    the release's names and config spelling, BF16 (A_log, dt_bias and the router
                 bias F32)
Quantised weights are written one shard per block (with model.safetensors.index.json) so that
only one block's copies are in memory at a time. fp32/ and bf16/ then hold what transformers runs
on the SAME weights: every tensor as the release file decodes it (FP8/FP4 dequantised in float32,
per head for MiMo's key/value projections; BF16 ones upcast), in transformers' layout - in float32,
and rounded from that to bfloat16. The name conversions, quantisers and config spellings are the
test fixtures' (tests/fixtures/make_fixtures.py).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

VOCAB = 32768
EXPERTS = 32


def minimax_m2(s: int):
    from transformers import MiniMaxM2Config
    # MiniMax-M2: hidden 3072, 48 query / 8 key-value heads of 128, rotary on half of each head,
    # experts of width 1536, top-8 (of 256 in the release)
    return MiniMaxM2Config(vocab_size=VOCAB, hidden_size=3072 // s, num_attention_heads=48 // s,
                           num_key_value_heads=8 // s, head_dim=128, intermediate_size=1536 // s,
                           num_hidden_layers=4, num_local_experts=EXPERTS, num_experts_per_tok=8,
                           rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
                           rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096)


def mimo_v2_flash(s: int):
    from transformers import MiMoV2FlashConfig
    # MiMo-V2-Flash: hidden 4096, 64 heads (q/k 192, v 128), 4 key-value heads on full blocks,
    # window 128 with sinks on sliding ones, a dense first block of width 16384, experts of width
    # 2048, top-8. The small scale keeps 2 key/value heads on full blocks: with one, a per-head
    # FP8 key/value grid (--layout release) has the same shape as a plain one and reads ambiguously
    theta = {"full_attention": 5e6, "sliding_attention": 1e4}
    return MiMoV2FlashConfig(vocab_size=VOCAB, num_hidden_layers=4, hidden_size=4096 // s, num_attention_heads=64 // s,
                             num_key_value_heads=max(4 // s, 2), head_dim=192, v_head_dim=128, sliding_window=128,
                             layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                             mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
                             intermediate_size=16384 // s, moe_intermediate_size=2048 // s,
                             n_routed_experts=EXPERTS, num_experts_per_tok=8, n_group=1, topk_group=1,
                             routed_scaling_factor=1.0, norm_topk_prob=True, attention_value_scale=0.707,
                             rope_parameters={k: {"rope_type": "default", "rope_theta": v, "partial_rotary_factor": 0.334}
                                              for k, v in theta.items()},
                             rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096)


def kimi_linear(s: int):
    from transformers import KimiLinearConfig
    # Kimi-Linear-48B-A3B: hidden 2304, three KDA blocks per latent-attention block, 32 heads of
    # 128, latent rank 512, a dense first block of width 9216, experts of width 1024, top-8, one
    # shared expert
    return KimiLinearConfig(vocab_size=VOCAB, num_hidden_layers=4, hidden_size=2304 // s, num_attention_heads=32 // s,
                            num_key_value_heads=32 // s, q_lora_rank=None, kv_lora_rank=512 // s,
                            qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                            linear_num_heads=32 // s, linear_head_dim=128, linear_conv_kernel_dim=4,
                            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
                            intermediate_size=9216 // s, moe_intermediate_size=1024 // s,
                            num_local_experts=EXPERTS, num_experts_per_tok=8, n_shared_experts=1,
                            n_group=1, topk_group=1, routed_scaling_factor=2.446, norm_topk_prob=True,
                            rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096)


def deepseek_v4(s: int):
    from transformers import DeepseekV4Config
    # DeepSeek-V4-Flash: hidden 4096, 64 heads of 512 (rotary on the last 64), query rank 1024,
    # 8 output groups of rank 1024, window 128, 4 residual streams; blocks: two sliding, one
    # compressed-sparse (ratio 4, indexer of 64 heads x 128, top 512), one heavily compressed
    # (ratio 128); hash routing on the first three; experts of width 2048, top-6, one shared
    return DeepseekV4Config(vocab_size=VOCAB, num_hidden_layers=4, hidden_size=4096 // s, num_attention_heads=64 // s,
                            num_key_value_heads=1, head_dim=512, partial_rotary_factor=64 / 512,
                            q_lora_rank=1024 // s, o_groups=8 // min(s, 8), o_lora_rank=1024 // s,
                            sliding_window=128, hc_mult=4,
                            layer_types=["sliding_attention", "sliding_attention", "compressed_sparse_attention",
                                         "heavily_compressed_attention"],
                            mlp_layer_types=["hash_moe", "hash_moe", "hash_moe", "moe"],
                            index_n_heads=64 // s, index_head_dim=128, index_topk=512,
                            n_routed_experts=EXPERTS // 2, num_experts_per_tok=6, n_shared_experts=1,
                            moe_intermediate_size=2048 // s, routed_scaling_factor=1.5, swiglu_limit=10.0,
                            rope_theta=10000, compress_rope_theta=160000,
                            rope_parameters={"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                                             "beta_fast": 32, "beta_slow": 1},
                            max_position_embeddings=16 * 65536, num_nextn_predict_layers=0,
                            rms_norm_eps=1e-6, tie_word_embeddings=False)


FAMILIES = {"minimax_m2": minimax_m2, "mimo_v2_flash": mimo_v2_flash, "kimi_linear": kimi_linear,
            "deepseek_v4": deepseek_v4}


# ---- the release layouts -------------------------------------------------------------------------


def fixtures():
    """tests/fixtures/make_fixtures.py as a module (its quantisers, name conversions, configs)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
    import make_fixtures

    return make_fixtures


@contextlib.contextmanager
def module_globals(mod, **values):
    """Temporarily replaces module-level constants (the fixtures' config writers read their
    dimensions from them)."""
    saved = {k: getattr(mod, k) for k in values}
    for k, v in values.items():
        setattr(mod, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(mod, k, v)


def layer_of(name: str) -> int | None:
    """The block index of a tensor name (transformers', hub or native spelling), None at top level."""
    m = re.match(r"(?:model\.)?layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def renumber(tensors: dict, src: int, dst: int) -> dict:
    """The same tensors with block src's names moved to block dst."""
    pat = re.compile(r"^((?:model\.)?layers\.)%d\." % src)
    return {pat.sub(r"\g<1>%d." % dst, n): t for n, t in tensors.items()}


def n_experts(cfg) -> int:
    return next(getattr(cfg, k) for k in ("num_local_experts", "n_routed_experts", "num_experts") if getattr(cfg, k, None))


class Release:
    """What one family's release looks like: config.json, names, storage dtypes and encodings.
    to_hub converts a subset of transformers' state (one block, or the top-level tensors; a block's
    fused expert tensors possibly cut to a run of experts) to the release's names in the dtype each
    is stored in (float32 for what gets quantised); encoding says "fp8", "fp8_ue8m0", "fp4" or None
    per release name; to_hf(decoded, block, experts) turns the decoded release tensors of one block
    (or of the top level, block None) holding `experts` routed experts back into transformers'
    names."""

    scale_name = None
    kv_per_head = False

    def __init__(self, mf, cfg):
        self.mf, self.cfg = mf, cfg

    def encoding(self, name: str):
        return None


class MiniMaxM2Release(Release):
    def config(self):
        c, mf = self.cfg, self.mf
        dims = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                    num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                    num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
                    rotary_dim=int(c.head_dim * c.rope_parameters["partial_rotary_factor"]),
                    num_local_experts=c.num_local_experts, num_experts_per_tok=c.num_experts_per_tok)
        hub = mf.mm2_hub_config_dict(dims)
        hub["torch_dtype"] = "bfloat16"
        # the fixtures' spelling must describe this model: read it back through transformers
        from transformers import MiniMaxM2Config

        back = MiniMaxM2Config(**{k: v for k, v in hub.items() if k != "quantization_config"})
        for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                  "num_local_experts", "num_experts_per_tok", "rms_norm_eps", "vocab_size"):
            assert getattr(back, k) == getattr(c, k), k
        assert back.rope_parameters["partial_rotary_factor"] == c.rope_parameters["partial_rotary_factor"]
        assert float(back.rope_parameters["rope_theta"]) == float(c.rope_parameters["rope_theta"])
        return hub

    def to_hub(self, state):
        hub = self.mf.mm2_hf_to_hub(state, self.cfg.intermediate_size)
        return {n: t.float() if self.encoding(n) or n.endswith("e_score_correction_bias") else t.to(torch.bfloat16)
                for n, t in hub.items()}

    def encoding(self, name):
        return "fp8" if self.mf.mm2_is_fp8_weight(name) else None

    def scale_name(self, name):
        return self.mf.scale_inv_name(name)

    def to_hf(self, decoded, layer, experts):
        if layer is None:
            return self.mf.mm2_hub_to_hf(decoded, 0, experts)
        return renumber(self.mf.mm2_hub_to_hf(renumber(decoded, layer, 0), 1, experts), 0, layer)


class MiMoV2FlashRelease(Release):
    kv_per_head = True

    def config(self):
        c, mf = self.cfg, self.mf
        dims = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                    hybrid_layer_pattern=[int(t == "sliding_attention") for t in c.layer_types],
                    moe_layer_freq=[int(t == "sparse") for t in c.mlp_layer_types],
                    num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                    swa_num_key_value_heads=2 * c.num_key_value_heads, head_dim=c.head_dim, v_head_dim=c.v_head_dim,
                    sliding_window_size=c.sliding_window - 1,  # the hub counts the previous tokens only
                    intermediate_size=c.intermediate_size, moe_intermediate_size=c.moe_intermediate_size,
                    n_routed_experts=c.n_routed_experts, num_experts_per_tok=c.num_experts_per_tok,
                    n_group=c.n_group, topk_group=c.topk_group)
        hub = mf.mimo_hub_config_dict(dims)
        assert mf.mimo_effective(mf.mimo_config_from_hub(json.loads(json.dumps(hub)))) == mf.mimo_effective(c)
        return hub

    def to_hub(self, state):
        return self.mf.mimo_hf_to_hub(state, self.cfg.moe_intermediate_size)

    def encoding(self, name):
        return "fp8" if self.mf.mimo_is_fp8_weight(name) else None

    def scale_name(self, name):
        return self.mf.scale_inv_name(name)

    def per_head_pair(self, layer):
        """(k_proj, v_proj, heads, dk, dv) of a full-attention block, quantised per head; None else."""
        c = self.cfg
        if layer is None or c.layer_types[layer] != "full_attention":
            return None
        p = f"model.layers.{layer}.self_attn."
        return p + "k_proj.weight", p + "v_proj.weight", c.num_key_value_heads, c.head_dim, c.v_head_dim

    def to_hf(self, decoded, layer, experts):
        kinds = [] if layer is None else [self.cfg.mlp_layer_types[layer]]
        ns = SimpleNamespace(mlp_layer_types=kinds, n_routed_experts=experts)
        if layer is None:
            return self.mf.mimo_hub_to_hf(decoded, ns)
        return renumber(self.mf.mimo_hub_to_hf(renumber(decoded, layer, 0), ns), 0, layer)


class DeepseekV4Release(Release):
    def config(self):
        c, mf = self.cfg, self.mf
        dims = {k: getattr(c, k) for k in mf.DSV4_DIMS}
        dims["layer_types"], dims["mlp_layer_types"] = list(c.layer_types), list(c.mlp_layer_types)
        common = {k: getattr(c, k) for k in mf.DSV4_COMMON}
        yarn = {k: c.rope_parameters["compress"][k] for k in mf.DSV4_YARN}
        with module_globals(mf, DSV4_DIMS=dims, DSV4_COMMON=common, DSV4_COMPRESS_RATES=dict(c.compress_rates),
                            DSV4_YARN=yarn):
            native = mf.dsv4_native_config_dict()
        assert mf.dsv4_effective(mf.dsv4_config_from_native(json.loads(json.dumps(native)))) == mf.dsv4_effective(c)
        return native

    def to_hub(self, state):
        mf = self.mf
        native = mf.dsv4_hf_to_native(state, self.cfg.moe_intermediate_size)
        return {n: mf.dsv4_native_storage(n, t) for n, t in native.items()}

    def encoding(self, name):
        return "fp4" if self.mf.dsv4_is_fp4(name) else "fp8_ue8m0" if self.mf.dsv4_is_fp8(name) else None

    def scale_name(self, name):
        return self.mf.native_scale_name(name)

    def to_hf(self, decoded, layer, experts):
        ns = SimpleNamespace(num_hidden_layers=0 if layer is None else 1, num_local_experts=experts)
        if layer is None:
            return self.mf.dsv4_native_to_hf(decoded, ns)
        return renumber(self.mf.dsv4_native_to_hf(renumber(decoded, layer, 0), ns), 0, layer)


class KimiLinearRelease(Release):
    F32 = ("A_log", "dt_bias", "e_score_correction_bias")

    def config(self):
        c = self.cfg
        dims = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                    layer_types=list(c.layer_types), mlp_layer_types=list(c.mlp_layer_types),
                    intermediate_size=c.intermediate_size, moe_intermediate_size=c.moe_intermediate_size,
                    num_experts=c.num_experts, num_experts_per_tok=c.num_experts_per_token,
                    n_shared_experts=c.num_shared_experts, routed_scaling_factor=c.routed_scaling_factor,
                    n_group=c.num_expert_group, topk_group=c.topk_group, num_attention_heads=c.num_attention_heads,
                    num_key_value_heads=c.num_key_value_heads, q_lora_rank=c.q_lora_rank, kv_lora_rank=c.kv_lora_rank,
                    qk_nope_head_dim=c.qk_nope_head_dim, qk_rope_head_dim=c.qk_rope_head_dim, v_head_dim=c.v_head_dim,
                    linear_num_heads=c.linear_num_heads, linear_head_dim=c.linear_head_dim,
                    linear_conv_kernel_dim=c.linear_conv_kernel_dim)
        hub = self.mf.kimi_hub_config_dict(dims)
        assert hub["rms_norm_eps"] == c.rms_norm_eps
        hub["torch_dtype"] = "bfloat16"
        return hub

    def keeps_f32(self, name):
        return name.endswith(self.F32)

    def to_hub(self, state):
        hub = self.mf.kimi_hf_to_hub(state, self.cfg.moe_intermediate_size)
        return {n: t.float() if self.keeps_f32(n) else t.to(torch.bfloat16) for n, t in hub.items()}

    to_hf = None  # nothing is quantised: the model is rounded to bf16 in transformers' layout first


RELEASES = {"minimax_m2": MiniMaxM2Release, "mimo_v2_flash": MiMoV2FlashRelease, "deepseek_v4": DeepseekV4Release,
            "kimi_linear": KimiLinearRelease}


def kv_per_head(mf, k, v, heads):
    """MiMo's per-head FP8 key/value grids, by the fixtures' quantiser: (k codes, k scales, v codes,
    v scales) and the float32 k_proj, v_proj they decode to."""
    kq, ks, vq, vs = mf.quantize_fp8_kv_per_head(k, v, heads, mf.FP8_BLOCK)
    return (kq, ks, vq, vs), mf.dequantize_fp8_kv_per_head(kq, ks, vq, vs, heads, mf.FP8_BLOCK)


def encode(mf, rel: Release, hub: dict, layer) -> tuple[dict, dict]:
    """One block's release tensors: (what the file stores, name -> tensor; the float32 value each
    weight decodes to, by release name)."""
    stored, decoded = {}, {}
    pair = rel.per_head_pair(layer) if rel.kv_per_head else None
    if pair:
        kn, vn, heads, dk, dv = pair
        (kq, ks, vq, vs), (kd, vd) = kv_per_head(mf, hub.pop(kn), hub.pop(vn), heads)
        stored.update({kn: kq, rel.scale_name(kn): ks, vn: vq, rel.scale_name(vn): vs})
        decoded.update({kn: kd, vn: vd})
    for name in list(hub):
        t = hub.pop(name)
        kind = rel.encoding(name)
        if kind == "fp4":
            packed, scale = mf.quantize_fp4_groupwise(t)
            scale = scale.to(torch.float8_e8m0fnu)
            stored[name], stored[rel.scale_name(name)] = packed, scale
            decoded[name] = mf.dequantize_fp4_groupwise(packed, scale)
        elif kind in ("fp8", "fp8_ue8m0"):
            q, scale = mf.quantize_fp8_blockwise(t, ue8m0=kind == "fp8_ue8m0")
            if kind == "fp8_ue8m0":
                scale = scale.to(torch.float8_e8m0fnu)
            stored[name], stored[rel.scale_name(name)] = q, scale
            decoded[name] = mf.dequantize_fp8_blockwise(q, scale)
        else:
            stored[name] = t.contiguous()
            decoded[name] = t.float() if t.is_floating_point() else t
    return stored, decoded


FUSED_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")  # transformers' [experts, out, in]
EXPERT_CHUNK_BYTES = 1 << 30  # float32 bytes of routed experts converted at a time
ROUTED = re.compile(r"\.experts\.\d+\.")  # a routed expert's tensor in the release's names


def shift_experts(tensors: dict, first: int) -> dict:
    """Release names of a run of experts numbered from 0, renumbered from `first`."""
    return {ROUTED.sub(lambda m: f".experts.{int(m.group(0)[9:-1]) + first}.", n, count=1): t for n, t in tensors.items()}


def write_release(family: str, model, out: Path) -> None:
    """out/: the release layout of `model` (see the module's docstring), one shard per block; the
    model's own weights are replaced by what the release decodes to. A block's routed experts go
    through in runs of about EXPERT_CHUNK_BYTES (its other tensors with the first run, and their
    decoded values again with the later ones, which the conversion back needs), so that the
    copies beside the float32 model stay near a few GiB however wide the block is."""
    from safetensors.torch import save_file

    mf = fixtures()
    rel = RELEASES[family](mf, model.config)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(rel.config(), indent=2) + "\n")
    state = model.state_dict()
    if rel.to_hf is None:  # BF16 release: the transformers copies hold the same rounded weights
        with torch.no_grad():
            for name, t in state.items():
                if t.is_floating_point() and not rel.keeps_f32(name):
                    t.copy_(t.to(torch.bfloat16))
    groups: dict = {}
    for name in state:
        groups.setdefault(layer_of(name), []).append(name)
    order = sorted(k for k in groups if k is not None) + [None]
    weight_map, total = {}, 0
    for idx, layer in enumerate(order):
        names = groups[layer]
        fused = [n for n in names if n.endswith(FUSED_EXPERTS)]
        rest = [n for n in names if n not in fused]
        count = state[fused[0]].shape[0] if fused else 0
        per_expert = sum(state[n][0].numel() * 4 for n in fused)
        step = max(1, EXPERT_CHUNK_BYTES // per_expert) if fused else 1
        stored, rest_decoded, rest_names = {}, {}, set()
        for first in range(0, max(count, 1), step):
            last = min(first + step, count)
            sub = {n: state[n][first:last] for n in fused}
            sub.update({n: state[n] for n in rest})
            hub = rel.to_hub(sub)
            if first:  # the block's other tensors went with the first run
                hub = {n: t for n, t in hub.items() if n not in rest_names}
            else:
                rest_names = {n for n in hub if not ROUTED.search(n)}
            run_stored, decoded = encode(mf, rel, hub, None if first else layer)
            del hub
            stored.update(shift_experts(run_stored, first))
            del run_stored
            if rel.to_hf is not None:
                if not first:
                    rest_decoded = {n: t for n, t in decoded.items() if n in rest_names}
                back = rel.to_hf({**rest_decoded, **decoded}, layer, last - first)
                if set(back) != set(names):
                    raise RuntimeError(f"{family}: block {layer} does not convert back: "
                                       f"{sorted(set(back) ^ set(names))[:6]}")
                with torch.no_grad():
                    for n, t in back.items():
                        target = state[n][first:last] if n in fused else state[n]
                        if target.shape != t.shape:
                            raise RuntimeError(f"{family}: {n} comes back as {tuple(t.shape)}, not {tuple(target.shape)}")
                        if n in fused or not first:
                            target.copy_(t)
                del back
            del decoded
        shard = f"model-{idx + 1:05d}-of-{len(order):05d}.safetensors"
        save_file(dict(sorted(stored.items())), str(out / shard), metadata={"format": "pt"})
        for n, t in stored.items():
            weight_map[n] = shard
            total += t.numel() * t.element_size()
        print(f"{family}: wrote {out / shard} ({len(stored)} tensors)", file=sys.stderr, flush=True)
        del stored, rest_decoded
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("family", choices=sorted(FAMILIES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", choices=("mid", "small"), default="mid")
    ap.add_argument("--layout", choices=("hf", "release"), default="hf",
                    help="release: also write out/release/ in the release's layout, and make fp32/ and bf16/ "
                         "hold what it decodes to")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = FAMILIES[args.family](8 if args.scale == "small" else 1)
    cfg.pad_token_id = 0
    cfg.bos_token_id = cfg.eos_token_id = None
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # transformers initialises the routers' correction biases to zero; spread them a little so
    # the selection bias takes part in routing as in a trained model. DeepSeek-V4's token-to-expert
    # tables start all zero (every token on expert 0, top_k times): give each token top_k distinct
    # experts drawn at random, as a hash table spreads them
    with torch.no_grad():
        for name, buf in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.01)
            elif name.endswith("tid2eid"):
                draw = torch.rand(buf.shape[0], n_experts(cfg)).argsort(dim=-1)
                buf.copy_(draw[:, : buf.shape[1]])
    model.eval()
    if args.layout == "release":
        write_release(args.family, model, args.out / "release")
    for dtype, sub in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        model = model.to(dtype)
        model.save_pretrained(args.out / sub, max_shard_size="4GB")
        print(f"{args.family}: wrote {args.out / sub}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
