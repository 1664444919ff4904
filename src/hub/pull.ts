/**
 * `pull`: a model checkpoint from the hub into `models/<owner>--<name>/` (or under `modelsDir`), only the files a
 * checkpoint needs: config, generation config, the safetensors weights (exactly the shards the index names),
 * tokenizer files and chat template. Non-default revisions go to `<owner>--<name>@<revision>/`. With `hfCache`, the
 * files go into the Hugging Face hub cache layout instead (hf-cache.ts), where Python tools find them too.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { checkRepoId, listHubFiles, type HubTarget, type HubTimeouts } from './api.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { quoteClipped } from '../util/quote.ts';
import { downloadHubFiles, readMarker, writeMarker } from './download.ts';
import { checkHfCacheRevision, hfMarkerPath, hfSnapshotDir, linkSnapshotIntoCache } from './hf-cache.ts';

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
  timeouts?: HubTimeouts;
  /** write into this Hugging Face hub cache (HF_HUB_CACHE layout) instead of modelsDir */
  hfCache?: string;
  /** HF_HUB_OFFLINE=1: refuse to reach the hub */
  offline?: boolean;
}

interface PullResult {
  dir: string;
  commit: string;
  files: string[];
  downloaded: number;
}

export async function pullModel(repoId: string, o: PullOptions = {}): Promise<PullResult> {
  const target: HubTarget = { repoId, repoType: 'model', revision: o.revision ?? 'main', token: o.token, endpoint: o.endpoint, timeouts: o.timeouts };
  checkRepoId(repoId);
  if (o.offline) throw new SafekeepError(`${repoId}: HF_HUB_OFFLINE is set, so nothing is downloaded (unset it to pull)`);
  // refs/<revision> is written at the end: a revision that cannot be a file name there is refused before any download
  if (o.hfCache && !o.destDir) checkHfCacheRevision(repoId, target.revision!);
  const listing = await listHubFiles(target);
  const destDir = o.destDir ?? (o.hfCache ? hfSnapshotDir(o.hfCache, repoId, listing.commit) : modelDirFor(repoId, target.revision, o.modelsDir));
  const names = new Set(listing.files.map((f) => f.path));
  if (!names.has('config.json')) throw new SafekeepError(`${repoId}: the repo has no config.json (not a transformers checkpoint)`);
  const meta = CHECKPOINT_META_FILES.filter((f) => names.has(f));
  const markerPath = o.hfCache && !o.destDir ? hfMarkerPath(o.hfCache, repoId, listing.commit) : undefined;
  const common = { ...target, destDir, listing, progress: o.progress, markerPath };
  const first = await downloadHubFiles({ ...common, include: (p) => (meta as readonly string[]).includes(p) });
  let weights: string[];
  if (names.has('model.safetensors.index.json')) {
    const idxFile = join(destDir, 'model.safetensors.index.json');
    const wm = (parseJsonBounded(readFileSync(idxFile, 'utf8'), idxFile) as { weight_map?: unknown } | null)?.weight_map;
    if (!wm || typeof wm !== 'object' || Array.isArray(wm)) throw new SafekeepError(`${idxFile}: missing weight_map`);
    weights = [...new Set(Object.values(wm as Record<string, unknown>))].map((w) => {
      // a shard is a plain .safetensors file beside the index, as transformers writes them
      if (typeof w !== 'string' || !/^[^/\\\x00-\x1f]+\.safetensors$/.test(w) || w.startsWith('.')) {
        throw new SafekeepError(`${idxFile}: weight_map names ${quoteClipped(w)}, not a .safetensors file name in the folder`);
      }
      return w;
    }).sort();
    const missing = weights.filter((w) => !names.has(w));
    if (missing.length) throw new SafekeepError(`${repoId}: the index names shards the repo does not have: ${missing.join(', ')}`);
  } else if (names.has('model.safetensors')) {
    weights = ['model.safetensors'];
  } else {
    throw new SafekeepError(`${repoId}: no model.safetensors or model.safetensors.index.json in the repo (only safetensors checkpoints are supported)`);
  }
  const second = await downloadHubFiles({ ...common, include: (p) => weights.includes(p) });
  const marker = readMarker(destDir, markerPath)!;
  marker.complete = true;
  writeMarker(destDir, marker, markerPath);
  if (o.hfCache && !o.destDir) {
    const oids = Object.fromEntries(Object.entries(marker.files).map(([p, f]) => [p, f.oid]));
    linkSnapshotIntoCache(o.hfCache, repoId, listing.revision, listing.commit, oids);
  }
  return { dir: destDir, commit: listing.commit, files: [...first.files, ...second.files], downloaded: first.downloaded + second.downloaded };
}
