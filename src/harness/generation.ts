/**
 * Greedy generation on the local engine as a harness task (steer's conditions, the behavioural refusal run): an
 * item is a fixed batch of rendered prompts (fixed, so one process and every shard decode exactly the same
 * batches), the solver one `engine.generate` call under the condition's steering / interventions, the scorer the
 * outcome classifier (refusal / valid call / invalid). Each prompt becomes one log line: what the model saw (the
 * rendered prompt), what it wrote, its label and reasons.
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

/** A generation with the evaluation's row and the per-prompt share of the batch's wall time. */
export interface GeneratedRow<Row> {
  row: Row;
  generated: Generated;
  ms: number;
}

/**
 * The task of one condition (`solver` names it in the log: `alpha=4`, `intervene-foo`, `chatbot`). `row` turns a
 * generation into the evaluation's own row (the generations files' line).
 */
export function generationTask<Row>(o: {
  name: string; solver: string; model: Generator; options: GenerateOptions; format: CallFormat;
  row: (p: GenerationPrompt, g: Generated) => Row;
}): Task<GenerationBatch, GeneratedRow<Row>[], Row> {
  return {
    name: o.name,
    key: (b) => `${o.solver} × ${b.start}`,
    solve: async (b) => {
      const t0 = performance.now();
      const res = await o.model.generate(b.prompts.map((p) => p.ids), o.options);
      const ms = (performance.now() - t0) / Math.max(1, b.prompts.length);
      return res.map((r, i) => {
        const p = b.prompts[i]!;
        const text = o.model.decode(r.generatedIds);
        const oc = classifyOutput(text, p.tools, o.format);
        const generated: Generated = { text, generatedIds: r.generatedIds, finish: r.finish, label: oc.label, reasons: oc.reasons };
        return { row: o.row(p, generated), generated, ms };
      });
    },
    samples: (b, rows) => rows.map(({ row, generated: g, ms }, i) => {
      const p = b.prompts[i]!;
      const call: CallLog = {
        purpose: 'generate', messages: [{ role: 'prompt', content: p.text }], tools: p.tools.map((t) => t.function.name),
        content: g.text, toolCalls: [], promptTokens: p.ids.length, completionTokens: g.generatedIds.length, latencyMs: ms, cached: false, finish: g.finish,
      };
      return {
        format: 'safekeep-sample', id: sampleId(o.solver, p.id), sample: p.id, solver: o.solver, calls: [call],
        scores: [{ scorer: 'outcome', value: g.label, explanation: g.reasons.join('; ') }],
        output: g.text, tokens: { prompt: p.ids.length, completion: g.generatedIds.length }, latencyMs: ms, row,
      };
    }),
  };
}
