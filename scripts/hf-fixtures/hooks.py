"""
Writes test/fixtures/hf5-hooks/: transformers' own values at safekeep's named hook points, and its logits under
edits at those points, read and applied with forward hooks on the checkpoints of test/fixtures/hf5 (one per family).

Hook points of block l (safekeep name -> where transformers computes it; eager attention):
  blocks.l.resid_pre   input of model.layers[l]                     [T, d]
  blocks.l.z           input of model.layers[l].self_attn.o_proj     [T, H, hd]
  blocks.l.pattern     attention weights returned by self_attn       [H, T, T]
  blocks.l.attn_out    output of o_proj                              [T, d]
  blocks.l.resid_mid   input of post_attention_layernorm             [T, d]   (= the residual it is added back to)
  blocks.l.mlp_out     output of model.layers[l].mlp                 [T, d]
  blocks.l.resid_post  output of model.layers[l]                     [T, d]

Per checkpoint <tag> (index.json: the prompts, the edits with their vectors):
  <tag>.safetensors   clean.<name> for every hook point of the clean prompt, clean.logits [T, V];
                      <edit>.logits [T, V] and <edit>.<name> (downstream points) of the corrupted prompt under each edit:
    patch_resid_post  blocks.0.resid_post at the last position := its clean value (activation patching)
    patch_z           blocks.1.z at positions 6, 9 := the clean values
    ablate_heads      blocks.0.z: head 0 zeroed at every position
    add_attn_out      blocks.0.attn_out + 2·v̂;  clamp_mlp_out: blocks.1.mlp_out's projection on v̂ set to -1.5
    resid_mid         blocks.0.resid_mid: the component along v̂ removed (edited in place, so the residual carries it)

Usage (torch, transformers >= 5):  python3 scripts/hf-fixtures/hooks.py [--out test/fixtures/hf5-hooks]
"""
import argparse
import json
import math
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
HF5 = ROOT / 'test' / 'fixtures' / 'hf5'
TAGS = ['llama-default', 'mistral-default-window', 'qwen2-default-window', 'qwen3-default']
T = 12


def direction(d, phase):
    v = torch.tensor([math.sin(i * 0.7 + phase) for i in range(d)], dtype=torch.float32)
    return v / v.norm()


def load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation='eager').eval()


