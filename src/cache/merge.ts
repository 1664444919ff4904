/**
 * Joins activation-cache parts computed by shards into the caches one process would write (cache/store.ts's
 * `assembleCaches`, so the tensors are byte-identical). Each shard folder holds `cache/<names>.parts/` with
 * `pass.json` (the pass's rows, batch plan and manifest) and the part files of its own batches. Every batch must
 * come from exactly one shard, and every shard must describe the pass identically.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { assembleCaches, partFileName, passIsComplete, type PassRecord } from './store.ts';

interface ShardParts {
  /** shard name for messages, e.g. shard-2-of-4 */
  name: string;
  /** the shard's parts root (holds `<names>.parts/`) */
  dir: string;
}

export interface MergedPass {
  names: string[];
  /** true when the caches were already complete (nothing assembled) */
  cached: boolean;
  batches: number;
}

export function mergeCacheParts(cacheDir: string, shards: readonly ShardParts[]): MergedPass[] {
  const passes = new Map<string, Array<{ shard: ShardParts; record: PassRecord; text: string }>>();
  for (const s of shards) {
    if (!existsSync(s.dir)) continue;
    for (const e of readdirSync(s.dir, { withFileTypes: true })) {
      if (!e.isDirectory() || !e.name.endsWith('.parts')) continue;
      const path = join(s.dir, e.name, 'pass.json');
      if (!existsSync(path)) throw new SafekeepError(`${join(s.dir, e.name)}: no pass.json (shard ${s.name} was interrupted before planning; rerun it)`);
      const text = readFileSync(path, 'utf8');
      passes.set(e.name, [...(passes.get(e.name) ?? []), { shard: s, record: JSON.parse(text) as PassRecord, text }]);
    }
  }
  const out: MergedPass[] = [];
  for (const [partsName, entries] of [...passes].sort(([a], [b]) => a.localeCompare(b))) {
    const ref = entries[0]!;
    const differ = entries.filter((e) => e.text !== ref.text);
    if (differ.length) {
      throw new SafekeepError(`${partsName}: shards planned different passes (rows, batches or manifest): ${ref.shard.name} vs ${differ.map((e) => e.shard.name).join(', ')}`);
    }
    const p = ref.record;
    if (passIsComplete(cacheDir, p)) {
      out.push({ names: p.names, cached: true, batches: p.batches.length });
      continue;
    }
    const owner: string[] = [];
    const missing: number[] = [];
    const dups: string[] = [];
    for (let b = 0; b < p.batches.length; b++) {
      const have = entries.filter((e) => existsSync(join(e.shard.dir, partsName, partFileName(b))));
      if (have.length === 0) missing.push(b);
      else if (have.length > 1) dups.push(`batch ${b} in ${have.map((e) => e.shard.name).join(' and ')}`);
      owner.push(have[0] ? join(have[0].shard.dir, partsName, partFileName(b)) : '');
    }
    if (dups.length) throw new SafekeepError(`${partsName}: duplicate parts: ${dups.join('; ')}`);
    if (missing.length) throw new SafekeepError(`${partsName}: batches ${missing.join(', ')} of ${p.batches.length} are in no shard; rerun the shard that owns them`);
    assembleCaches(cacheDir, p, (b) => owner[b]!);
    out.push({ names: p.names, cached: false, batches: p.batches.length });
  }
  return out;
}
