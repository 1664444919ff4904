/**
 * A row's capture recorder (GenerateOptions.capture, a research server's per-request activations): the hidden states
 * of chosen prompt positions, taken from the sequence's own prefill steps; each fed-back generated token's, taken from
 * its row of the decode step; and captured hook points (outputs of the sequence's graph) at both. `finish` writes
 * what was recorded into the result.
 */
import { SafekeepError } from '../../util/errors.ts';
import { HOOK_IO } from '../graph/hooks.ts';
import type { GenerateOptions, GenerateResult } from './types.ts';
import type { StepOutput } from './step.ts';

export class CaptureRecorder {
  /** prompt positions whose hidden states are kept (null = none) */
  readonly promptPositions: readonly number[] | null;
  /** keep each fed-back generated token's hidden states */
  readonly generated: boolean;
  /** the hidden-state rows kept of each captured position (null: all L+1; [] none: hook points only) */
  readonly layers: readonly number[] | null;
  /** hook points captured (graph outputs) */
  readonly hooks: readonly string[];
  private readonly captured = new Map<number, Float32Array>();
  /** hook rows so far: prompt positions by position, generated in order */
  private readonly hookPrompt = new Map<number, Record<string, Float32Array>>();
  private hookGen: Record<string, Float32Array>[] = [];

  /** checks the request against a prompt of `promptLength` tokens and L = `layers` (a SafekeepError naming what is wrong) */
  constructor(capture: GenerateOptions['capture'], promptLength: number, numLayers: number) {
    capture?.layers?.forEach((l) => { if (!Number.isInteger(l) || l < 0 || l > numLayers) throw new SafekeepError(`capture: layer ${l} is not in 0..${numLayers}`); });
    const positions = capture && capture.promptPositions.length > 0 ? [...capture.promptPositions] : null;
    positions?.forEach((p, i) => {
      if (!Number.isInteger(p) || p < 0 || p >= promptLength) throw new SafekeepError(`capture: prompt position ${p} is outside a prompt of ${promptLength} tokens`);
      if (positions.indexOf(p) !== i) throw new SafekeepError(`capture: prompt position ${p} given twice`);
    });
    this.promptPositions = positions;
    this.generated = !!capture?.generated;
    this.layers = capture?.layers ? [...capture.layers] : null;
    this.hooks = capture?.hooks ?? [];
  }

  /** whether hidden-state rows are kept at all (a capture of hook points alone reads none) */
  get wantsHidden(): boolean {
    return this.layers?.length !== 0;
  }

  /** whether a decode step must return this row's hidden states */
  get wantsGeneratedHidden(): boolean {
    return this.generated && this.wantsHidden;
  }

  /** the captured prompt positions in [from, from + T) */
  promptIn(from: number, T: number): number[] {
    return this.promptPositions ? this.promptPositions.filter((p) => p >= from && p < from + T) : [];
  }

  /** the kept rows ([K, d]) of one position's hidden states [L+1, d] */
  keptLayers(h: Float32Array, d: number): Float32Array {
    const ls = this.layers;
    if (ls === null) return h;
    const out = new Float32Array(ls.length * d);
    ls.forEach((l, k) => out.set(h.subarray(l * d, (l + 1) * d), k * d));
    return out;
  }

  /** prompt position p's hidden states [L+1, d] */
  promptHidden(p: number, h: Float32Array, d: number): void {
    this.captured.set(p, this.keptLayers(h, d));
  }

  /** the captured hook points at prompt position p: row `row` of the step's outputs */
  promptHooks(p: number, out: StepOutput, row: number): void {
    this.hookPrompt.set(p, hookRow(out, this.hooks, row));
  }

  /** a generated token's hidden states [L+1, d] into the result */
  generatedHidden(result: GenerateResult, h: Float32Array, d: number): void {
    result.capturedGenerated!.push(this.keptLayers(h, d));
  }

  /** a generated token's captured hook points: row `row` of the decode step's outputs */
  generatedHooks(out: StepOutput, row: number): void {
    if (this.generated && this.hooks.length > 0) this.hookGen.push(hookRow(out, this.hooks, row));
  }

  /** what was recorded into the result (`L1` = L + 1 hidden rows, `d` = d_model), the recorder emptied */
  finish(result: GenerateResult, L1: number, d: number): void {
    if (this.promptPositions && this.wantsHidden) {
      // [K, n, d] in the order the positions were given (a cancelled or failed prefill leaves zeros)
      const K = this.layers?.length ?? L1;
      const n = this.promptPositions.length;
      const m = new Float32Array(K * n * d);
      this.promptPositions.forEach((p, i) => {
        const h = this.captured.get(p);
        for (let l = 0; h && l < K; l++) m.set(h.subarray(l * d, (l + 1) * d), (l * n + i) * d);
      });
      result.capturedPrompt = m;
      this.captured.clear();
    }
    if (this.hooks.length > 0) {
      const rows = [...(this.promptPositions ?? []).map((p) => this.hookPrompt.get(p)), ...this.hookGen];
      result.capturedHooks = Object.fromEntries(this.hooks.map((name) => {
        const w = rows.find((r) => r)?.[name]?.length ?? 0;
        const m = new Float32Array(rows.length * w);
        rows.forEach((r, i) => { if (r) m.set(r[name]!, i * w); });
        return [name, m];
      }));
      this.hookPrompt.clear();
      this.hookGen = [];
    }
  }
}

/** row `row` ([BT, width] flat row index) of each captured hook point's output of a step */
function hookRow(out: StepOutput, names: readonly string[], row: number): Record<string, Float32Array> {
  return Object.fromEntries(names.map((name) => {
    const o = out.hooks?.[HOOK_IO.output(name)];
    if (!o) throw new Error(`scheduler: the step returned no ${name}`);
    const w = o.dims[o.dims.length - 1]!;
    return [name, o.data.slice(row * w, (row + 1) * w)];
  }));
}
