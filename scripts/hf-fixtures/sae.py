"""
Writes test/fixtures/sae/: small random sparse autoencoders in every layout safekeep reads, and what a torch
reference of SAELens's formulas computes with them (jbloomAus/SAELens @ 91ca16ccd0684e4dd6323cd4f23ded734339ec54:
sae_lens/saes/{sae,standard_sae,jumprelu_sae,topk_sae}.py; the layouts as sae_lens/loading/pretrained_sae_loaders.py
reads them). The reference is written here from those formulas, in float32, not imported from sae_lens.

Cases (folder test/fixtures/sae/<case>/ holds the SAE as its layout stores it; expected.safetensors beside it):
  saelens-standard, saelens-standard-bf16 (weights stored bf16, cfg dtype bfloat16), saelens-standard-cnr
  (constant_norm_rescale), saelens-jumprelu, saelens-jumprelu-ln (layer_norm, apply_b_dec_to_input false),
  saelens-topk, saelens-topk-rescale (rescale_acts_by_decoder_norm), gemma-scope-npz (params.npz, f32),
  gemma-scope-safetensors (params.safetensors), llama-scope (hyperparams.json + checkpoints/final.safetensors, bf16).
expected.safetensors: x [N, d_in], acts [N, d_sae], recon [N, d_in], spliced [N, d_in] (ablate feature e0, clamp
feature e1 to 2.5, with the error term), spliced_noerr (the same edits, no error term).
For every jumprelu case without normalization, x's last row is one-hot (1 at input 0), the weights are multiples of
2^-6 (so that row's pre-activations are exact in any summation order) and the threshold of feature `tie` equals that
row's pre-activation exactly, so SAELens's strict `>` zeroes it there (recorded in index.json).

Splice in a real forward (llama-default of test/fixtures/hf5, prompt from test/fixtures/hf5-hooks/index.json): a
jumprelu SAE at blocks.1.hook_resid_post (folder splice-sae/), transformers' logits with a forward hook on
model.layers[1] replacing its output by: the reconstruction (splice.recon.logits), the reconstruction with feature f
ablated plus the error term (splice.ablate.logits), and the SAE's activations at that point (splice.acts); and a
standard and a topk (rescaled) SAE of the same width (splice-standard/, splice-topk/): each architecture's
activations and reconstruction of that stream (splice-architectures.expected.safetensors).

Usage: python3 scripts/hf-fixtures/sae.py [--out test/fixtures/sae]
"""
import argparse
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
D_IN, D_SAE, N = 16, 48, 7
K = 6


def rand_sae(g, arch, d_in=D_IN, d_sae=D_SAE):
    w_dec = torch.randn(d_sae, d_in, generator=g) * 0.4
    s = {
        'W_enc': (w_dec.T + 0.1 * torch.randn(d_in, d_sae, generator=g)).contiguous(),
        'W_dec': w_dec.contiguous(),
        'b_enc': torch.randn(d_sae, generator=g) * 0.3,
        'b_dec': torch.randn(d_in, generator=g) * 0.2,
    }
    if arch == 'jumprelu':
        s['threshold'] = torch.rand(d_sae, generator=g) * 0.4
    return s


def norm_in(x, mode):
    """SAE._setup_activation_normalization: run_time_activation_norm_fn_in; returns (x', state)"""
    if mode == 'constant_norm_rescale':
        c = (x.shape[-1] ** 0.5) / x.norm(dim=-1, keepdim=True)
        return x * c, c
    if mode == 'layer_norm':
        mu = x.mean(dim=-1, keepdim=True)
        x = x - mu
        std = x.std(dim=-1, keepdim=True)
        return x / (std + 1e-5), (mu, std)
    return x, None


def norm_out(x, mode, st):
    if mode == 'constant_norm_rescale':
        return x / st
    if mode == 'layer_norm':
        mu, std = st
        return x * std + mu
    return x


def pre_acts(s, cfg, x):
    xin, st = norm_in(x, cfg['normalize'])
    sae_in = xin - s['b_dec'] * cfg['apply_b_dec']
    return sae_in @ s['W_enc'] + s['b_enc'], st


def act_fn(s, cfg, pre):
    if cfg['arch'] == 'standard':
        return torch.relu(pre)
    if cfg['arch'] == 'jumprelu':
        return torch.relu(pre) * (pre > s['threshold']).to(pre.dtype)
    if cfg.get('rescale'):
        pre = pre * s['W_dec'].norm(dim=-1)
    v, i = torch.topk(pre, k=cfg['k'], dim=-1, sorted=False)
    return torch.zeros_like(pre).scatter_(-1, i, v.relu())


