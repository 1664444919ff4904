#!/usr/bin/env python3
"""
Developer tool (NOT run by `npm test`): writes the Hugging Face reference fixtures of test/fixtures/hf5/.

Tiny random checkpoints saved by transformers 5.x `save_pretrained` (so config.json carries `rope_parameters` and
the other keys exactly as 5.x writes them), one per family (llama, mistral, qwen2, qwen3) and RoPE type (default,
linear, llama3, yarn, dynamic), Mistral with `sliding_window` and Qwen2 with `use_sliding_window` +
`max_window_layers` on every RoPE type, one Qwen3 case with an explicit `layer_types` window, and one transformers
4.x-style config (`rope_theta` + `rope_scaling`) of the llama/llama3 weights. For each, transformers' own outputs:

  hidden   [L+1, T, d]  hidden[0] = embeddings, hidden[l] = output of model.layers[l-1] (forward hooks; the last one
                        BEFORE the final norm, unlike output_hidden_states[-1])
  logits   [T, V]
  greedy ids (generate(), KV cache, do_sample=False) + their step logits [N, V] + the hidden state computed when the
  first generated token is fed back [L+1, d]
  steered: a forward hook on model.layers[l-1] adding -alpha·v/|v| (safekeep's steer {layer l, vector v, alpha})
           at every prompt and generated position: prefill hidden/logits, greedy ids, step logits

The prompt (40 tokens) is longer than every window (8), than the dynamic model's max_position_embeddings (24) and the
scaled types' original_max_position_embeddings (16), so windows and scaling change the outputs; the script checks
that (vs the same weights without the window / scaling) and that greedy choices have a clear top-1 margin. Dynamic
NTK depends on transformers' rotary state (it grows its cached length), so every reference run starts from a freshly
loaded model.

Usage (needs torch, transformers >= 5, safetensors; `pip install torch transformers safetensors`):
    python3 scripts/hf-fixtures/generate.py [--out test/fixtures/hf5]
"""
import argparse
import copy
import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

CLASSES = {
    'llama': transformers.LlamaConfig,
    'mistral': transformers.MistralConfig,
    'qwen2': transformers.Qwen2Config,
    'qwen3': transformers.Qwen3Config,
}

# one tiny shape for all: GQA 2:1, head_dim 16 (8 frequencies, so llama3/yarn put some in every regime)
SHAPE = dict(vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
PROMPT_LEN = 40
NEW_TOKENS = 8
WINDOW = 8
STEER_LAYER = 1  # hook on model.layers[0]
STEER_ALPHA = 6.0

ROPE = {
    'default': {'rope_type': 'default', 'rope_theta': 10000.0},
    'linear': {'rope_type': 'linear', 'rope_theta': 10000.0, 'factor': 4.0},
    'llama3': {'rope_type': 'llama3', 'rope_theta': 500000.0, 'factor': 8.0, 'low_freq_factor': 1.0,
               'high_freq_factor': 4.0, 'original_max_position_embeddings': 16},
    'yarn': {'rope_type': 'yarn', 'rope_theta': 1000000.0, 'factor': 4.0, 'original_max_position_embeddings': 16},
    'dynamic': {'rope_type': 'dynamic', 'rope_theta': 10000.0, 'factor': 2.0},
}
MAX_POS = {'dynamic': 24}  # others 64


def family_extra(family, window):
    if not window:
        return {'sliding_window': None} if family in ('mistral', 'qwen3') else {}
    if family == 'mistral':
        return {'sliding_window': WINDOW}
    if family == 'qwen2':
        return {'use_sliding_window': True, 'sliding_window': WINDOW, 'max_window_layers': 1}
    if family == 'qwen3':
        # explicit layer_types: the window on layer 0 only (the reverse of what max_window_layers can express)
        return {'use_sliding_window': True, 'sliding_window': WINDOW, 'layer_types': ['sliding_attention', 'full_attention']}
    raise ValueError(family)


def cases():
    out = []
    for family in CLASSES:
        for rope in ROPE:
            window = family in ('mistral', 'qwen2')
            out.append((f'{family}-{rope}' + ('-window' if window else ''), family, rope, window))
    out.append(('qwen3-yarn-window', 'qwen3', 'yarn', True))
    return out


def make_config(family, rope, window, attn='eager'):
    kw = dict(SHAPE)
    kw['max_position_embeddings'] = MAX_POS.get(rope, 64)
    if family == 'qwen3':
        kw['head_dim'] = 16  # Qwen3Config's default is 128
    kw['rope_parameters'] = copy.deepcopy(ROPE[rope])
    kw.update(family_extra(family, window))
    cfg = CLASSES[family](**kw)
    cfg._attn_implementation = attn
    return cfg


def seeded_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith('norm.weight'):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))


