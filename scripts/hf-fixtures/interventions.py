"""
Writes test/fixtures/hf5-intervene/: transformers' own hidden states, logits and greedy generation under
interventions applied by forward hooks, on checkpoints already in test/fixtures/hf5 (llama-default, qwen3-default).

An intervention {layer l, kind, vector r, alpha} acts on hidden[l]: the output of model.model.embed_tokens for l = 0,
of model.layers[l-1] otherwise (safekeep's convention), with r̂ = r/|r|:
  add     h + alpha·r̂
  ablate  h − (h·r̂)r̂
  clamp   h − (h·r̂)r̂ + alpha·r̂
At one layer the adds come first, then the ablate/clamp. Every position of every forward call (positions 'all').

Outputs per case (index.json lists the interventions with their vectors, the greedy ids):
  <tag>.<set>.safetensors: hidden [L+1, T, d] (hooks capture after the interventions), logits [T, V],
                           step_logits [new_tokens, V] of greedy generate() under the same hooks.

Usage (torch, transformers >= 5):  python3 scripts/hf-fixtures/interventions.py [--out test/fixtures/hf5-intervene]
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
TAGS = ['llama-default', 'qwen3-default']
NEW_TOKENS = 6


def direction(d, phase):
    return [math.sin(i * 0.7 + phase) for i in range(d)]


def sets(d, L):
    return {
        'ablate': [{'layer': 1, 'kind': 'ablate', 'vector': direction(d, 0.0)}],
        'clamp': [{'layer': 2, 'kind': 'clamp', 'vector': direction(d, 1.0), 'alpha': 4.0},
                  {'layer': 0, 'kind': 'add', 'vector': direction(d, 2.0), 'alpha': 3.0}],
        'several': [{'layer': 0, 'kind': 'ablate', 'vector': direction(d, 3.0)},
                    {'layer': 1, 'kind': 'add', 'vector': direction(d, 4.0), 'alpha': -2.0},
                    {'layer': 1, 'kind': 'clamp', 'vector': direction(d, 5.0), 'alpha': -2.0},
                    {'layer': L, 'kind': 'ablate', 'vector': direction(d, 6.0)}],
    }


def apply(h, ivs):
    for iv in [x for x in ivs if x['kind'] == 'add']:
        u = torch.tensor(iv['vector'], dtype=h.dtype)
        h = h + iv['alpha'] * u / u.norm()
    for iv in [x for x in ivs if x['kind'] != 'add']:
        u = torch.tensor(iv['vector'], dtype=h.dtype)
        u = u / u.norm()
        value = iv['alpha'] if iv['kind'] == 'clamp' else 0.0
        h = h + (value - (h @ u)).unsqueeze(-1) * u
    return h


def hooked(model, ivs):
    """intervention hooks first, then capture hooks (a forward hook's returned output is what later hooks see)"""
    calls, handles = [], []
    mods = [model.model.embed_tokens] + list(model.model.layers)
    for l, m in enumerate(mods):
        here = [x for x in ivs if x['layer'] == l]
        if here:
            def hook(_m, _i, o, here=here):
                if isinstance(o, tuple):
                    return (apply(o[0], here),) + tuple(o[1:])
                return apply(o, here)
            handles.append(m.register_forward_hook(hook))
    handles.append(mods[0].register_forward_hook(lambda m, i, o: calls.append([o.detach().clone()])))
    for m in mods[1:]:
        handles.append(m.register_forward_hook(lambda m, i, o: calls[-1].append((o[0] if isinstance(o, tuple) else o).detach().clone())))
    return calls, handles


def load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation='eager').eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / 'test' / 'fixtures' / 'hf5-intervene'))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    prompt = json.loads((HF5 / 'index.json').read_text())['prompt']
    ids = torch.tensor([prompt])
    index = {'transformers': transformers.__version__, 'torch': torch.__version__, 'prompt': prompt, 'new_tokens': NEW_TOKENS, 'cases': {}}
    for tag in TAGS:
        path = HF5 / tag / 'model'
        model = load(path)
        d, L = model.config.hidden_size, model.config.num_hidden_layers
        with torch.no_grad():
            plain = model(input_ids=ids, use_cache=False).logits[0]
        index['cases'][tag] = {}
        for name, ivs in sets(d, L).items():
            calls, handles = hooked(model, ivs)
            with torch.no_grad():
                logits = model(input_ids=ids, use_cache=False).logits[0]
                hidden = torch.stack(calls[0], 0)[:, 0]
                g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                                   output_logits=True, return_dict_in_generate=True, pad_token_id=0)
            for h in handles:
                h.remove()
            step_logits = torch.stack([s[0] for s in g.logits], 0)
            top = torch.topk(step_logits, 2, dim=-1).values
            margin = float((top[:, 0] - top[:, 1]).min())
            change = float((logits - plain).abs().max())
            assert change > 1e-2, f'{tag} {name}: the interventions do not change the logits ({change})'
            save_file({'hidden': hidden.contiguous(), 'logits': logits.contiguous(), 'step_logits': step_logits.contiguous()},
                      str(out / f'{tag}.{name}.safetensors'))
            index['cases'][tag][name] = {'interventions': ivs, 'greedy': g.sequences[0, ids.shape[1]:].tolist(),
                                         'margin': round(margin, 4), 'logit_change': round(change, 4)}
            print(f'{tag} {name}: greedy {index["cases"][tag][name]["greedy"]} margin {margin:.3g} change {change:.3g}')
    (out / 'index.json').write_text(json.dumps(index, indent=1) + '\n')


if __name__ == '__main__':
    main()
