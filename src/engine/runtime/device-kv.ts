/**
 * K/V kept on the device (webgpu): the small graphs that write and read a KV buffer that lives in device memory, so a
 * decode step's cache never crosses to the host. onnxruntime-node 1.30 gives device outputs (`preferredOutputLocation:
 * 'gpu-buffer'`) that can be fed back as inputs to any session on the same device, but `getData()` on one aborts the
 * process (src/engine/README.md, GPU): every host read goes through `readback`, a session run whose outputs are CPU.
 *
 * - `append`: a decode step's new slot (the model's `new_kv` output, left on the device) written at slot P of every
 *   row of every layer's buffer [B, kvH, C, hd]: Where(slot = P, new, past) per layer — a device-side copy of the
 *   buffer into a new device buffer (onnxruntime cannot write an input in place), no host bytes but the slot index
 *   and, when the engine asks, the rows' starts for the next step's attention bias (device-bias.ts), made in the
 *   same run.
 * - `readback`: device tensors → host arrays (Identity with CPU outputs): the new slots of a prefill the host keeps,
 *   or a decode buffer before the scheduler re-lays it out (rows joining or leaving).
 */
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../graph/onnx/builder.ts';
import { DataType } from '../graph/onnx/proto.ts';
import { IO } from '../graph/io.ts';
import type { KvDType } from '../graph/config.ts';
import { addDecodeBias, decodeBiasFeeds, type DecodeBias } from './device-bias.ts';
import { countRun, type TransferCounter } from './transfer.ts';

type KvArray = Float32Array | Uint16Array;

// one intra-op thread: the CPU share of these graphs is a few int64 shape nodes
export const DEVICE_SESSION: ort.InferenceSession.SessionOptions = { executionProviders: ['webgpu', 'cpu'], logSeverityLevel: 4, graphOptimizationLevel: 'all', intraOpNumThreads: 1, interOpNumThreads: 1 };

/**
 * the append graph of L layers: past_key.l / past_value.l [B, kvH, C, hd], new_kv [2L·B, kvH, 1, hd], slot [1] →
 * key.l / value.l; with `bias`, also the next step's attention bias (device-bias.ts: its inputs and outputs), so a
 * decode step in steady state runs no bias graph of its own
 */
function appendGraph(L: number, kvHeads: number, headDim: number, dtype: KvDType, bias: { window: number | null } | null): Uint8Array {
  const g = new GraphBuilder();
  const et = dtype === 'f16' ? DataType.FLOAT16 : DataType.FLOAT;
  const dims = ['batch', kvHeads, 'capacity', headDim];
  const past = Array.from({ length: L }, (_, l) => [g.input(IO.pastKey(l), et, dims), g.input(IO.pastValue(l), et, dims)] as const);
  const fresh = g.input(IO.newKv, et, ['kv_rows', kvHeads, 1, headDim]);
  const slot = g.input('slot', DataType.INT64, [1]);
  const C = g.op('Slice', [g.op('Shape', [past[0]![0]]), g.i64([2]), g.i64([3])]);
  const slots = g.op('Range', [g.i64([0], []), g.op('Squeeze', [C, g.i64([0])]), g.i64([1], [])]);
  const mask = g.op('Reshape', [g.op('Equal', [slots, slot]), g.i64([1, 1, -1, 1])]); // [1, 1, C, 1]: slot P
  const rows = g.op('Reshape', [fresh, g.i64([2 * L, -1, kvHeads, 1, headDim])]); // [2L, B, kvH, 1, hd]
  past.forEach(([k, v], l) => {
    const at = (i: number) => g.op('Gather', [rows, g.i64([i], [])], { axis: 0 });
    g.output(`key.${l}`, g.op('Where', [mask, at(2 * l), k]), et, dims);
    g.output(`value.${l}`, g.op('Where', [mask, at(2 * l + 1), v]), et, dims);
  });
  if (bias) addDecodeBias(g, bias.window !== null);
  return g.encode('kv_append');
}

