/**
 * Greedy `generate`: a prefill step (the prompt, left-padded), then one step per new token on the growing KV
 * buffer; stops per row at a stop id or maxNewTokens. Interventions with positions 'generated' leave the prefill
 * alone. Optional: the logits of every choice, the prompt's last and the first generated token's hidden states.
 */
import { SafekeepError } from '../../util/errors.ts';
import type { GenerateOptions, GenerateResult } from '../types.ts';
import { argmax } from './argmax.ts';
import { callInterventions, interventionInputs, leftPad, planChunks, type InterventionInputs } from './batch.ts';
import { checkIds } from './forward.ts';
import { generationHooks } from './hooked.ts';
import { hiddenRows, type StepHooks, type Stepper } from './step.ts';

export async function generate(s: Stepper, inputIds: number[][], opts: GenerateOptions): Promise<GenerateResult[]> {
  checkIds(inputIds, s.vocabSize);
  if (!Number.isInteger(opts.maxNewTokens) || opts.maxNewTokens < 0) {
    throw new SafekeepError(`maxNewTokens must be a non-negative integer, got ${opts.maxNewTokens}`);
  }
  // positions 'generated': the prompt (prefill) runs without those interventions, the decode steps with all
  const all = callInterventions(opts);
  const iv = {
    prefill: interventionInputs(s.numLayers, s.dModel, all.filter((x) => (x.positions ?? 'all') === 'all')),
    decode: interventionInputs(s.numLayers, s.dModel, all),
    hooks: generationHooks(s, opts.hooks),
  };
  const results: GenerateResult[] = new Array(inputIds.length);
  // prefill, then decode steps on up to T + maxNewTokens cached slots (past fed + present copied out)
  const fits = s.memoryFits((B, T) => [
    { batch: B, width: T, past: 0, hidden: B, logits: B, present: true },
    { batch: B, width: 1, past: T + opts.maxNewTokens, hidden: B, logits: B, present: true },
  ]);
  for (const chunk of planChunks(inputIds.map((ids) => ids.length), s.config.numHeads, s.maxBatchTokens, undefined, fits)) {
    // haltAfterPrefill sees the caller's row index, not the index within this internal batch
    const halt = opts.haltAfterPrefill;
    const chunkOpts = halt ? { ...opts, haltAfterPrefill: (b: number, h: Float32Array) => halt(chunk[b]!, h) } : opts;
    const rs = await generateBatch(s, chunk.map((i) => inputIds[i]!), chunkOpts, iv);
    chunk.forEach((i, b) => { results[i] = rs[b]!; });
  }
  return results;
}

async function generateBatch(s: Stepper, prompts: number[][], opts: GenerateOptions,
  iv: { prefill: InterventionInputs; decode: InterventionInputs; hooks: StepHooks | undefined }): Promise<GenerateResult[]> {
  const hooks = iv.hooks ? { hooks: iv.hooks } : {}; // edits at hook points: every prefill and decode step
  const stop = new Set(opts.stopIds ?? s.eosIds);
  const V = s.vocabSize;
  const d = s.dModel;
  const L1 = s.numLayers + 1;
  // cancelled before the prefill: nothing is computed
  if (opts.signal?.aborted) return prompts.map(() => ({ generatedIds: [], finish: 'cancelled' }));
  const pb = leftPad(prompts);
  const B = pb.batch;
  const lastSlots = pb.pads.map((p, b) => b * pb.width + p + pb.lengths[b]! - 1);
  const wantPromptHidden = !!opts.returnPromptLastHidden || !!opts.haltAfterPrefill;
  let out = await s.prefill({
    ids: pb.ids, batch: B, width: pb.width, starts: pb.pads, past: null, steer: iv.prefill.steer, project: iv.prefill, ...hooks,
    hiddenIndex: wantPromptHidden ? lastSlots : [],
    logitsIndex: opts.maxNewTokens > 0 ? lastSlots : [],
    reserve: opts.maxNewTokens, // the KV buffer gets room for the decode steps (up to KV_CHUNK, kv.ts)
  });
  const res: GenerateResult[] = prompts.map(() => ({ generatedIds: [], finish: 'length' }));
  const stepLogits: Float32Array[][] = prompts.map(() => []);
  const done = new Array<boolean>(B).fill(opts.maxNewTokens === 0);
  if (wantPromptHidden) {
    res.forEach((r, b) => {
      const h = hiddenRows(out.hidden, L1, B, d, b, 1);
      if (opts.returnPromptLastHidden) r.promptLastHidden = h;
      if (opts.haltAfterPrefill?.(b, h)) { done[b] = true; r.finish = 'halted'; }
    });
    if (done.every(Boolean)) {
      if (opts.returnStepLogits) res.forEach((r) => { r.stepLogits = new Float32Array(0); });
      return res;
    }
  }
  const wantFirstHidden = !!opts.returnFirstTokenHidden && opts.maxNewTokens > 0;
  for (let k = 0; ; k++) {
    // choose token k from the logits of the last step (rows = batch)
    const fed = new BigInt64Array(B);
    for (let b = 0; b < B; b++) {
      const r = res[b]!;
      if (!done[b]) {
        const row = out.logits.subarray(b * V, (b + 1) * V);
        const tok = argmax(row);
        r.generatedIds.push(tok);
        if (opts.returnStepLogits) stepLogits[b]!.push(row.slice());
        if (stop.has(tok)) { done[b] = true; r.finish = 'stop'; }
        else if (r.generatedIds.length >= opts.maxNewTokens) done[b] = true;
      }
      fed[b] = BigInt(r.generatedIds.at(-1) ?? 0);
    }
    // the step boundary: a caller that no longer wants the rows (a client gone) ends them here
    if (opts.signal?.aborted) {
      res.forEach((r, b) => { if (!done[b]) { done[b] = true; r.finish = 'cancelled'; } });
      break;
    }
    const needHidden = wantFirstHidden && k === 0;
    if (done.every(Boolean) && !needHidden) break;
    const all = Array.from({ length: B }, (_, b) => b);
    out = await s.step({
      ids: fed, batch: B, width: 1, starts: pb.pads, past: out.present!, steer: iv.decode.steer, project: iv.decode, ...hooks,
      hiddenIndex: needHidden ? all : [],
      logitsIndex: done.every(Boolean) ? [] : all,
      reserve: opts.maxNewTokens - k - 1,
    });
    if (needHidden) {
      res.forEach((r, b) => {
        if (r.finish === 'halted') return; // no first token was chosen
        r.firstTokenHidden = hiddenRows(out.hidden, L1, B, d, b, 1);
      });
      if (done.every(Boolean)) break;
    }
  }
  if (opts.returnStepLogits) {
    res.forEach((r, b) => {
      const rows = stepLogits[b]!;
      const m = new Float32Array(rows.length * V);
      rows.forEach((row, k) => m.set(row, k * V));
      r.stepLogits = m;
    });
  }
  return res;
}
