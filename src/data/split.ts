/**
 * Deterministic extraction/evaluation split (paper: 7:3; we split 7:3 by group so no scenario is on both sides). The side of a pair depends only on the seed and
 * its group key (`pair.group ?? pair.id`), never on input order or on the prompt configuration, so every
 * configuration of a run uses the same split and variants of one behavior never straddle the two sides.
 */
import { sha256Hex } from '../util/hash.ts';
import type { Pair, PairSet, Split } from './types.ts';

const EXTRACTION_SHARE = 0.7;

/** Rank key of a group: sha256(seed:key) as hex (ties impossible in practice; broken by the key). */
function rankKey(seed: number, key: string): string {
  return sha256Hex(`${seed}:${key}`);
}

/** The split and resampling unit of a pair: its group (scenario, AgentHarm behavior stem), else the pair itself. */
export function groupOf(p: Pair): string {
  return p.group ?? p.id;
}

/** pair id → group, for the analyses' group bootstrap and group CV folds */
export function groupMap(pairs: readonly Pair[]): Map<string, string> {
  return new Map(pairs.map((p) => [p.id, groupOf(p)]));
}

/** Number of groups on each side of a split. */
export function splitGroupCounts(pairs: readonly Pair[], split: Split): { extraction: number; evaluation: number } {
  const g = groupMap(pairs);
  const count = (ids: readonly string[]) => new Set(ids.map((id) => g.get(id) ?? id)).size;
  return { extraction: count(split.extraction), evaluation: count(split.evaluation) };
}

const byId = (a: string, b: string): number => a.localeCompare(b, 'en', { numeric: true });

/**
 * Groups are ordered by their seeded hash; the first round(0.7 · groups) go to extraction.
 * Both lists are returned sorted by id.
 */
export function splitPairs(set: PairSet | readonly Pair[], seed = 0, share = EXTRACTION_SHARE): Split {
  const pairs = Array.isArray(set) ? (set as readonly Pair[]) : (set as PairSet).pairs;
  const groups = [...new Set(pairs.map(groupOf))];
  const ranked = groups
    .map((g) => ({ g, k: rankKey(seed, g) }))
    .sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.g < b.g ? -1 : a.g > b.g ? 1 : 0));
  const nExtract = Math.round(share * ranked.length);
  const extractGroups = new Set(ranked.slice(0, nExtract).map((r) => r.g));
  const extraction: string[] = [];
  const evaluation: string[] = [];
  for (const p of pairs) (extractGroups.has(groupOf(p)) ? extraction : evaluation).push(p.id);
  return { seed, extraction: extraction.sort(byId), evaluation: evaluation.sort(byId) };
}
