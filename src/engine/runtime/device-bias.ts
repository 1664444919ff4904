/**
 * A decode step's attention bias made on the device (webgpu), so that nothing crossing per step grows with the
 * context. The bias is [B, 1, C + 1] floats — 4 bytes a slot of every row — and was the one host tensor of a decode
 * step whose size follows the KV buffer's capacity C; this graph builds it from the rows' starts and two scalars
 * (4·B + 8 bytes), with the values kv.ts `capacityBias` gives for one new slot, bit for bit (each entry is 0 or MASKED).
 *
 * For width 1 on a buffer of capacity C holding P filled slots, row b with first real slot s_b:
 *   column j < C (buffer slot j) is visible iff from_b ≤ j < P;  column C (the new slot P) iff from_b ≤ P;
 *   from_b = s_b, or max(s_b, P − W + 1) on sliding-window layers (window W).
 * The graph runs that as `slot(j) ≥ from_b ∧ (j < P ∨ j = C)` with slot(j) = j for j < C and P for j = C.
 */
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../graph/onnx/builder.ts';
import { DataType } from '../graph/onnx/proto.ts';
import { IO, MASKED } from '../graph/io.ts';
import { countRun, type TransferCounter } from './transfer.ts';

/**
 * starts [B], past [1] (P), capacity [1] (C), window [1] (W; only when `windowed`) → attn_bias [B, 1, C + 1] and, when
 * windowed, attn_bias_window [B, 1, C + 1]. Slot indices are float32 (exact to 2^24 slots): WebGPU kernels take f32
 * Range, comparisons and Where, where int64 nodes would fall back to the CPU and their [B, C + 1] result cross.
 */
export function decodeBiasGraph(windowed: boolean): Uint8Array {
  const g = new GraphBuilder();
  addDecodeBias(g, windowed);
  return g.encode('decode_bias');
}

/** the bias's inputs and outputs added to `g` (also to the KV append graph, which makes the next step's bias: device-kv.ts) */
export function addDecodeBias(g: GraphBuilder, windowed: boolean): void {
  const F = DataType.FLOAT;
  const starts = g.input('starts', F, ['batch']);
  const P = g.input('past', F, [1]);
  const C = g.input('capacity', F, [1]);
  const cols = g.op('Range', [g.f32([0], []), g.op('Squeeze', [g.op('Add', [C, g.f32([1])]), g.i64([0])]), g.f32([1], [])]); // [C + 1]: j
  const last = g.op('Equal', [cols, C]); // column C: the new slot
  const slot = g.op('Where', [last, P, cols]); // slot(j)
  const filled = g.op('Less', [slot, g.op('Where', [last, g.op('Add', [P, g.f32([1])]), P])]); // j < P; the new slot P < P + 1
  const rowStart = g.op('Unsqueeze', [starts, g.i64([1])]); // [B, 1]
  const zero = g.f32([0], []), masked = g.f32([MASKED], []);
  const bias = (from: string, name: string): void => {
    const inRow = g.op('Where', [filled, zero, masked]); // [C + 1]
    const b = g.op('Where', [g.op('GreaterOrEqual', [slot, from]), inRow, masked]); // [B, C + 1]
    g.output(name, g.op('Unsqueeze', [b, g.i64([1])]), F, ['batch', 1, 'total']);
  };
  bias(rowStart, IO.attnBias);
  if (windowed) {
    const W = g.input('window', F, [1]);
    // max(s_b, P − W + 1)
    bias(g.op('Max', [rowStart, g.op('Add', [g.op('Sub', [P, W]), g.f32([1], [1])])]), IO.attnBiasWindow);
  }
}

/** the feeds of `addDecodeBias`'s inputs */
export function decodeBiasFeeds(starts: readonly number[], past: number, capacity: number, window: number | null): Record<string, ort.Tensor> {
  const f32 = (xs: readonly number[]) => new ort.Tensor('float32', Float32Array.from(xs), [xs.length]);
  const feeds: Record<string, ort.Tensor> = { starts: f32(starts), past: f32([past]), capacity: f32([capacity]) };
  if (window !== null) feeds.window = f32([window]);
  return feeds;
}

/** a decode step's bias tensors, on the device */
export interface DecodeBias { bias: ort.Tensor; window: ort.Tensor | null }

/** biases made ahead and not yet used, at most this many (one per decode group stepping in turn) */
const KEPT_MAX = 8;

export class DeviceBias {
  private session: Promise<ort.InferenceSession> | null = null;

  /**
   * `providers`: the engine's device first (webgpu), its outputs left on the device; `window`: the model's sliding
   * window (null: none)
   */
  constructor(private readonly providers: ort.InferenceSession.SessionOptions, private readonly window: number | null, private readonly transfer: TransferCounter) {}

  /** biases made ahead (by the KV append run of the step before), by `key` */
  private readonly kept = new Map<string, DecodeBias>();

  /**
   * The bias tensors ([B, 1, C + 1], on the device) of one decode step: one kept for exactly these starts, P and C,
   * else made by this graph's run. The caller disposes them after its run.
   */
  async make(starts: readonly number[], past: number, capacity: number): Promise<DecodeBias> {
    const key = biasKey(starts, past, capacity);
    const kept = this.kept.get(key);
    if (kept) {
      this.kept.delete(key);
      return kept;
    }
    this.session ??= ort.InferenceSession.create(decodeBiasGraph(this.window !== null), this.providers);
    const s = await this.session;
    const feeds = decodeBiasFeeds(starts, past, capacity, this.window);
    const out = await s.run(feeds);
    countRun(this.transfer, feeds, out);
    return { bias: out[IO.attnBias]!, window: this.window !== null ? out[IO.attnBiasWindow]! : null };
  }

  /** a bias made ahead for a later step with these starts, P and C (the oldest kept one dropped past KEPT_MAX) */
  keep(starts: readonly number[], past: number, capacity: number, made: DecodeBias): void {
    const key = biasKey(starts, past, capacity);
    const old = this.kept.get(key);
    if (old) disposeBias(old);
    this.kept.delete(key);
    this.kept.set(key, made);
    for (const [k, b] of this.kept) {
      if (this.kept.size <= KEPT_MAX) break;
      this.kept.delete(k);
      disposeBias(b);
    }
  }

  async release(): Promise<void> {
    for (const b of this.kept.values()) disposeBias(b);
    this.kept.clear();
    await (await this.session?.catch(() => null))?.release();
    this.session = null;
  }
}

const biasKey = (starts: readonly number[], past: number, capacity: number): string => `${past}/${capacity}/${starts.join(',')}`;

/** release a bias's device tensors */
export function disposeBias(b: DecodeBias): void {
  b.bias.dispose();
  b.window?.dispose();
}
