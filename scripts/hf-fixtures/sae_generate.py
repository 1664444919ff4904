"""
Greedy generation with a sparse autoencoder spliced in, by transformers with a forward hook: the reference for
safekeep's SAE feature edits in generation (test/sae.engine.test.ts, src/engine/run/sae-rows.ts).

Model: test/fixtures/hf5/llama-default; SAE: test/fixtures/sae/splice-sae (jumprelu at blocks.1.hook_resid_post, what
sae.py wrote); prompt: the splice case's ids (test/fixtures/sae/index.json). A forward hook on model.layers[1] replaces
its output by the SAE's splice at every position of every forward — the prompt's, then each generated token's (a
greedy loop on transformers' KV cache, the hook active throughout: HF's convention for steering a generation) — with
edits (SAELens's formulas, sae.py): ablate a feature, clamp it, add α·W_dec[j], with the error term ('error') or
without ('reconstruction'), and no edit at all (the error splice: the plain model's tokens).

Writes test/fixtures/sae/splice-generate.json: the cases, their edits and generated ids, and the smallest top-1 −
top-2 logit margin of each case's steps (a margin far above float rounding: the ids are not a near tie), and
splice-generate.expected.safetensors: each case's step logits [n, vocab].

Usage: python3 scripts/hf-fixtures/sae_generate.py
"""
import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sae import act_fn, decode, pre_acts  # noqa: E402  (the same formulas as the other SAE fixtures)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / 'test' / 'fixtures' / 'sae'
N_NEW = 8


def main():
    index = json.loads((OUT / 'index.json').read_text())['splice']
    ids = index['ids']
    f = index['ablate_feature']
    model = transformers.AutoModelForCausalLM.from_pretrained(ROOT / index['model'], dtype=torch.float32, attn_implementation='eager').eval()
    s = load_file(str(OUT / 'splice-sae' / 'sae_weights.safetensors'))
    cfg = {'arch': 'jumprelu', 'apply_b_dec': True, 'normalize': 'none'}
    cases = [
        {'name': 'none', 'splice': 'error', 'edits': []},
        {'name': 'ablate', 'splice': 'error', 'edits': [{'kind': 'ablate', 'feature': f}]},
        {'name': 'clamp', 'splice': 'error', 'edits': [{'kind': 'clamp', 'feature': f, 'value': 3.0}]},
        {'name': 'add', 'splice': 'error', 'edits': [{'kind': 'add', 'feature': 5, 'alpha': 2.0}, {'kind': 'ablate', 'feature': f}]},
        {'name': 'reconstruction', 'splice': 'reconstruction', 'edits': [{'kind': 'clamp', 'feature': 7, 'value': 1.5}]},
    ]
    tensors = {}
    for c in cases:
        def splice(h, c=c):
            pre, st = pre_acts(s, cfg, h)
            acts = act_fn(s, cfg, pre)
            e = acts.clone()
            add = torch.zeros_like(h[0])
            for ed in c['edits']:
                if ed['kind'] == 'add':
                    add = add + ed['alpha'] * s['W_dec'][ed['feature']]
                else:
                    e[:, ed['feature']] = 0 if ed['kind'] == 'ablate' else ed['value']
            out = decode(s, cfg, e, st)
            return (out + (h - decode(s, cfg, acts, st)) if c['splice'] == 'error' else out) + add

        def hook(_m, _i, o):
            h = o[0] if isinstance(o, tuple) else o
            new = splice(h[0]).unsqueeze(0)
            return (new,) + tuple(o[1:]) if isinstance(o, tuple) else new

        hd = model.model.layers[1].register_forward_hook(hook)
        gen, steps, past = [], [], None
        inp = torch.tensor([ids])
        with torch.no_grad():
            for _ in range(N_NEW):
                out = model(input_ids=inp, past_key_values=past, use_cache=True)
                past = out.past_key_values
                lg = out.logits[0, -1]
                steps.append(lg)
                t = int(torch.argmax(lg))
                gen.append(t)
                inp = torch.tensor([[t]])
        hd.remove()
        lgs = torch.stack(steps)
        top2 = torch.topk(lgs, 2, dim=-1).values
        c['generated'] = gen
        c['min_margin'] = round(float((top2[:, 0] - top2[:, 1]).min()), 5)
        tensors[c['name']] = lgs.contiguous()
        print(f"{c['name']}: {gen} (smallest margin {c['min_margin']})")
    (OUT / 'splice-generate.json').write_text(json.dumps({'model': index['model'], 'sae': 'test/fixtures/sae/splice-sae', 'ids': ids, 'max_new_tokens': N_NEW, 'cases': cases}, indent=1) + '\n')
    save_file(tensors, str(OUT / 'splice-generate.expected.safetensors'))


if __name__ == '__main__':
    main()
