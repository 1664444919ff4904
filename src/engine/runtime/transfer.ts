/**
 * Host ↔ device bytes of session runs: every host-located tensor (`location` 'cpu' or 'cpu-pinned') passed to a
 * session on a device, and every host-located output read back from it, counted where the engine calls
 * `session.run` — what crosses between host memory and the device, not an estimate. A session on the CPU moves
 * nothing (its inputs are read in place), so a CPU engine counts 0. Tensors left on the device
 * (`gpu-buffer` outputs fed back as inputs) are not counted.
 */
import type * as ort from 'onnxruntime-node';

export interface TransferCounter {
  /** bytes of host tensors fed to device sessions, and read back from them */
  hostToDevice: number;
  deviceToHost: number;
  /** session runs counted */
  runs: number;
}

export const emptyTransfer = (): TransferCounter => ({ hostToDevice: 0, deviceToHost: 0, runs: 0 });

const ELEMENT_BYTES: Record<string, number> = {
  float32: 4, float16: 2, int64: 8, uint64: 8, int32: 4, uint32: 4, int16: 2, uint16: 2, int8: 1, uint8: 1, bool: 1, float64: 8, int4: 0.5, uint4: 0.5,
};

/** bytes of one tensor's data when it lives in host memory, else 0 */
export function hostBytes(t: ort.Tensor): number {
  if (t.location !== 'cpu' && t.location !== 'cpu-pinned') return 0;
  const per = ELEMENT_BYTES[t.type];
  if (per === undefined) throw new Error(`transfer: no element size for ${t.type}`);
  return Math.ceil(t.size * per);
}

/** a run's feeds and outputs counted into `c` (call only for a session on a device) */
export function countRun(c: TransferCounter, feeds: Record<string, ort.Tensor>, outputs: Record<string, ort.Tensor>): void {
  for (const t of Object.values(feeds)) c.hostToDevice += hostBytes(t);
  for (const t of Object.values(outputs)) c.deviceToHost += hostBytes(t);
  c.runs++;
}
