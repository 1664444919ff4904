"""
Checks test/fixtures/sae against SAELens itself: its own inference classes (SAE.load_from_disk on every SAELens-folder
fixture) and its own Gemma Scope and Llama Scope loaders (hf_hub_download answered from the fixture folders, the
Llama Scope norm factor folded as from_pretrained folds its release table's), on the fixtures' inputs; prints the
largest difference from the expected values scripts/hf-fixtures/sae.py wrote (last run: 0 everywhere, bit-equal).

Needs a checkout of SAELens's source at the commit the fixtures cite (sae_lens/ is imported from it, not installed:
its package __init__ pulls in training dependencies), torch, safetensors, huggingface_hub, pyyaml, packaging. Stubs
stand in for what inference does not use: transformer_lens hook points (identities), einops / jaxtyping (type
helpers).

Usage: python3 scripts/hf-fixtures/sae_check_saelens.py SAELENS_CHECKOUT [test/fixtures/sae]
"""
import sys, types, json, logging
import torch
from torch import nn
SRC = sys.argv[1]
sys.path.insert(0, SRC)
# stubs
tl = types.ModuleType('transformer_lens'); hp = types.ModuleType('transformer_lens.hook_points')
class HookPoint(nn.Module):
    def forward(self, x): return x
class HookedRootModule(nn.Module):
    def setup(self): pass
hp.HookPoint = HookPoint; hp.HookedRootModule = HookedRootModule
sys.modules['transformer_lens'] = tl; sys.modules['transformer_lens.hook_points'] = hp
sys.modules['einops'] = types.ModuleType('einops')
jt = types.ModuleType('jaxtyping')
class _F:
    def __class_getitem__(cls, k): return torch.Tensor
jt.Float = _F; jt.Int = _F
sys.modules['jaxtyping'] = jt
pkg = types.ModuleType('sae_lens'); pkg.__path__ = [f'{SRC}/sae_lens']; pkg.__version__ = '6.18.0'; pkg.logger = logging.getLogger('sae_lens')
sys.modules['sae_lens'] = pkg
saes = types.ModuleType('sae_lens.saes'); saes.__path__ = [f'{SRC}/sae_lens/saes']; sys.modules['sae_lens.saes'] = saes
from sae_lens.registry import register_sae_class
from sae_lens.saes.sae import SAE
from sae_lens.saes.standard_sae import StandardSAE, StandardSAEConfig
from sae_lens.saes.jumprelu_sae import JumpReLUSAE, JumpReLUSAEConfig
from sae_lens.saes.topk_sae import TopKSAE, TopKSAEConfig
register_sae_class('standard', StandardSAE, StandardSAEConfig)
register_sae_class('jumprelu', JumpReLUSAE, JumpReLUSAEConfig)
register_sae_class('topk', TopKSAE, TopKSAEConfig)
from safetensors.torch import load_file
root = sys.argv[2] if len(sys.argv) > 2 else 'test/fixtures/sae'
index = json.load(open(f'{root}/index.json'))
worst = 0
for name, c in index['cases'].items():
    if c['layout'] not in ('saelens', 'saelens-bf16'):
        continue
    sae = SAE.load_from_disk(f'{root}/{name}', device='cpu', dtype='float32')
    ref = load_file(f'{root}/{name}.expected.safetensors')
    x = ref['x']
    with torch.no_grad():
        acts = sae.encode(x)
        recon = sae.decode(acts)
        # decode consumes the constant_norm_rescale state, so each decode follows its own encode
        e = sae.encode(x).clone(); e[:, c['edits']['ablate']] = 0; e[:, c['edits']['clamp']] = c['edits']['value']
        out = sae.decode(e)
        clean = sae.decode(sae.encode(x))
        spliced = out + (x - clean)
    d = max(float((acts - ref['acts']).abs().max()), float((recon - ref['recon']).abs().max()), float((spliced - ref['spliced']).abs().max()))
    worst = max(worst, d)
    print(f'{name}: SAELens vs our reference max |diff| {d:.2e}' + (f"; tie feature {c['tie']} at the one-hot row: {float(acts[-1, c['tie']])}" if 'tie' in c else ''))
sae = SAE.load_from_disk(f'{root}/splice-sae', device='cpu')
print('splice-sae loads:', type(sae).__name__, sae.cfg.metadata.hook_name)
print('worst', worst)

# the Gemma Scope and Llama Scope loaders, with hf_hub_download answering from the fixture folders
import sae_lens.loading.pretrained_sae_loaders as L
from sae_lens.saes.sae import SAE as _SAE
def run_loader(name, loader, repo_id, folder, local, fold=None):
    def fake(repo_id=None, filename=None, subfolder=None, force_download=False, **kw):
        f = filename if subfolder is None else f'{subfolder}/{filename}'
        return f'{local}/{f[len(folder) + 1:] if f.startswith(folder + "/") else f}'
    L.hf_hub_download = fake
    cfg, state, _ = loader(repo_id=repo_id, folder_name=folder, device='cpu', cfg_overrides={'d_in': 16, 'd_sae': 48})
    cfg = L.handle_config_defaulting(cfg)
    cls = get_cls(cfg['architecture'])
    sae = cls[0](cls[1].from_dict(cfg))
    sae.process_state_dict_for_loading(state)
    sae.load_state_dict(state)
    if fold is not None:
        sae.fold_activation_norm_scaling_factor(fold)
    sae = sae.to(torch.float32)
    ref = load_file(f'{root}/{name}.expected.safetensors')
    c = index['cases'][name]
    with torch.no_grad():
        x = ref['x']
        acts = sae.encode(x); recon = sae.decode(acts)
        e = acts.clone(); e[:, c['edits']['ablate']] = 0; e[:, c['edits']['clamp']] = c['edits']['value']
        spliced = sae.decode(e) + (x - recon)
    d = max(float((acts - ref['acts']).abs().max()), float((recon - ref['recon']).abs().max()), float((spliced - ref['spliced']).abs().max()))
    print(f'{name}: SAELens loader vs our reference max |diff| {d:.2e}')
from sae_lens.registry import get_sae_class as get_cls
p = index['cases']['gemma-scope-npz']['path']
run_loader('gemma-scope-npz', L.gemma_2_sae_huggingface_loader, 'google/gemma-scope-2b-pt-res', 'layer_1/width_16k/average_l0_10', f'{root}/{p}')
hp = json.load(open(f'{root}/llama-scope/hyperparams.json'))
s = hp['d_model'] ** 0.5 / hp['dataset_average_activation_norm']['in']
run_loader('llama-scope', L.llama_scope_sae_huggingface_loader, 'fnlp/Llama3_1-8B-Base-LX-8x', 'Llama3_1-8B-Base-L1R-8x', f'{root}/llama-scope', fold=s)
