/**
 * `pull`: a model checkpoint from the hub into `models/<owner>--<name>/` (or under `modelsDir`), only the files a
 * checkpoint needs: config, generation config, the safetensors weights (exactly the shards the index names),
 * tokenizer files and chat template. Non-default revisions go to `<owner>--<name>@<revision>/`.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { checkRepoId, listHubFiles, type HubTarget } from './api.ts';
import { downloadHubFiles, readMarker, writeMarker } from './download.ts';

/** Small files taken when present (tokenizer and template as well as config). */
const CHECKPOINT_META_FILES = [
  'config.json',
  'generation_config.json',
  'model.safetensors.index.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'chat_template.jinja',
  'tokenizer.model',
] as const;

/**
 * Local folder of a hub model id: `<modelsDir>/owner--name` (`@rev` appended for revisions other than main).
 * `modelsDir` defaults to models/ (the CLI passes $SAFEKEEP_MODELS).
 */
export function modelDirFor(repoId: string, revision = 'main', modelsDir?: string): string {
  checkRepoId(repoId);
  const base = repoId.replace('/', '--');
  const rev = revision === 'main' ? '' : `@${revision.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
  return join(resolve(modelsDir || 'models'), base + rev);
}

interface PullOptions {
  revision?: string;
  token?: string;
  endpoint?: string;
  /** root of hub checkpoints (default models/) */
  modelsDir?: string;
  /** default modelDirFor(repoId, revision, modelsDir) */
  destDir?: string;
  progress?: boolean;
}

interface PullResult {
  dir: string;
  commit: string;
  files: string[];
  downloaded: number;
}

export async function pullModel(repoId: string, o: PullOptions = {}): Promise<PullResult> {
  const target: HubTarget = { repoId, repoType: 'model', revision: o.revision ?? 'main', token: o.token, endpoint: o.endpoint };
  const destDir = o.destDir ?? modelDirFor(repoId, target.revision, o.modelsDir);
  const listing = await listHubFiles(target);
  const names = new Set(listing.files.map((f) => f.path));
  if (!names.has('config.json')) throw new SafekeepError(`${repoId}: the repo has no config.json (not a transformers checkpoint)`);
  const meta = CHECKPOINT_META_FILES.filter((f) => names.has(f));
  const common = { ...target, destDir, listing, progress: o.progress };
  const first = await downloadHubFiles({ ...common, include: (p) => (meta as readonly string[]).includes(p) });
  let weights: string[];
  if (names.has('model.safetensors.index.json')) {
    const idxFile = join(destDir, 'model.safetensors.index.json');
    let wm: unknown;
    try {
      wm = (JSON.parse(readFileSync(idxFile, 'utf8')) as { weight_map?: unknown }).weight_map;
    } catch (e) {
      throw new SafekeepError(`${idxFile}: invalid JSON (${(e as Error).message})`);
    }
    if (!wm || typeof wm !== 'object') throw new SafekeepError(`${idxFile}: missing weight_map`);
    weights = [...new Set(Object.values(wm as Record<string, string>))].sort();
    const missing = weights.filter((w) => !names.has(w));
    if (missing.length) throw new SafekeepError(`${repoId}: the index names shards the repo does not have: ${missing.join(', ')}`);
  } else if (names.has('model.safetensors')) {
    weights = ['model.safetensors'];
  } else {
    throw new SafekeepError(`${repoId}: no model.safetensors or model.safetensors.index.json in the repo (only safetensors checkpoints are supported)`);
  }
  const second = await downloadHubFiles({ ...common, include: (p) => weights.includes(p) });
  const marker = readMarker(destDir)!;
  marker.complete = true;
  writeMarker(destDir, marker);
  return { dir: destDir, commit: listing.commit, files: [...first.files, ...second.files], downloaded: first.downloaded + second.downloaded };
}
