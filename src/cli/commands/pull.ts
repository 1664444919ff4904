/**
 * `safekeep pull <owner/name> [--revision R]`: download a checkpoint from the Hugging Face hub into
 * models/<owner>--<name>/ ($SAFEKEEP_MODELS overrides models/), or with --hf-cache into the Hugging Face hub cache
 * (HF_HUB_CACHE / HF_HOME) where Python tools find it. HF_TOKEN for gated repos, HF_ENDPOINT for mirrors,
 * --timeout (or HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT) bounds every wait for the hub.
 */
import { parseArgs, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { pullModel } from '../../hub/pull.ts';
import { pullSae } from '../../hub/pull-sae.ts';
import { formatBytes } from '../../hub/progress.ts';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { hubEnv, parseTimeoutSeconds, quietEnv } from '../env.ts';

export const summary = 'download a model (safetensors, config, tokenizer) from the Hugging Face hub into models/';

export const flags: FlagTable = {
  usage: 'pull <owner/name> [--revision R] [--out DIR | --hf-cache] [--subfolder FOLDER] [--timeout S] [--quiet]',
  positionals: 'the Hugging Face repo id',
  flags: [
    { name: 'revision', value: 'R', default: 'main', help: 'branch, tag or commit' },
    { name: 'out', value: 'DIR', default: 'models/<owner>--<name>', help: 'destination folder' },
    { name: 'hf-cache', boolean: true, help: 'write into the Hugging Face hub cache (HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), shared with Python' },
    { name: 'timeout', value: 'S', default: '10 (HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT)', help: 'seconds to wait for a listing, a response or the next chunk of a download' },
    { name: 'quiet', boolean: true, help: 'no progress on stderr' },
    { name: 'subfolder', value: 'FOLDER', help: "a sparse autoencoder in that folder of the repo (cfg.json + sae_weights.safetensors, params.npz, hyperparams.json, …): only its files, into models/<owner>--<name>/FOLDER" },
  ],
  example: 'pull Qwen/Qwen3-0.6B',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  if (args.positionals.length !== 1) throw new SafekeepError(`usage: safekeep ${flags.usage}`);
  const repoId = args.positionals[0]!;
  const hub = hubEnv();
  const timeout = args.values.get('timeout');
  const timeouts = timeout === undefined ? hub.timeouts : { metadataMs: parseTimeoutSeconds('--timeout', timeout), downloadMs: parseTimeoutSeconds('--timeout', timeout) };
  const out = args.values.get('out');
  const hfCache = args.booleans.has('hf-cache');
  if (hfCache && out !== undefined) throw new SafekeepError('pull: give --out DIR or --hf-cache, not both');
  const subfolder = args.values.get('subfolder');
  if (subfolder !== undefined) {
    if (hfCache) throw new SafekeepError('pull --subfolder writes models/ (or --out); --hf-cache is for checkpoints');
    const r = await pullSae(repoId, subfolder, { ...hub, timeouts, revision: args.values.get('revision'), ...(out ? { destDir: out } : {}), progress: !args.booleans.has('quiet') && !quietEnv() });
    process.stdout.write(`${repoId}@${r.commit.slice(0, 12)}/${subfolder} → ${r.dir} (${r.files.length} files; ${r.downloaded} downloaded)\n`);
    return 0;
  }
  const r = await pullModel(repoId, {
    ...hub,
    timeouts,
    hfCache: hfCache ? hub.hfCache : undefined,
    revision: args.values.get('revision'),
    destDir: out,
    progress: !args.booleans.has('quiet') && !quietEnv(),
  });
  const bytes = r.files.reduce((a, f) => a + statSync(join(r.dir, f)).size, 0);
  process.stdout.write(`${repoId}@${r.commit.slice(0, 12)} → ${r.dir} (${r.files.length} files, ${formatBytes(bytes)}; ${r.downloaded} downloaded, ${r.files.length - r.downloaded} already present)\n`);
  return 0;
}
