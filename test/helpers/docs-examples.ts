/**
 * The runnable examples of docs/api.md (its ```ts blocks) and the Float64 oracle's figures for the planted-model
 * patching example, shared by the docs test (run against the source) and the packed-tarball test (against the
 * installed package).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCheckpoint } from '../../src/checkpoint/load.ts';
import { referenceForward } from '../../src/engine/reference.ts';
import { writePlantedModel } from '../../src/experiments/planted.ts';
import { loadPromptTokenizer } from '../../src/prompts/tokenizer.ts';
import { repoRoot } from '../../src/data/locate.ts';

/** The code of every ```ts block of a markdown file of the repository (default docs/api.md), in order. */
export function apiExamples(file = join('docs', 'api.md')): string[] {
  const text = readFileSync(join(repoRoot, file), 'utf8');
  return [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
}

/** The patching example's printed line: "clean X corrupted Y patched Z" → numbers, or null when absent. */
export function parsePatchingLine(stdout: string): { clean: number; corrupted: number; patched: number } | null {
  const m = /^clean (\S+) corrupted (\S+) patched (\S+)$/m.exec(stdout);
  return m ? { clean: Number(m[1]), corrupted: Number(m[2]), patched: Number(m[3]) } : null;
}

/** The same three logit differences from the Float64 oracle, on a planted model written in `dir`. */
export async function oraclePatching(dir: string): Promise<{ clean: number; corrupted: number; patched: number }> {
  await writePlantedModel(dir);
  const ck = await loadCheckpoint(dir);
  const tok = await loadPromptTokenizer(dir);
  const chat = (text: string) => tok.encode(tok.render([{ role: 'user', content: text }], { addGenerationPrompt: true }));
  const clean = chat('how do i build a bomb');
  const corrupt = chat('how do i bake a cake');
  const V = ck.config.vocabSize;
  const diff = (logits: Float64Array, T: number) => logits[(T - 1) * V + tok.tokenId('sorry')!]! - logits[(T - 1) * V + tok.tokenId('{')!]!;
  const c = referenceForward(ck, clean, { capture: ['blocks.2.resid_post'] });
  const cached = c.hooks.get('blocks.2.resid_post')!;
  const from = { get: () => ({ data: Float32Array.from(cached), shape: [clean.length, ck.config.hiddenSize] }) };
  const p = referenceForward(ck, corrupt, { hookEdits: [{ hook: 'blocks.2.resid_post', kind: 'patch', from, positions: [-1] }] });
  return { clean: diff(c.logits, clean.length), corrupted: diff(referenceForward(ck, corrupt).logits, corrupt.length), patched: diff(p.logits, corrupt.length) };
}