def decode(s, cfg, acts, st):
    if cfg['arch'] == 'topk' and cfg.get('rescale'):
        acts = acts / s['W_dec'].norm(dim=-1)
    return norm_out(acts @ s['W_dec'] + s['b_dec'], cfg['normalize'], st)


def reference(s, cfg, x, edits):
    """acts, recon, spliced (edits + error term), spliced without the error term"""
    pre, st = pre_acts(s, cfg, x)
    acts = act_fn(s, cfg, pre)
    recon = decode(s, cfg, acts, st)
    e = acts.clone()
    e[:, edits[0]] = 0
    e[:, edits[1]] = 2.5
    out = decode(s, cfg, e, st)
    return acts, recon, out + (x - recon), out


def save_saelens(folder, s, cfg, dtype='float32'):
    folder.mkdir(parents=True, exist_ok=True)
    tdt = {'float32': torch.float32, 'bfloat16': torch.bfloat16}[dtype]
    save_file({k: v.to(tdt).contiguous() for k, v in s.items()}, str(folder / 'sae_weights.safetensors'))
    c = {'architecture': cfg['arch'], 'd_in': s['W_enc'].shape[0], 'd_sae': s['W_enc'].shape[1], 'dtype': dtype,
         'device': 'cpu', 'apply_b_dec_to_input': bool(cfg['apply_b_dec']), 'normalize_activations': cfg['normalize'],
         'reshape_activations': 'none',
         'metadata': {'model_name': 'tiny', 'hook_name': cfg.get('hook', 'blocks.1.hook_resid_post'), 'hook_head_index': None,
                      'prepend_bos': True, 'context_size': 128, 'sae_lens_version': '6.18.0'}}
    if cfg['arch'] == 'topk':
        c['k'] = cfg['k']
        c['rescale_acts_by_decoder_norm'] = bool(cfg.get('rescale'))
    (folder / 'cfg.json').write_text(json.dumps(c, indent=1) + '\n')


def write_npz(path, arrays):
    """np.savez layout (a stored zip of .npy); numpy's own writer"""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


