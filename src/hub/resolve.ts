/**
 * `--model` accepts a folder or a hub id. In order:
 *   1. an existing folder is used as is;
 *   2. a name that looks like a path (`./x`, `/x`, `~/x`, `x/`, or whose first part is an existing folder, e.g.
 *      `models/nope`) and does not exist is "no such folder", never a hub lookup;
 *   3. `owner/name` already pulled into models/ (complete) is used without touching the network;
 *   4. `owner/name` in the Hugging Face hub cache (HF_HUB_CACHE / HF_HOME, e.g. downloaded by Python) is used there;
 *   5. with HF_HUB_OFFLINE=1, anything else is an error naming where it looked;
 *   6. otherwise it is pulled into models/ on first use (`safekeep pull --hf-cache` writes the hub cache instead).
 */
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { REPO_ID, type HubTimeouts } from './api.ts';
import { readMarker } from './download.ts';
import { findCachedSnapshot } from './hf-cache.ts';
import { modelDirFor, pullModel } from './pull.ts';

export function looksLikeRepoId(s: string): boolean {
  return REPO_ID.test(s) && !s.startsWith('.') && !s.includes('..');
}

/** A name the user meant as a path: explicit path syntax, or a first segment that is a folder here. */
export function looksLikeLocalPath(s: string, modelsDir?: string): boolean {
  if (/^(\.{1,2}([/\\]|$)|[/\\~])/.test(s) || /[/\\]$/.test(s) || s.includes('\\')) return true;
  const first = s.split('/')[0]!;
  if (first === 'models' || (modelsDir && resolve(first) === resolve(modelsDir))) return true;
  try {
    return s.includes('/') && statSync(first).isDirectory();
  } catch {
    return false;
  }
}

/** Where hub ids go and how to reach the hub (the CLI fills them from the environment, cli/env.ts). */
export interface HubSettings {
  modelsDir?: string;
  endpoint?: string;
  token?: string;
  /** download progress bars on stderr (default true; SAFEKEEP_QUIET turns them off) */
  progress?: boolean;
  /** request time limits (HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT) */
  timeouts?: HubTimeouts;
  /** the Hugging Face hub cache (HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) */
  hfCache?: string;
  /** HF_HUB_OFFLINE=1: never reach the hub */
  offline?: boolean;
}

export async function resolveModel(idOrDir: string, hub: HubSettings = {}): Promise<string> {
  if (existsSync(idOrDir)) {
    if (!statSync(idOrDir).isDirectory()) throw new SafekeepError(`--model ${idOrDir}: not a folder (give the checkpoint folder)`);
    return resolve(idOrDir);
  }
  if (looksLikeLocalPath(idOrDir, hub.modelsDir)) throw new SafekeepError(`--model ${idOrDir}: no such folder`);
  if (!looksLikeRepoId(idOrDir)) throw new SafekeepError(`--model ${idOrDir}: no such folder, and not a Hugging Face repo id (owner/name)`);
  const dir = modelDirFor(idOrDir, 'main', hub.modelsDir);
  const m = readMarker(dir);
  if (m && m.complete && m.repo_id === idOrDir) return dir;
  const cached = hub.hfCache ? findCachedSnapshot(hub.hfCache, idOrDir) : null;
  if (cached) return cached;
  if (hub.offline) {
    throw new SafekeepError(`--model ${idOrDir}: not downloaded (looked in ${dir}${hub.hfCache ? ` and the Hugging Face cache ${hub.hfCache}` : ''}) and HF_HUB_OFFLINE is set`);
  }
  process.stderr.write(`--model ${idOrDir}: no such folder; pulling it from the hub into ${dir}\n`);
  return (await pullModel(idOrDir, { ...hub, hfCache: undefined, destDir: dir })).dir;
}
