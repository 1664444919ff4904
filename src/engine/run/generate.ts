/**
 * `generate` for many prompts (greedy, or sampled per `opts.sampling`): every row becomes a sequence of the engine's scheduler (scheduler.ts), so the
 * rows are continuously batched with each other and with whatever else is generating (concurrent calls, the local
 * chat backend): no padding, each row leaves its batch when it stops, long prompts are prefilled in chunks between
 * decode steps, and prompts sharing cached prefix blocks reuse their KV. Results equal one row at a time (float
 * rounding only). Interventions with positions 'generated' leave the prefill alone; hook edits (`opts.hooks`) apply at every position. `signal`: checked at every step
 * boundary; once aborted, the rows still generating end with finish 'cancelled' and the tokens so far.
 */
import type { GenerateOptions, GenerateResult } from './types.ts';
import { generationInputs } from './generation-inputs.ts';
import type { Scheduler } from './scheduler.ts';
import type { Stepper } from './step.ts';

export async function generate(s: Stepper, sched: Scheduler, inputIds: number[][], opts: GenerateOptions): Promise<GenerateResult[]> {
  const { prefillIv, decodeIv, hooks, sampling } = generationInputs(s, inputIds, opts);
  // every row with the call's sampling and its one seed (drawn once for the call when it named none)
  const rowOpts = sampling === opts.sampling ? opts : { ...opts, sampling };
  // haltAfterPrefill sees the caller's row index
  const halt = opts.haltAfterPrefill;
  return Promise.all(inputIds.map((ids, i) => sched.enqueue(ids, rowOpts, prefillIv, decodeIv, halt ? (h) => halt(i, h) : undefined, hooks)));
}