def tie_threshold(s, cfg, x):
    """set one feature's threshold to the one-hot row's pre-activation exactly (a feature active without it)"""
    pre, _ = pre_acts(s, cfg, x[-1:])
    j = int(torch.argmax(pre[0]))
    assert pre[0, j] > 0
    s['threshold'][j] = pre[0, j]
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / 'test' / 'fixtures' / 'sae'))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(47)
    index = {'torch': torch.__version__, 'transformers': transformers.__version__, 'sae_lens_commit': '91ca16ccd0684e4dd6323cd4f23ded734339ec54', 'cases': {}}
    cases = [
        ('saelens-standard', {'arch': 'standard', 'apply_b_dec': True, 'normalize': 'none'}, 'saelens'),
        ('saelens-standard-bf16', {'arch': 'standard', 'apply_b_dec': True, 'normalize': 'none'}, 'saelens-bf16'),
        ('saelens-standard-cnr', {'arch': 'standard', 'apply_b_dec': True, 'normalize': 'constant_norm_rescale'}, 'saelens'),
        ('saelens-jumprelu', {'arch': 'jumprelu', 'apply_b_dec': True, 'normalize': 'none'}, 'saelens'),
        ('saelens-jumprelu-ln', {'arch': 'jumprelu', 'apply_b_dec': False, 'normalize': 'layer_norm'}, 'saelens'),
        ('saelens-topk', {'arch': 'topk', 'k': K, 'apply_b_dec': True, 'normalize': 'none'}, 'saelens'),
        ('saelens-topk-rescale', {'arch': 'topk', 'k': K, 'rescale': True, 'apply_b_dec': True, 'normalize': 'none'}, 'saelens'),
        ('gemma-scope-npz', {'arch': 'jumprelu', 'apply_b_dec': False, 'normalize': 'none'}, 'npz'),
        ('gemma-scope-safetensors', {'arch': 'jumprelu', 'apply_b_dec': False, 'normalize': 'none'}, 'gemma-st'),
        ('llama-scope', {'arch': 'jumprelu', 'apply_b_dec': False, 'normalize': 'none'}, 'llama-scope'),
    ]
    for name, cfg, layout in cases:
        s = rand_sae(g, cfg['arch'])
        x = torch.randn(N, D_IN, generator=g) * 1.5
        x[-1] = 0
        x[-1, 0] = 1.0
        folder = out / name
        entry = {'layout': layout, **cfg}
        if layout == 'saelens-bf16':
            s = {k: v.to(torch.bfloat16).to(torch.float32) for k, v in s.items()}
            save_saelens(folder, s, cfg, 'bfloat16')
        elif layout == 'llama-scope':
            # stored as Llama Scope does; SAELens's loader: bf16, threshold θ·s, then fold s (W_enc·s, W_dec/s, b_dec/s)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / 'checkpoints').mkdir(exist_ok=True)
            avg_in = 2.75
            theta = 0.05
            hp = {'d_model': D_IN, 'd_sae': D_SAE, 'hook_point_in': 'blocks.1.hook_resid_post', 'hook_point_out': 'blocks.1.hook_resid_post',
                  'jump_relu_threshold': theta, 'dataset_average_activation_norm': {'in': avg_in, 'out': avg_in}, 'act_fn': 'jumprelu',
                  'apply_decoder_bias_to_pre_encoder': False, 'norm_activation': 'dataset-wise', 'top_k': 50}
            (folder / 'hyperparams.json').write_text(json.dumps(hp, indent=1) + '\n')
            bf = torch.bfloat16
            save_file({'encoder.weight': s['W_enc'].T.contiguous().to(bf), 'encoder.bias': s['b_enc'].to(bf),
                       'decoder.weight': s['W_dec'].T.contiguous().to(bf), 'decoder.bias': s['b_dec'].to(bf)},
                      str(folder / 'checkpoints' / 'final.safetensors'))
            sf = D_IN ** 0.5 / avg_in
            w = {k: s[k].to(bf) for k in ['W_enc', 'W_dec', 'b_enc', 'b_dec']}
            w['threshold'] = torch.ones(D_SAE, dtype=bf) * (theta * sf)
            w['W_enc'] = w['W_enc'] * sf
            w['W_dec'] = w['W_dec'] / sf
            w['b_dec'] = w['b_dec'] / sf
            s = {k: v.to(torch.float32) for k, v in w.items()}
        else:
            if cfg['arch'] == 'jumprelu' and cfg['normalize'] == 'none':
                # multiples of 2^-6: the one-hot row's pre-activations are exact in any summation order
                s = {k: torch.round(v * 64) / 64 for k, v in s.items()}
                entry['tie'] = tie_threshold(s, cfg, x)
            if layout == 'saelens':
                save_saelens(folder, s, cfg)
            else:
                # the paths the Hub uses (the loader reads the hook from them)
                folder = (out / name / 'gemma-scope-2b-pt-res' / 'layer_1' / 'width_16k' / 'average_l0_10' if layout == 'npz'
                          else out / name / 'gemma-scope-2-1b-pt' / 'resid_post_all' / 'layer_1_width_16k_l0_big')
                folder.mkdir(parents=True, exist_ok=True)
                arrays = {'w_enc': s['W_enc'], 'w_dec': s['W_dec'], 'b_enc': s['b_enc'], 'b_dec': s['b_dec'], 'threshold': s['threshold']}
                if layout == 'npz':
                    write_npz(folder / 'params.npz', {k: v.numpy() for k, v in arrays.items()})
                    # the same arrays deflated (np.savez_compressed), to read the other zip method
                    np.savez_compressed(out / f'{name}.compressed.npz', **{k: v.numpy() for k, v in arrays.items()})
                else:
                    save_file({k: v.contiguous() for k, v in arrays.items()}, str(folder / 'params.safetensors'))
                entry['path'] = str(folder.relative_to(out))
        edits = [3, 5]
        acts, recon, spliced, noerr = reference(s, cfg, x, edits)
        if 'tie' in entry:
            assert acts[-1, entry['tie']] == 0
        entry['edits'] = {'ablate': edits[0], 'clamp': edits[1], 'value': 2.5}
        entry['l0'] = float((acts > 0).float().sum(-1).mean())
        save_file({'x': x.contiguous(), 'acts': acts.contiguous(), 'recon': recon.contiguous(), 'spliced': spliced.contiguous(),
                   'spliced_noerr': noerr.contiguous()}, str(out / f'{name}.expected.safetensors'))
        index['cases'][name] = entry
        print(f'{name}: L0 {entry["l0"]:.2f}, FVU {float(((x - recon) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()):.3f}')
    splice_case(out, g, index)
    (out / 'index.json').write_text(json.dumps(index, indent=1) + '\n')


