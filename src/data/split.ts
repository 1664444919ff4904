/**
 * Deterministic extraction/evaluation split (paper: 7:3 by pair). The side of a pair depends only on the seed and
 * its group key (`pair.group ?? pair.id`), never on input order or on the prompt configuration, so every
 * configuration of a run uses the same split and variants of one behavior never straddle the two sides.
 */
import { createHash } from 'node:crypto';
import type { Pair, PairSet, Split } from './types.ts';

export const EXTRACTION_SHARE = 0.7;

/** Rank key of a group: sha256(seed:key) as hex (ties impossible in practice; broken by the key). */
function rankKey(seed: number, key: string): string {
  return createHash('sha256').update(`${seed}:${key}`).digest('hex');
}

function groupOf(p: Pair): string {
  return p.group ?? p.id;
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
