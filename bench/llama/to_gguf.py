#!/usr/bin/env python3
"""
A Llama-family Hugging Face checkpoint folder (config.json + safetensors, one file or shards) → one GGUF file that
llama.cpp runs as the same function. A developer tool for `npm run bench:llama` (bench/llama.ts); needs numpy and
gguf (llama.cpp's gguf-py), not torch:

    pip install gguf numpy
    python3 bench/llama/to_gguf.py MODEL_DIR OUT.gguf --type f32|q8_0|q4_0

What it does, as llama.cpp's convert_hf_to_gguf.py does for LlamaForCausalLM:
- metadata: general.architecture = llama, context length, embedding length, block count, feed-forward length,
  head counts, rope dimension count (head_dim) and freq base, RMS-norm epsilon, key/value length (head_dim);
- tensors token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down},
  output_norm, output (only when untied: a tied model reads token_embd for the logits, as llama.cpp does);
- q_proj and k_proj rows permuted per head from HF's rotate_half RoPE layout (first half / second half of each head)
  to GGML's interleaved pairs (LLAMA_ROPE_TYPE_NORM), the `permute` of convert_hf_to_gguf, so the model computes the
  same function;
- llama3 rope scaling as the rope_freqs tensor (convert_hf_to_gguf's generate_extra_tensors);
- a stand-in vocabulary of vocab_size entries in SentencePiece layout (<unk> 0, <s> 1, </s> 2 unless the config says
  otherwise, byte tokens <0x00>..<0xFF> after them, then "<tN>"): random checkpoints have no tokenizer, and the
  bench feeds token ids only.

Types: --type f32 keeps every tensor f32. q8_0 / q4_0 store every 2-D weight — all linear layers and the embedding
(which is also the lm_head when tied) — as Q8_0 / Q4_0 (symmetric blocks of 32 along the input dimension, one f16
scale per block); norms stay f32, as llama.cpp's quantize does for 1-D tensors. (llama-quantize's own Q4_0 recipe
would keep the output/embedding at Q6_K; here they are Q4_0 like safekeep's q4, which quantizes the lm_head too.)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - developer tool
    sys.stderr.write("to_gguf.py: needs gguf-py and numpy (pip install gguf numpy)\n")
    sys.exit(3)

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bf16", "F64": np.float64}


def read_safetensors(model_dir: str) -> dict[str, np.ndarray]:
    """every tensor of the folder's safetensors (one file or an index's shards) as f32 arrays (memory-mapped reads)"""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out: dict[str, np.ndarray] = {}
    for name in files:
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
        for key, info in header.items():
            if key == "__metadata__":
                continue
            a, b = info["data_offsets"]
            dt = ST_DTYPES.get(info["dtype"])
            if dt is None:
                raise SystemExit(f"to_gguf.py: {key}: dtype {info['dtype']} not supported")
            buf = raw[a:b]
            if dt == "bf16":
                arr = (buf.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                arr = buf.view(dt).astype(np.float32)
            out[key] = arr.reshape(info["shape"])
    return out


def permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: per head, rows [first half | second half] → interleaved pairs"""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg: dict, head_dim: int) -> np.ndarray | None:
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not rs or rs.get("rope_type", rs.get("type")) != "llama3":
        return None
    base = cfg.get("rope_theta", rs.get("rope_theta", 10000.0))
    factor = rs.get("factor", 8.0)
    low = rs.get("low_freq_factor", 1.0)
    high = rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wl, high_wl = old / low, old / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "q8_0", "q4_0"], default="f32")
    ap.add_argument("--no-permute", action="store_true",
                    help="negative control for the bench's correctness check: skip the Q/K permute (a wrong model)")
    args = ap.parse_args()

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = (cfg.get("architectures") or ["?"])[0]
    if cfg.get("model_type") not in ("llama", "mistral") and arch not in ("LlamaForCausalLM", "MistralForCausalLM"):
        raise SystemExit(f"to_gguf.py: Llama-family checkpoints only (got model_type {cfg.get('model_type')}, {arch})")
    L = cfg["num_hidden_layers"]
    d = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or d // n_head
    vocab = cfg["vocab_size"]
    tied = cfg.get("tie_word_embeddings", False)
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[args.type]
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[args.type]

    t = read_safetensors(args.model_dir)
    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(os.path.basename(os.path.abspath(args.model_dir)))
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(d)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(vocab)
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # stand-in SentencePiece vocabulary (ids only are fed)
    def tok_id(key: str, default: int) -> int:
        v = cfg.get(key, default)
        return int(v[0] if isinstance(v, list) else (default if v is None else v))
    bos, eos = tok_id("bos_token_id", 1), tok_id("eos_token_id", 2)
    tokens: list[str] = []
    types: list[int] = []
    byte_start = 3
    for i in range(vocab):
        if i == 0:
            tokens.append("<unk>"); types.append(gguf.TokenType.UNKNOWN)
        elif i == bos:
            tokens.append("<s>"); types.append(gguf.TokenType.CONTROL)
        elif i == eos:
            tokens.append("</s>"); types.append(gguf.TokenType.CONTROL)
        elif byte_start <= i < byte_start + 256:
            tokens.append(f"<0x{i - byte_start:02X}>"); types.append(gguf.TokenType.BYTE)
        else:
            tokens.append(f"<t{i}>"); types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    def put(name: str, arr: np.ndarray, quantize: bool) -> None:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if quantize and qtype != gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, arr)

    qk = (lambda x, a, b: x) if args.no_permute else permute
    factors = llama3_rope_factors(cfg, head_dim)
    if factors is not None:
        put("rope_freqs.weight", factors, False)
    put("token_embd.weight", t["model.embed_tokens.weight"], True)
    for i in range(L):
        p = f"model.layers.{i}."
        for bias in ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias", "mlp.gate_proj.bias"):
            if p + bias in t:
                raise SystemExit(f"to_gguf.py: {p + bias}: biases are not supported")
        put(f"blk.{i}.attn_norm.weight", t[p + "input_layernorm.weight"], False)
        put(f"blk.{i}.attn_q.weight", qk(t[p + "self_attn.q_proj.weight"], n_head, n_head), True)
        put(f"blk.{i}.attn_k.weight", qk(t[p + "self_attn.k_proj.weight"], n_head, n_kv), True)
        put(f"blk.{i}.attn_v.weight", t[p + "self_attn.v_proj.weight"], True)
        put(f"blk.{i}.attn_output.weight", t[p + "self_attn.o_proj.weight"], True)
        put(f"blk.{i}.ffn_norm.weight", t[p + "post_attention_layernorm.weight"], False)
        put(f"blk.{i}.ffn_gate.weight", t[p + "mlp.gate_proj.weight"], True)
        put(f"blk.{i}.ffn_up.weight", t[p + "mlp.up_proj.weight"], True)
        put(f"blk.{i}.ffn_down.weight", t[p + "mlp.down_proj.weight"], True)
    put("output_norm.weight", t["model.norm.weight"], False)
    if not tied and "lm_head.weight" in t:
        put("output.weight", t["lm_head.weight"], True)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, args.out)
    print(json.dumps({"out": args.out, "type": args.type, "bytes": os.path.getsize(args.out)}))


if __name__ == "__main__":
    main()
