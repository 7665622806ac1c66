"""make_models.py - writes the benchmark's checkpoints: for one family, transformers' own model
class with random weights at a mid-size configuration (the released model's widths - hidden size,
heads, head dims, expert width, top-k - cut to 4 blocks, 32 routed experts and a 32768-token
vocabulary; DeepSeek-V4 keeps 16 experts, since transformers builds its fp32 model of 32 in more
than this 24 GiB machine's memory), saved with save_pretrained once in fp32 and once in bf16 (the
same weights rounded).

    python make_models.py FAMILY OUT_DIR [--scale mid|small]

FAMILY is minimax_m2, mimo_v2_flash, kimi_linear or deepseek_v4. OUT_DIR receives fp32/ and
bf16/. --scale small divides every width by 8 (a quick check of the benchmark itself).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    # 2048, top-8
    theta = {"full_attention": 5e6, "sliding_attention": 1e4}
    return MiMoV2FlashConfig(vocab_size=VOCAB, num_hidden_layers=4, hidden_size=4096 // s, num_attention_heads=64 // s,
                             num_key_value_heads=4 // min(s, 4), head_dim=192, v_head_dim=128, sliding_window=128,
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("family", choices=sorted(FAMILIES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", choices=("mid", "small"), default="mid")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = FAMILIES[args.family](8 if args.scale == "small" else 1)
    cfg.pad_token_id = 0
    cfg.bos_token_id = cfg.eos_token_id = None
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # transformers initialises the routers' correction biases to zero; spread them a little so
    # the selection bias takes part in routing as in a trained model
    with torch.no_grad():
        for name, buf in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.01)
    model.eval()
    for dtype, sub in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        model = model.to(dtype)
        model.save_pretrained(args.out / sub, max_shard_size="4GB")
        print(f"{args.family}: wrote {args.out / sub}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
