/**
 * The memory stage's recovery (S³, A-MemGuard's idea: a retrieved entry that does not fit the task is not used):
 * a poisoned entry is dropped before the model sees it, the others are kept. An entry is poisoned when a risky
 * check's evidence names it (`memory <id>`) or quotes its text (whitespace-normalised, at least MIN_QUOTE_WORDS
 * words for a model's quote; any length for a rule's match); when a risky check's evidence names no entry, every
 * entry is dropped (fail closed, counted as a fallback). A write the guard flags is not stored.
 */
import type { MemoryEntry } from './event.ts';
import { normalizeText } from './normalize.ts';
import { MIN_QUOTE_WORDS, type RiskyRun } from './recovery.ts';

const squash = (s: string): string => normalizeText(s).replace(/\s+/g, ' ').trim().toLowerCase();

/** The entries a risky run's evidence identifies. */
function named(r: RiskyRun, entries: readonly MemoryEntry[]): Set<string> {
  const out = new Set<string>();
  const quote = r.result.verdict !== null; // a model's answer (llm) quotes; a rule matches exact text
  for (const ev of r.result.evidence) {
    const id = /\bmemory\s+([\w.-]+)/i.exec(ev)?.[1];
    if (id && entries.some((x) => x.id === id)) { out.add(id); continue; }
    const span = squash(ev.replace(/^\[memory [\w.-]+\]\s*/i, ''));
    if (!span || (quote && span.split(' ').length < MIN_QUOTE_WORDS)) continue;
    for (const x of entries) if (squash(x.content).includes(span)) out.add(x.id);
  }
  return out;
}

export interface MemoryRecovery {
  kept: MemoryEntry[];
  dropped: MemoryEntry[];
  /** a risky check named no entry: every entry was dropped */
  fallback: boolean;
}

export function recoverMemory(entries: readonly MemoryEntry[], risky: readonly RiskyRun[]): MemoryRecovery {
  const drop = new Set<string>();
  let fallback = false;
  for (const r of risky) {
    const ids = named(r, entries);
    if (ids.size === 0) fallback = true;
    for (const id of ids) drop.add(id);
  }
  if (fallback) return { kept: [], dropped: [...entries], fallback: true };
  return { kept: entries.filter((x) => !drop.has(x.id)), dropped: entries.filter((x) => drop.has(x.id)), fallback: false };
}
