/**
 * Sparse autoencoders from the hub. A dictionary repository holds many SAEs in subfolders (Gemma Scope:
 * `layer_12/width_16k/average_l0_71/params.npz`; SAELens releases: `<hook>/cfg.json` + `sae_weights.safetensors`;
 * Llama Scope: `<name>/hyperparams.json` + `<name>/checkpoints/final.safetensors`), so a pull names the subfolder and
 * takes only that SAE's files, at their repo paths under `models/<owner>--<name>/`. `--sae owner/name/sub/folder`
 * is resolved as `--model` is: a folder here; the pulled folder; the Hugging Face hub cache's snapshot (where Python's
 * hf_hub_download put it); else, unless offline, pulled on first use.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { checkRepoId, listHubFiles, repoPathProblem, type HubTarget } from './api.ts';
import { downloadHubFiles } from './download.ts';
import { hfCacheRepoDir } from './hf-cache.ts';
import { modelDirFor } from './pull.ts';
import { looksLikeLocalPath, looksLikeRepoId, type HubSettings } from './resolve.ts';

/** The files an SAE folder is made of (SAELens, Gemma Scope, Llama Scope). */
const SAE_FILES = ['cfg.json', 'sae_weights.safetensors', 'params.npz', 'params.safetensors', 'hyperparams.json', 'checkpoints/final.safetensors'];

const holdsSae = (dir: string): boolean => SAE_FILES.some((f) => existsSync(join(dir, f)));

function checkSubfolder(sub: string): void {
  if (sub === '') return;
  const problem = repoPathProblem(sub);
  if (problem || sub.split('/').some((p) => p === '..' || p === '.')) throw new SafekeepError(`SAE subfolder '${sub}': not a repo folder path (${problem ?? 'relative segment'})`);
}

export async function pullSae(repoId: string, subfolder: string, o: HubSettings & { revision?: string; destDir?: string } = {}): Promise<{ dir: string; commit: string; files: string[]; downloaded: number }> {
  checkRepoId(repoId);
  checkSubfolder(subfolder);
  if (o.offline) throw new SafekeepError(`${repoId}: HF_HUB_OFFLINE is set, so nothing is downloaded (unset it to pull)`);
  const target: HubTarget = { repoId, repoType: 'model', revision: o.revision ?? 'main', token: o.token, endpoint: o.endpoint, timeouts: o.timeouts };
  const listing = await listHubFiles(target);
  const prefix = subfolder === '' ? '' : `${subfolder.replace(/\/+$/, '')}/`;
  const wanted = new Set(SAE_FILES.map((f) => prefix + f));
  const found = listing.files.filter((f) => wanted.has(f.path));
  if (found.length === 0) throw new SafekeepError(`${repoId}: no SAE in '${subfolder || '/'}' (looked for ${SAE_FILES.join(', ')})`);
  const destDir = o.destDir ?? modelDirFor(repoId, target.revision, o.modelsDir);
  const r = await downloadHubFiles({ ...target, destDir, listing, include: (p) => wanted.has(p), progress: o.progress });
  return { dir: join(destDir, subfolder), commit: r.commit, files: r.files, downloaded: r.downloaded };
}

/** `--sae`: a folder or file here, or `owner/name[/sub/folder]` (pulled, cached or pulled now). */
export async function resolveSae(spec: string, hub: HubSettings = {}): Promise<string> {
  if (existsSync(spec)) return spec;
  if (looksLikeLocalPath(spec, hub.modelsDir)) throw new SafekeepError(`--sae ${spec}: no such folder or file`);
  const parts = spec.split('/');
  const repoId = parts.slice(0, 2).join('/');
  const sub = parts.slice(2).join('/');
  if (!looksLikeRepoId(repoId)) throw new SafekeepError(`--sae ${spec}: no such folder, and not owner/name[/subfolder] of a Hugging Face repo`);
  checkSubfolder(sub);
  const pulled = join(modelDirFor(repoId, 'main', hub.modelsDir), sub);
  if (holdsSae(pulled)) return pulled;
  if (hub.hfCache) {
    const repoDir = hfCacheRepoDir(hub.hfCache, repoId);
    try {
      const commit = readFileSync(join(repoDir, 'refs', 'main'), 'utf8').trim();
      const snap = join(repoDir, 'snapshots', commit, sub);
      if (/^[0-9a-f]{40}$/.test(commit) && statSync(snap).isDirectory() && holdsSae(snap)) return snap;
    } catch { /* not in the cache */ }
  }
  if (hub.offline) throw new SafekeepError(`--sae ${spec}: not downloaded (looked in ${pulled}${hub.hfCache ? ` and the Hugging Face cache ${hub.hfCache}` : ''}) and HF_HUB_OFFLINE is set`);
  process.stderr.write(`--sae ${spec}: pulling it from the hub into ${pulled}\n`);
  return (await pullSae(repoId, sub, hub)).dir;
}
