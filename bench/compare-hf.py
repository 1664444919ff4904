#!/usr/bin/env python3
"""
Developer tool (not run by npm): the HF transformers + PyTorch side of bench/compare-hf.md, printed as one JSON line.

Same work as `npm run bench` (bench/index.ts) on the SmolLM2-135M shape, f32, random weights:
- prefill: one forward of 1x512 tokens with every layer's hidden states, logits only at the last position
  (`logits_to_keep=1`, as the engine computes them); also timed with logits at all 512 positions (what the earlier
  recipe measured) for reference;
- decode with steering: greedy generate() from a 128-token prompt with a forward hook on model.layers[14]
  subtracting alpha*v/|v|; decode-only rate = 46 / (t(48 new) - t(2 new)).

    python3 bench/compare-hf.py [--threads 1] [--reps 3]
"""
import argparse
import json
import os
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def best(f, reps):
    b = float('inf')
    for _ in range(reps):
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--reps', type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    cfg = LlamaConfig(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                      intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
                      rope_parameters={'rope_type': 'default', 'rope_theta': 100000.0})
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.tensor([[3 + (i * 7919) % 49149 for i in range(512)]])
    out = {'torch': torch.__version__, 'transformers': transformers.__version__, 'threads': args.threads,
           'blas': torch.__config__.show().count('MKL') > 0 and 'mkl' or 'other', 'load_before': os.getloadavg()[0]}
    with torch.inference_mode():
        model(ids[:, :64], output_hidden_states=True, logits_to_keep=1)  # warm-up
        out['prefill_tps'] = 512 / best(lambda: model(ids, output_hidden_states=True, logits_to_keep=1), args.reps)
        out['prefill_all_logits_tps'] = 512 / best(lambda: model(ids, output_hidden_states=True), args.reps)

        v = torch.sin(torch.arange(576, dtype=torch.float32))
        v = v / v.norm()
        alpha = 4.0
        hook = model.model.layers[14].register_forward_hook(
            lambda m, inp, o: ((o[0] - alpha * v,) + tuple(o[1:])) if isinstance(o, tuple) else o - alpha * v)
        p = ids[:, :128]

        def gen(n):
            return model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        gen(4)
        t2 = best(lambda: gen(2), args.reps)
        t48 = best(lambda: gen(48), args.reps)
        out['decode_steer_tps'] = 46 / (t48 - t2)
        hook.remove()
    out['load_after'] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == '__main__':
    main()
