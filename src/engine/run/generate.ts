/**
 * Greedy `generate` for many prompts: every row becomes a sequence of the engine's scheduler (scheduler.ts), so the
 * rows are continuously batched with each other and with whatever else is generating (concurrent calls, the local
 * chat backend): no padding, each row leaves its batch when it stops, long prompts are prefilled in chunks between
 * decode steps, and prompts sharing cached prefix blocks reuse their KV. Results equal one row at a time (float
 * rounding only). Interventions with positions 'generated' leave the prefill alone; hook edits (`opts.hooks`) apply at every position. `signal`: checked at every step
 * boundary; once aborted, the rows still generating end with finish 'cancelled' and the tokens so far.
 */
import { SafekeepError } from '../../util/errors.ts';
import type { GenerateOptions, GenerateResult } from './types.ts';
import { callInterventions, interventionInputs } from './batch.ts';
import { checkIds } from './forward.ts';
import { generationHooks } from './hooked.ts';
import type { Scheduler } from './scheduler.ts';
import type { Stepper } from './step.ts';

export async function generate(s: Stepper, sched: Scheduler, inputIds: number[][], opts: GenerateOptions): Promise<GenerateResult[]> {
  checkIds(inputIds, s.vocabSize);
  if (!Number.isInteger(opts.maxNewTokens) || opts.maxNewTokens < 0) {
    throw new SafekeepError(`maxNewTokens must be a non-negative integer, got ${opts.maxNewTokens}`);
  }
  const all = callInterventions(opts);
  const prefill = interventionInputs(s.numLayers, s.dModel, all.filter((x) => (x.positions ?? 'all') === 'all'));
  const decode = interventionInputs(s.numLayers, s.dModel, all);
  // haltAfterPrefill sees the caller's row index
  const halt = opts.haltAfterPrefill;
  // edits at hook points: every prefill and decode step of each row
  const hooks = generationHooks(s, opts.hooks);
  return Promise.all(inputIds.map((ids, i) => sched.enqueue(ids, opts, prefill, decode, halt ? (h) => halt(i, h) : undefined, hooks)));
}
