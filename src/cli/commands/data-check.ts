/**
 * `safekeep data check [SOURCE] [--seed N] [--json]`: load and validate a pair source ('pairs' = bundled, default;
 * 'agentharm'; a pair file or folder) or 'injecagent', and print its statistics. A bad row exits 2 with the file,
 * row and problem.
 */
import { parseArgs, numberValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { loadInjecAgent, loadPairSet } from '../../data/load.ts';
import { groupOf, splitGroupCounts, splitPairs } from '../../data/split.ts';
import type { PairSet } from '../../data/types.ts';
import { dataDirsEnv } from '../env.ts';

export const summary = 'validate a pair set (pairs, agentharm, a file/folder) or injecagent and print its statistics';

export const flags: FlagTable = {
  usage: 'data check [pairs|agentharm|injecagent|PATH] [--seed N] [--json]',
  positionals: 'the source to check: pairs (bundled, default), agentharm, injecagent, or a pair file/folder',
  flags: [
    { name: 'seed', value: 'N', default: '0', help: 'split seed for the 7:3 extraction/evaluation counts' },
    { name: 'json', boolean: true, help: 'print the statistics as JSON' },
  ],
  example: 'data check agentharm --json',
};

interface PairSetStats {
  name: string;
  hash: string;
  pairs: number;
  categories: Record<string, number>;
  /** distinct tool names */
  tools: number;
  toolsPerPair: { min: number; max: number; mean: number };
  /** mean prompt length in characters */
  meanChars: { harmful: number; benign: number };
  /** largest harmful/benign character-length ratio over pairs */
  maxLengthRatio: number;
  /** split and resampling groups (scenario; AgentHarm behavior stem): pairs per group */
  groups: { count: number; minPairs: number; maxPairs: number };
  split: { seed: number; extraction: number; evaluation: number; groups: { extraction: number; evaluation: number } };
}

function pairSetStats(set: PairSet, seed = 0): PairSetStats {
  const categories: Record<string, number> = {};
  const tools = new Set<string>();
  let tMin = Infinity, tMax = 0, tSum = 0, hc = 0, bc = 0, ratio = 1;
  for (const p of set.pairs) {
    categories[p.category] = (categories[p.category] ?? 0) + 1;
    for (const t of p.tools) tools.add(t.function.name);
    tMin = Math.min(tMin, p.tools.length);
    tMax = Math.max(tMax, p.tools.length);
    tSum += p.tools.length;
    hc += p.harmful.prompt.length;
    bc += p.benign.prompt.length;
    const a = p.harmful.prompt.length, b = p.benign.prompt.length;
    ratio = Math.max(ratio, Math.max(a, b) / Math.min(a, b));
  }
  const n = set.pairs.length || 1;
  const sp = splitPairs(set, seed);
  const perGroup = new Map<string, number>();
  for (const p of set.pairs) perGroup.set(groupOf(p), (perGroup.get(groupOf(p)) ?? 0) + 1);
  const sizes = [...perGroup.values()];
  const sorted = Object.fromEntries(Object.entries(categories).sort(([a], [b]) => a.localeCompare(b)));
  return {
    name: set.name,
    hash: set.hash,
    pairs: set.pairs.length,
    categories: sorted,
    tools: tools.size,
    toolsPerPair: { min: set.pairs.length ? tMin : 0, max: tMax, mean: +(tSum / n).toFixed(2) },
    meanChars: { harmful: Math.round(hc / n), benign: Math.round(bc / n) },
    maxLengthRatio: +ratio.toFixed(3),
    groups: { count: perGroup.size, minPairs: sizes.length ? Math.min(...sizes) : 0, maxPairs: sizes.length ? Math.max(...sizes) : 0 },
    split: { seed, extraction: sp.extraction.length, evaluation: sp.evaluation.length, groups: splitGroupCounts(set.pairs, sp) },
  };
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  if (args.positionals.length > 1) throw new SafekeepError('usage: safekeep data check [pairs|agentharm|injecagent|PATH] [--seed N] [--json]');
  const source = args.positionals[0] ?? 'pairs';
  const seed = numberValue(args, 'seed', 0);
  if (source === 'injecagent') {
    const out: Record<string, Record<string, number>> = {};
    for (const s of ['base', 'enhanced'] as const) {
      const cases = loadInjecAgent(s, dataDirsEnv());
      out[s] = { cases: cases.length, direct_harm: cases.filter((c) => c.attack === 'dh').length, data_stealing: cases.filter((c) => c.attack === 'ds').length };
    }
    process.stdout.write(args.booleans.has('json') ? JSON.stringify(out, null, 2) + '\n'
      : Object.entries(out).map(([s, o]) => `injecagent ${s}: ${o.cases} cases (${o.direct_harm} direct harm, ${o.data_stealing} data stealing)`).join('\n') + '\n');
    return 0;
  }
  const st = pairSetStats(await loadPairSet(source, dataDirsEnv()), seed);
  if (args.booleans.has('json')) {
    process.stdout.write(JSON.stringify(st, null, 2) + '\n');
    return 0;
  }
  const cats = Object.entries(st.categories).map(([c, k]) => `${c} ${k}`).join(', ');
  process.stdout.write(
    [
      `${st.name}: ${st.pairs} pairs, ${Object.keys(st.categories).length} categories, ${st.tools} distinct tools (hash ${st.hash.slice(0, 12)})`,
      `  categories: ${cats}`,
      `  tools per pair: ${st.toolsPerPair.min}–${st.toolsPerPair.max} (mean ${st.toolsPerPair.mean})`,
      `  mean prompt length: harmful ${st.meanChars.harmful} chars, benign ${st.meanChars.benign} chars; max ratio ${st.maxLengthRatio}`,
      `  groups (scenario / behavior; split and resampling unit): ${st.groups.count}, ${st.groups.minPairs}–${st.groups.maxPairs} pairs each`,
      `  split (seed ${st.split.seed}, group-disjoint): ${st.split.extraction} extraction / ${st.split.evaluation} evaluation pairs; ` +
        `${st.split.groups.extraction} / ${st.split.groups.evaluation} groups`,
    ].join('\n') + '\n',
  );
  return 0;
}
