/**
 * Generation on the local engine as a harness task (steer's conditions, the behavioural refusal run): an item is a
 * fixed batch of rendered prompts (fixed, so one process and every shard decode exactly the same batches), the solver
 * one `engine.generate` call under the condition's steering / interventions — greedy, or sampled (`options.sampling`)
 * with `samples` answers per prompt, sample j seeded seed + j (one call per sample, in flight together) — the scorer
 * the outcome classifier (refusal / valid call / invalid). Each answer becomes one log line: what the model saw (the
 * rendered prompt), what it wrote, its label and reasons; a sampled answer's sample id is `<pair>#<j>`.
 */
import type { ToolSpec } from '../data/types.ts';
import type { GenerateOptions, GenerateResult } from '../engine/types.ts';
import { classifyOutput } from '../outcome/classify.ts';
import type { CallFormat, OutcomeLabel } from '../outcome/types.ts';
import { sampleId, type CallLog } from './log.ts';
import type { Task } from './runner.ts';

export interface GenerationPrompt {
  /** the sample (a pair id) */
  id: string;
  /** the rendered prompt and its token ids */
  text: string;
  ids: number[];
  /** the tools the output is classified against ([] = a chatbot prompt) */
  tools: readonly ToolSpec[];
}

export interface Generated {
  text: string;
  generatedIds: number[];
  finish: GenerateResult['finish'];
  label: OutcomeLabel;
  reasons: string[];
}

/** What the generation task needs from an opened model. */
export interface Generator {
  generate(ids: number[][], opts: GenerateOptions): Promise<GenerateResult[]>;
  decode(ids: number[]): string;
}

/** One batch of prompts; `start` = the index of its first prompt in the condition's list. */
export interface GenerationBatch {
  start: number;
  prompts: readonly GenerationPrompt[];
}

/** Fixed batches of `size` prompts, in order. */
export function generationBatches(prompts: readonly GenerationPrompt[], size: number): GenerationBatch[] {
  const out: GenerationBatch[] = [];
  for (let s = 0; s < prompts.length; s += size) out.push({ start: s, prompts: prompts.slice(s, s + size) });
  return out;
}

/** A generation with the evaluation's row and the per-answer share of the batch's wall time. */
export interface GeneratedRow<Row> {
  row: Row;
  generated: Generated;
  ms: number;
}

/** Which answer of a prompt a generation is: sample j of `samples`, drawn with `seed` (absent when greedy). */
export interface SampleIndex {
  sample: number;
  seed?: number;
}

/**
 * The task of one condition (`solver` names it in the log: `alpha=4`, `intervene-foo`, `chatbot`). `row` turns a
 * generation into the evaluation's own row (the generations files' line).
 */
export function generationTask<Row>(o: {
  name: string; solver: string; model: Generator; options: GenerateOptions; format: CallFormat;
  /** answers per prompt (default 1); above 1 needs `options.sampling` with a seed */
  samples?: number;
  row: (p: GenerationPrompt, g: Generated, at: SampleIndex) => Row;
}): Task<GenerationBatch, GeneratedRow<Row>[], Row> {
  const K = o.samples ?? 1;
  const seed = o.options.sampling?.seed;
  if (K > 1 && seed === undefined) throw new Error('generationTask: several samples per prompt need a sampling seed');
  const optionsOf = (j: number): GenerateOptions => (j === 0 ? o.options : { ...o.options, sampling: { ...o.options.sampling, seed: seed! + j } });
  /** rows are prompt-major: prompt i's sample j at i·K + j */
  const promptOf = (b: GenerationBatch, i: number) => b.prompts[Math.floor(i / K)]!;
  return {
    name: o.name,
    key: (b) => `${o.solver} × ${b.start}`,
    solve: async (b) => {
      const t0 = performance.now();
      const ids = b.prompts.map((p) => p.ids);
      const res = await Promise.all(Array.from({ length: K }, (_, j) => o.model.generate(ids, optionsOf(j))));
      const ms = (performance.now() - t0) / Math.max(1, b.prompts.length * K);
      return b.prompts.flatMap((p, i) => res.map((r, j) => {
        const g = r[i]!;
        const text = o.model.decode(g.generatedIds);
        const oc = classifyOutput(text, p.tools, o.format);
        const generated: Generated = { text, generatedIds: g.generatedIds, finish: g.finish, label: oc.label, reasons: oc.reasons };
        return { row: o.row(p, generated, { sample: j, ...(seed !== undefined ? { seed: seed + j } : {}) }), generated, ms };
      }));
    },
    samples: (b, rows) => rows.map(({ row, generated: g, ms }, i) => {
      const p = promptOf(b, i);
      const call: CallLog = {
        purpose: 'generate', messages: [{ role: 'prompt', content: p.text }], tools: p.tools.map((t) => t.function.name),
        content: g.text, toolCalls: [], promptTokens: p.ids.length, completionTokens: g.generatedIds.length, latencyMs: ms, cached: false, finish: g.finish,
      };
      return {
        format: 'safekeep-sample', id: sampleId(o.solver, K > 1 ? `${p.id}#${i % K}` : p.id), sample: p.id, solver: o.solver, calls: [call],
        scores: [{ scorer: 'outcome', value: g.label, explanation: g.reasons.join('; ') }],
        output: g.text, tokens: { prompt: p.ids.length, completion: g.generatedIds.length }, latencyMs: ms, row,
      };
    }),
  };
}