/** the readback graph of n tensors: x.i → y.i (Identity; the outputs are CPU) */
function readbackGraph(n: number, dtype: KvDType): Uint8Array {
  const g = new GraphBuilder();
  const et = dtype === 'f16' ? DataType.FLOAT16 : DataType.FLOAT;
  for (let i = 0; i < n; i++) g.output(`y.${i}`, g.op('Identity', [g.input(`x.${i}`, et, ['a', 'b', 'c', 'd'])]), et, ['a', 'b', 'c', 'd']);
  return g.encode('kv_readback');
}

export class DeviceKv {
  private appendSession: Promise<ort.InferenceSession> | null = null;
  private readonly readbackSessions = new Map<number, Promise<ort.InferenceSession>>();

  /** `bias`: the append run also makes the next step's attention bias (the model's sliding window, or null) */
  constructor(private readonly layers: number, private readonly kvHeads: number, private readonly headDim: number, private readonly dtype: KvDType,
    private readonly transfer: TransferCounter, private readonly bias: { window: number | null } | null = null) {}

  /**
   * Write a decode step's new slot (device `newKv` [2L·B, kvH, 1, hd]) at slot `slot` of every layer's buffer
   * (`keys`/`values` [B, kvH, C, hd], on the device or the host); returns the new buffers, on the device, and (with
   * `bias`) the attention bias of the next step of these rows (`starts`) on them.
   */
  async append(keys: readonly ort.Tensor[], values: readonly ort.Tensor[], newKv: ort.Tensor, slot: number,
    starts: readonly number[]): Promise<{ keys: ort.Tensor[]; values: ort.Tensor[]; nextBias: DecodeBias | null }> {
    this.appendSession ??= ort.InferenceSession.create(appendGraph(this.layers, this.kvHeads, this.headDim, this.dtype, this.bias), { ...DEVICE_SESSION, preferredOutputLocation: 'gpu-buffer' });
    const s = await this.appendSession;
    const feeds: Record<string, ort.Tensor> = { [IO.newKv]: newKv, slot: new ort.Tensor('int64', BigInt64Array.of(BigInt(slot)), [1]) };
    for (let l = 0; l < this.layers; l++) { feeds[IO.pastKey(l)] = keys[l]!; feeds[IO.pastValue(l)] = values[l]!; }
    // the next step: P + 1 filled slots of the same buffer (capacity C = dims[2]), the same rows
    if (this.bias) Object.assign(feeds, decodeBiasFeeds(starts, slot + 1, Number(keys[0]!.dims[2]), this.bias.window));
    const out = await s.run(feeds);
    countRun(this.transfer, feeds, out);
    const nextBias = this.bias ? { bias: out[IO.attnBias]!, window: this.bias.window !== null ? out[IO.attnBiasWindow]! : null } : null;
    return { keys: keys.map((_, l) => out[`key.${l}`]!), values: values.map((_, l) => out[`value.${l}`]!), nextBias };
  }

  /** device tensors → host arrays (their data, in order) */
  async readback(ts: readonly ort.Tensor[]): Promise<KvArray[]> {
    const n = ts.length;
    let p = this.readbackSessions.get(n);
    if (!p) {
      p = ort.InferenceSession.create(readbackGraph(n, this.dtype), DEVICE_SESSION);
      this.readbackSessions.set(n, p);
    }
    const s = await p;
    const feeds = Object.fromEntries(ts.map((t, i) => [`x.${i}`, t]));
    const out = await s.run(feeds);
    countRun(this.transfer, feeds, out);
    return ts.map((_, i) => out[`y.${i}`]!.data as KvArray);
  }

  async release(): Promise<void> {
    for (const p of [this.appendSession, ...this.readbackSessions.values()]) await (await p?.catch(() => null))?.release();
    this.appendSession = null;
    this.readbackSessions.clear();
  }
}

/** whether a tensor lives in device memory (a `gpu-buffer` output) */
export const onDevice = (t: ort.Tensor | undefined): boolean => t?.location === 'gpu-buffer';

/** release device tensors (no-op for host ones) */
export function disposeDevice(ts: readonly ort.Tensor[]): void {
  for (const t of ts) if (onDevice(t)) t.dispose();
}