def load(path):
    m = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation='eager')
    return m.eval()


class Capture:
    """hidden[0] from the embedding, hidden[l] from model.layers[l-1]'s output (after any steering hook)"""

    def __init__(self, model, steer=None):
        self.calls = []
        self.handles = []
        layers = model.model.layers
        if steer is not None:
            layer, delta = steer
            self.handles.append(layers[layer - 1].register_forward_hook(lambda m, i, o: add(o, delta)))
        self.handles.append(model.model.embed_tokens.register_forward_hook(lambda m, i, o: self.calls.append([o.detach().clone()])))
        for l in range(len(layers)):
            self.handles.append(layers[l].register_forward_hook(lambda m, i, o: self.calls[-1].append(first(o).detach().clone())))

    def hidden(self, call=0):
        return torch.stack(self.calls[call], 0)[:, 0]  # [L+1, T, d]

    def close(self):
        for h in self.handles:
            h.remove()


def first(o):
    return o[0] if isinstance(o, tuple) else o


def add(o, delta):
    if isinstance(o, tuple):
        return (o[0] + delta,) + tuple(o[1:])
    return o + delta


def run(path, ids, steer=None):
    """fresh model (dynamic RoPE state), prefill hidden + logits, then generate()"""
    model = load(path)
    cap = Capture(model, steer)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    hidden = cap.hidden(0)
    logits = out.logits[0]
    cap.close()
    model = load(path)
    cap = Capture(model, steer)
    with torch.no_grad():
        g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                           output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    new_ids = g.sequences[0, ids.shape[1]:].tolist()
    step_logits = torch.stack([s[0] for s in g.logits], 0)
    first_hidden = cap.hidden(1)[:, 0]  # the call that feeds generated token 0: [L+1, d]
    cap.close()
    return hidden, logits, new_ids, step_logits, first_hidden