def run(model, ids, edits=None):
    """one forward; returns logits [T, V] and every hook point's value after the edits {name: tensor}"""
    edits = edits or {}
    got, handles = {}, []
    H = model.config.num_attention_heads
    for l, layer in enumerate(model.model.layers):
        def pre(name):
            def hook(_m, args, kwargs):
                x = args[0] if args else kwargs['hidden_states']
                if name in edits:
                    x.copy_(edits[name](x[0]).unsqueeze(0))  # in place: the residual kept by the layer is this tensor
                got[name] = x[0].detach().clone()
            return hook

        def post(name, pick=None):
            def hook(_m, _i, o):
                x = o[0] if isinstance(o, tuple) else o
                if name in edits:
                    x = edits[name](x[0]).unsqueeze(0)
                got[name] = x[0].detach().clone()
                return (x,) + tuple(o[1:]) if isinstance(o, tuple) else x
            return hook

        def pattern(name):
            def hook(_m, _i, o):
                got[name] = o[1][0].detach().clone()
            return hook
        a = layer.self_attn
        handles += [
            layer.register_forward_pre_hook(pre(f'blocks.{l}.resid_pre'), with_kwargs=True),
            a.o_proj.register_forward_pre_hook(pre(f'blocks.{l}.z'), with_kwargs=True),
            a.register_forward_hook(pattern(f'blocks.{l}.pattern')),
            a.o_proj.register_forward_hook(post(f'blocks.{l}.attn_out')),
            layer.post_attention_layernorm.register_forward_pre_hook(pre(f'blocks.{l}.resid_mid'), with_kwargs=True),
            layer.mlp.register_forward_hook(post(f'blocks.{l}.mlp_out')),
            layer.register_forward_hook(post(f'blocks.{l}.resid_post')),
        ]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    for h in handles:
        h.remove()
    hd = model.config.hidden_size // H if getattr(model.config, 'head_dim', None) is None else model.config.head_dim
    for k in list(got):
        if k.endswith('.z'):
            got[k] = got[k].reshape(len(ids), H, hd)
    return logits, got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / 'test' / 'fixtures' / 'hf5-hooks'))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    clean = json.loads((HF5 / 'index.json').read_text())['prompt'][:T]
    corrupt = list(clean)
    corrupt[6] = (clean[6] + 7) % 48  # inside every sliding window (8) of the last position
    index = {'transformers': transformers.__version__, 'torch': torch.__version__, 'clean': clean, 'corrupt': corrupt, 'cases': {}}
    for tag in TAGS:
        model = load(HF5 / tag / 'model')
        d = model.config.hidden_size
        H = model.config.num_attention_heads
        hd = d // H if getattr(model.config, 'head_dim', None) is None else model.config.head_dim
        v = direction(d, 1.0)
        logits, c = run(model, clean)
        tensors = {f'clean.{k}': t.contiguous() for k, t in c.items()}
        tensors['clean.logits'] = logits.contiguous()

        def patch(name, positions):
            def f(x):
                src = c[name].reshape(x.shape)
                y = x.clone()
                for p in positions:
                    y[p] = src[p]
                return y
            return f

        def ablate_head(h):
            def f(x):
                y = x.clone()
                y[:, h * hd:(h + 1) * hd] = 0
                return y
            return f
        edits = {
            'patch_resid_post': ({'blocks.0.resid_post': patch('blocks.0.resid_post', [T - 1])},
                                 [{'hook': 'blocks.0.resid_post', 'kind': 'patch', 'positions': [-1]}]),
            'patch_z': ({'blocks.1.z': patch('blocks.1.z', [6, 9])}, [{'hook': 'blocks.1.z', 'kind': 'patch', 'positions': [6, 9]}]),
            'ablate_heads': ({'blocks.0.z': ablate_head(0)}, [{'hook': 'blocks.0.z', 'kind': 'ablate_heads', 'heads': [0]}]),
            'add_attn_out': ({'blocks.0.attn_out': lambda x: x + 2.0 * v}, [{'hook': 'blocks.0.attn_out', 'kind': 'add', 'vector': v.tolist(), 'alpha': 2.0}]),
            'clamp_mlp_out': ({'blocks.1.mlp_out': lambda x: x + (-1.5 - x @ v).unsqueeze(-1) * v},
                              [{'hook': 'blocks.1.mlp_out', 'kind': 'clamp', 'vector': v.tolist(), 'alpha': -1.5}]),
            'resid_mid': ({'blocks.0.resid_mid': lambda x: x - (x @ v).unsqueeze(-1) * v}, [{'hook': 'blocks.0.resid_mid', 'kind': 'ablate', 'vector': v.tolist()}]),
        }
        plain, _ = run(model, corrupt)
        index['cases'][tag] = {}
        for name, (fns, spec) in edits.items():
            lg, g = run(model, corrupt, fns)
            change = float((lg - plain).abs().max())
            assert change > 1e-3, f'{tag} {name}: the edit does not change the logits ({change})'
            tensors[f'{name}.logits'] = lg.contiguous()
            for k in ['blocks.1.attn_out', 'blocks.1.resid_post']:
                tensors[f'{name}.{k}'] = g[k].contiguous()
            index['cases'][tag][name] = {'hooks': spec, 'logit_change': round(change, 4)}
            print(f'{tag} {name}: logits change {change:.3g}')
        save_file(tensors, str(out / f'{tag}.safetensors'))
    (out / 'index.json').write_text(json.dumps(index, indent=1) + '\n')


if __name__ == '__main__':
    main()
