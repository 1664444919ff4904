/**
 * `--model` accepts a folder or a hub id: an existing folder is used as is; `owner/name` is pulled into
 * models/ on first use (a complete earlier download is reused without touching the network).
 */
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { REPO_ID } from './api.ts';
import { readMarker } from './download.ts';
import { modelDirFor, pullModel } from './pull.ts';

export function looksLikeRepoId(s: string): boolean {
  return REPO_ID.test(s) && !s.startsWith('.') && !s.includes('..');
}

/** Where hub ids go and how to reach the hub (the CLI fills them from SAFEKEEP_MODELS, HF_ENDPOINT, HF_TOKEN). */
export interface HubSettings {
  modelsDir?: string;
  endpoint?: string;
  token?: string;
  /** download progress bars on stderr (default true; SAFEKEEP_QUIET turns them off) */
  progress?: boolean;
}

export async function resolveModel(idOrDir: string, hub: HubSettings = {}): Promise<string> {
  if (existsSync(idOrDir)) {
    if (!statSync(idOrDir).isDirectory()) throw new SafekeepError(`--model ${idOrDir}: not a folder (give the checkpoint folder)`);
    return resolve(idOrDir);
  }
  if (!looksLikeRepoId(idOrDir)) throw new SafekeepError(`--model ${idOrDir}: no such folder, and not a Hugging Face repo id (owner/name)`);
  const dir = modelDirFor(idOrDir, 'main', hub.modelsDir);
  const m = readMarker(dir);
  if (m && m.complete && m.repo_id === idOrDir) return dir;
  process.stderr.write(`--model ${idOrDir}: no such folder; pulling it from the hub into ${dir}\n`);
  return (await pullModel(idOrDir, { ...hub, destDir: dir })).dir;
}
