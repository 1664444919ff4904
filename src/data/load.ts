/**
 * `loadPairSet(source)`: the one entry point from a data source name to validated pairs.
 *   'pairs'      → the bundled set in data/pairs/
 *   'agentharm'  → the AgentHarm copy found by `locateDataset('agentharm')` (176 + 32 pairs)
 *   a path       → a pair file or folder (see pairfile.ts), or a folder holding an AgentHarm copy
 */
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { agentHarmPairs, isAgentHarmDir, readAgentHarm } from './agentharm.ts';
import { readInjecAgentCases, type InjecAgentCase, type InjecAgentSetting } from './injecagent.ts';
import { sha256Hex } from '../util/hash.ts';
import { canonicalJson } from './jsonfile.ts';
import { bundledPairsDir, locateDataset, type DataDirs } from './locate.ts';
import { readPairs } from './pairfile.ts';
import type { Pair, PairSet } from './types.ts';

/** sha256 over the canonical JSON of the pairs (order matters; key order does not). */
export function hashPairs(pairs: readonly Pair[]): string {
  return sha256Hex(canonicalJson(pairs));
}

function makeSet(name: string, pairs: Pair[]): PairSet {
  return { name, pairs, hash: hashPairs(pairs) };
}

function loadPath(path: string, name: string): PairSet {
  if (statSync(path).isDirectory() && isAgentHarmDir(path)) return makeSet(name, agentHarmPairs(readAgentHarm(path)));
  return makeSet(name, readPairs(path).pairs);
}

export async function loadPairSet(source: string, dirs: DataDirs = {}): Promise<PairSet> {
  if (source === 'pairs') return loadPath(bundledPairsDir, 'pairs');
  if (source === 'agentharm') return loadPath(locateDataset('agentharm', dirs), 'agentharm');
  const path = resolve(source);
  if (!existsSync(path)) {
    throw new SafekeepError(`data source '${source}' not found: expected 'pairs', 'agentharm', or a path to a pair file or folder`);
  }
  return loadPath(path, source);
}

/** InjecAgent cases of one setting (1,054 each: 510 direct harm + 544 data stealing) from the located copy. */
export function loadInjecAgent(setting: InjecAgentSetting, dirs: DataDirs = {}): InjecAgentCase[] {
  return readInjecAgentCases(locateDataset('injecagent', dirs), setting);
}