def splice_case(out, g, index):
    """the SAE spliced into a real forward by a forward hook on model.layers[1] (blocks.1.resid_post = hidden[2])"""
    model = transformers.AutoModelForCausalLM.from_pretrained(ROOT / 'test' / 'fixtures' / 'hf5' / 'llama-default' / 'model',
                                                              dtype=torch.float32, attn_implementation='eager').eval()
    d = model.config.hidden_size
    ids = json.loads((ROOT / 'test' / 'fixtures' / 'hf5-hooks' / 'index.json').read_text())['clean']
    cfg = {'arch': 'jumprelu', 'apply_b_dec': True, 'normalize': 'none', 'hook': 'blocks.1.hook_resid_post'}
    s = rand_sae(g, 'jumprelu', d, 4 * d)
    s['threshold'] = torch.rand(4 * d, generator=g) * 0.2
    save_saelens(out / 'splice-sae', s, cfg)
    got = {}

    def run(replace):
        def hook(_m, _i, o):
            h = o[0] if isinstance(o, tuple) else o
            pre, st = pre_acts(s, cfg, h[0])
            acts = act_fn(s, cfg, pre)
            got['acts'] = acts
            new = replace(h[0], acts, st).unsqueeze(0)
            return (new,) + tuple(o[1:]) if isinstance(o, tuple) else new
        hd = model.model.layers[1].register_forward_hook(hook)
        with torch.no_grad():
            lg = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
        hd.remove()
        return lg

    plain = run(lambda h, a, st: h)
    acts = got['acts']
    f = int(torch.argmax((acts > 0).float().sum(0)))
    recon = run(lambda h, a, st: decode(s, cfg, a, st))

    def ablate(h, a, st):
        e = a.clone()
        e[:, f] = 0
        return decode(s, cfg, e, st) + (h - decode(s, cfg, a, st))
    abl = run(ablate)
    assert float((abl - plain).abs().max()) > 1e-3 and float((recon - plain).abs().max()) > 1e-3
    save_file({'splice.acts': acts.contiguous(), 'splice.plain.logits': plain.contiguous(), 'splice.recon.logits': recon.contiguous(),
               'splice.ablate.logits': abl.contiguous()}, str(out / 'splice.expected.safetensors'))
    index['splice'] = {'model': 'test/fixtures/hf5/llama-default/model', 'ids': ids, 'hook': cfg['hook'], 'ablate_feature': f,
                       'recon_logit_change': round(float((recon - plain).abs().max()), 4), 'ablate_logit_change': round(float((abl - plain).abs().max()), 4)}
    print(f'splice: ablate feature {f}; logit change recon {index["splice"]["recon_logit_change"]}, ablate {index["splice"]["ablate_logit_change"]}')
    # every architecture at the model's width (splice-standard, splice-topk beside splice-sae), for the commands on a
    # real-architecture checkpoint: their activations and reconstruction of transformers' stream at blocks.1.hook_resid_post
    h = {}
    hd = model.model.layers[1].register_forward_hook(lambda _m, _i, o: h.__setitem__('x', (o[0] if isinstance(o, tuple) else o)[0].detach().clone()))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), use_cache=False)
    hd.remove()
    more = {}
    for arch, extra in [('standard', {}), ('topk', {'k': 8, 'rescale': True})]:
        c = {'arch': arch, 'apply_b_dec': True, 'normalize': 'none', 'hook': 'blocks.1.hook_resid_post', **extra}
        sa = rand_sae(g, arch, d, 4 * d)
        save_saelens(out / f'splice-{arch}', sa, c)
        pre, st = pre_acts(sa, c, h['x'])
        a = act_fn(sa, c, pre)
        more[f'{arch}.acts'] = a.contiguous()
        more[f'{arch}.recon'] = decode(sa, c, a, st).contiguous()
    more['jumprelu.acts'] = acts.contiguous()
    more['jumprelu.recon'] = decode(s, cfg, acts, None).contiguous()
    save_file(more, str(out / 'splice-architectures.expected.safetensors'))


if __name__ == '__main__':
    main()