def margin(step_logits):
    top = torch.topk(step_logits, 2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


# RoPE settings beyond the model fixtures: transformers' inv_freq and attention scaling for each (rope-cases.json)
ROPE_CASES = [
    ('llama', {'rope_parameters': {'rope_type': 'yarn', 'rope_theta': 1000000.0, 'factor': 4.0, 'original_max_position_embeddings': 32768}}),
    ('qwen3', {'rope_parameters': {'rope_type': 'yarn', 'rope_theta': 10000.0, 'factor': 8.0, 'original_max_position_embeddings': 4096,
                                   'beta_fast': 16, 'beta_slow': 2, 'truncate': False}}),
    ('llama', {'rope_parameters': {'rope_type': 'yarn', 'rope_theta': 10000.0, 'factor': 40.0, 'original_max_position_embeddings': 4096,
                                   'mscale': 1.0, 'mscale_all_dim': 0.707}}),
    ('mistral', {'rope_parameters': {'rope_type': 'yarn', 'rope_theta': 10000.0, 'factor': 2.0, 'original_max_position_embeddings': 4096,
                                     'attention_factor': 0.9}}),
    ('qwen2', {'rope_parameters': {'rope_type': 'yarn', 'rope_theta': 10000.0, 'factor': None, 'original_max_position_embeddings': 512}}),
    ('llama', {'rope_parameters': {'rope_type': 'llama3', 'rope_theta': 500000.0, 'factor': 32.0, 'low_freq_factor': 1.0,
                                   'high_freq_factor': 4.0, 'original_max_position_embeddings': 8192}}),
    ('llama', {'rope_theta': 50000.0, 'rope_scaling': {'type': 'linear', 'factor': 2.0}}),
    ('qwen3', {'rope_parameters': {'rope_type': 'dynamic', 'rope_theta': 1000000.0, 'factor': 4.0}, 'seq_len': 5000}),
    ('llama', {'rope_parameters': {'rope_type': 'default', 'rope_theta': 10000.0, 'partial_rotary_factor': 0.5}}),
    ('llama', {'rope_parameters': {'rope_type': 'llama3', 'rope_theta': 500000.0, 'factor': 8.0, 'low_freq_factor': 1.0,
                                   'high_freq_factor': 4.0, 'original_max_position_embeddings': 8192}, 'original_max_position_embeddings': 2048}),
]


def rope_cases():
    out = []
    for family, extra in ROPE_CASES:
        extra = copy.deepcopy(extra)
        seq_len = extra.pop('seq_len', None)
        kw = dict(vocab_size=16, hidden_size=64, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=2048)
        if family == 'qwen3':
            kw['head_dim'] = 32
        config = {'model_type': family, **kw, **extra}
        cfg = CLASSES[family](**{**kw, **copy.deepcopy(extra)})
        rot = transformers.AutoModelForCausalLM.from_config(cfg).model.rotary_emb
        if seq_len is not None:
            # what a forward whose last position is seq_len - 1 uses (dynamic_rope_update)
            rot(torch.zeros(1, 1, 64), torch.tensor([[seq_len - 1]]))
        out.append({'config': config, 'seq_len': seq_len, 'inv_freq': rot.inv_freq.tolist(),
                    'attention_scaling': float(rot.attention_scaling), 'rope_parameters': cfg.rope_parameters})
    return out


def config_4x(cfg5):
    """the same model as transformers 4.x wrote it: top-level rope_theta + rope_scaling, torch_dtype"""
    c = dict(cfg5)
    rp = dict(c.pop('rope_parameters'))
    c['rope_theta'] = rp.pop('rope_theta')
    c['rope_scaling'] = None if rp.get('rope_type') == 'default' else rp
    c['torch_dtype'] = c.pop('dtype')
    c['transformers_version'] = '4.51.0'
    return dict(sorted(c.items()))


def main():
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default='test/fixtures/hf5')
    args = ap.parse_args()
    major = int(transformers.__version__.split('.')[0])
    if major < 5:
        sys.exit(f'needs transformers >= 5 (found {transformers.__version__}): the point is the config 5.x writes')
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    g = torch.Generator().manual_seed(1234)
    prompt = torch.randint(3, SHAPE['vocab_size'], (1, PROMPT_LEN), generator=g)
    v = torch.randn(SHAPE['hidden_size'], generator=g)
    v = v / v.norm()
    delta = -STEER_ALPHA * v
    index = {'transformers': transformers.__version__, 'torch': torch.__version__, 'prompt': prompt[0].tolist(),
             'steer': {'layer': STEER_LAYER, 'alpha': STEER_ALPHA, 'vector': v.tolist()}, 'new_tokens': NEW_TOKENS, 'cases': {}}

    for n, (tag, family, rope, window) in enumerate(cases()):
        d = out / tag
        cfg = make_config(family, rope, window)
        # weights drawn until greedy and steered greedy have a clear top-1 margin and steering changes the ids
        for attempt in range(20):
            seed = 100 + 20 * n + attempt
            torch.manual_seed(seed)
            model = transformers.AutoModelForCausalLM.from_config(cfg)
            seeded_weights(model, seed)
            if (d / 'model').exists():
                shutil.rmtree(d / 'model')
            model.save_pretrained(d / 'model')
            hidden, logits, new_ids, step_logits, first_hidden = run(d / 'model', prompt)
            s_hidden, s_logits, s_ids, s_step, _ = run(d / 'model', prompt, (STEER_LAYER, delta))
            m = min(margin(step_logits), margin(s_step))
            if m > 1e-2 and s_ids != new_ids:
                break
        else:
            sys.exit(f'{tag}: no seed gave a robust fixture')
        saved = json.loads((d / 'model' / 'config.json').read_text())
        assert 'rope_parameters' in saved and 'rope_theta' not in saved and 'rope_scaling' not in saved, saved
        assert saved['transformers_version'].startswith('5.'), saved['transformers_version']

        # the feature under test must matter at this length: compare with the same weights without it
        checks = {}
        if rope != 'default':
            plain = copy.deepcopy(saved)
            plain['rope_parameters'] = {'rope_type': 'default', 'rope_theta': saved['rope_parameters']['rope_theta']}
            checks['vs_default_rope'] = relative_change(d, plain, prompt, logits)
        if window:
            plain = copy.deepcopy(saved)
            plain['sliding_window'] = None
            plain.pop('layer_types', None)
            plain['use_sliding_window'] = False
            checks['vs_full_attention'] = relative_change(d, plain, prompt, logits)
        for k, rel in checks.items():
            assert rel > 1e-2, f'{tag}: {k} relative logits change {rel} — the fixture would not test it'

        save_file({
            'hidden': hidden.contiguous(), 'logits': logits.contiguous(), 'step_logits': step_logits.contiguous(),
            'first_hidden': first_hidden.contiguous(), 'steer.hidden': s_hidden.contiguous(),
            'steer.logits': s_logits.contiguous(), 'steer.step_logits': s_step.contiguous(),
        }, str(d / 'refs.safetensors'), metadata={'format': 'pt'})
        index['cases'][tag] = {'family': family, 'rope': rope, 'window': WINDOW if window else None, 'greedy': new_ids,
                               'steered': s_ids, 'seed': seed, 'margin': round(m, 4), **{k: round(v, 4) for k, v in checks.items()}}
        print(f'{tag}: greedy {new_ids} steered {s_ids} margin {m:.3g} {checks}', file=sys.stderr)

        if tag == 'llama-llama3':
            # 4.x generation of keys: same weights, old config; transformers must resolve it to the same model
            d4 = out / 'llama-llama3-4x'
            (d4 / 'model').mkdir(parents=True)
            shutil.copy(d / 'model' / 'model.safetensors', d4 / 'model' / 'model.safetensors')
            shutil.copy(d / 'model' / 'generation_config.json', d4 / 'model' / 'generation_config.json')
            (d4 / 'model' / 'config.json').write_text(json.dumps(config_4x(saved), indent=2) + '\n')
            c4 = transformers.AutoConfig.from_pretrained(d4 / 'model')
            assert c4.rope_parameters == saved['rope_parameters'], (c4.rope_parameters, saved['rope_parameters'])
            h4, l4, ids4, _, _ = run(d4 / 'model', prompt)
            assert torch.equal(l4, logits) and ids4 == new_ids, '4.x config gives a different model'
            index['cases']['llama-llama3-4x'] = {**index['cases'][tag], 'same_refs_as': tag}

    (out / 'index.json').write_text(json.dumps(index, indent=1) + '\n')
    (out / 'rope-cases.json').write_text(json.dumps(rope_cases(), indent=1) + '\n')


def relative_change(d, cfg_dict, prompt, logits):
    tmp = d / '_plain'
    tmp.mkdir()
    shutil.copy(d / 'model' / 'model.safetensors', tmp / 'model.safetensors')
    (tmp / 'config.json').write_text(json.dumps(cfg_dict))
    model = load(tmp)
    with torch.no_grad():
        other = model(input_ids=prompt, use_cache=False).logits[0]
    shutil.rmtree(tmp)
    return float((other - logits).abs().max() / logits.abs().max())


if __name__ == '__main__':
    main()
