/**
 * test/fixtures/hf5 (scripts/hf-fixtures/generate.py): transformers 5's own checkpoints and outputs, committed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readAllF32 } from './engine.ts';
import { repoRoot } from './shared.ts';

export const HF5 = join(repoRoot, 'test', 'fixtures', 'hf5');

export interface Hf5Case { family: string; rope: string; window: number | null; greedy: number[]; steered: number[]; same_refs_as?: string }
export interface Hf5Index { transformers: string; prompt: number[]; steer: { layer: number; alpha: number; vector: number[] }; new_tokens: number; cases: Record<string, Hf5Case> }

export const hf5Index = (): Hf5Index => JSON.parse(readFileSync(join(HF5, 'index.json'), 'utf8')) as Hf5Index;

/** refs of a case: hidden, logits, step_logits, first_hidden, steer.hidden, steer.logits, steer.step_logits */
export const hf5Refs = (tag: string, c: Hf5Case) => readAllF32(join(HF5, c.same_refs_as ?? tag, 'refs.safetensors'));
