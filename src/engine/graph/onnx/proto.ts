/**
 * A minimal protobuf writer for the subset of onnx.proto the engine emits (ModelProto, GraphProto, NodeProto,
 * AttributeProto, TensorProto incl. external data, ValueInfoProto). Field numbers are from onnx/onnx.proto
 * (IR version 8). Only encoding; we never parse ONNX.
 */

/** ONNX TensorProto.DataType values we use. */
export const DataType = {
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  INT32: 6,
  INT64: 7,
  BOOL: 9,
  FLOAT16: 10,
  DOUBLE: 11,
  BFLOAT16: 16,
} as const;
export type DataTypeId = (typeof DataType)[keyof typeof DataType];

/** Growable byte buffer with protobuf wire-format primitives. */
export class ProtoWriter {
  private buf = new Uint8Array(256);
  private len = 0;

  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }

  /** unsigned varint; accepts numbers up to 2^53 and bigints (negative int64 as two's complement, 10 bytes) */
  varint(v: number | bigint): void {
    let x = typeof v === 'bigint' ? BigInt.asUintN(64, v) : v < 0 ? BigInt.asUintN(64, BigInt(v)) : v;
    this.ensure(10);
    if (typeof x === 'number') {
      while (x >= 0x80) {
        this.buf[this.len++] = (x % 0x80) | 0x80;
        x = Math.floor(x / 0x80);
      }
      this.buf[this.len++] = x;
      return;
    }
    while (x >= 0x80n) {
      this.buf[this.len++] = Number(x & 0x7fn) | 0x80;
      x >>= 7n;
    }
    this.buf[this.len++] = Number(x);
  }

  private tag(field: number, wire: number): void {
    this.varint(field * 8 + wire);
  }

  int(field: number, v: number | bigint): void {
    this.tag(field, 0);
    this.varint(v);
  }

  float(field: number, v: number): void {
    this.tag(field, 5);
    this.ensure(4);
    new DataView(this.buf.buffer, this.buf.byteOffset + this.len, 4).setFloat32(0, v, true);
    this.len += 4;
  }

  bytes(field: number, data: Uint8Array): void {
    this.tag(field, 2);
    this.varint(data.length);
    this.ensure(data.length);
    this.buf.set(data, this.len);
    this.len += data.length;
  }

  string(field: number, s: string): void {
    this.bytes(field, new TextEncoder().encode(s));
  }

  /** embedded message */
  message(field: number, write: (w: ProtoWriter) => void): void {
    const w = new ProtoWriter();
    write(w);
    this.bytes(field, w.finish());
  }

  /** packed repeated varints */
  packedInts(field: number, vs: readonly (number | bigint)[]): void {
    const w = new ProtoWriter();
    for (const v of vs) w.varint(v);
    this.bytes(field, w.finish());
  }

  finish(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

export type AttrValue = number | string | number[] | { float: number } | { floats: number[] } | TensorDef | { graph: GraphDef };

/** A tensor: inline data (raw little-endian bytes) or external data (file relative to the model folder). */
export interface TensorDef {
  name: string;
  dataType: DataTypeId;
  dims: number[];
  raw?: Uint8Array;
  external?: { location: string; offset: number; length: number };
}

export interface NodeDef {
  opType: string;
  inputs: string[];
  outputs: string[];
  name: string;
  domain?: string;
  attrs?: Record<string, AttrValue>;
}

/** dims: numbers are fixed, strings are symbolic (dim_param) */
export interface ValueInfoDef {
  name: string;
  elemType: DataTypeId;
  dims: (number | string)[];
}

export interface GraphDef {
  name: string;
  nodes: NodeDef[];
  initializers: TensorDef[];
  inputs: ValueInfoDef[];
  outputs: ValueInfoDef[];
}

interface ModelDef {
  graph: GraphDef;
  /** domain → version, e.g. {'': 17, 'com.microsoft': 1} */
  opsets: Record<string, number>;
  irVersion?: number;
  producer?: string;
  metadata?: Record<string, string>;
}

function writeTensor(w: ProtoWriter, t: TensorDef): void {
  if (t.dims.length) w.packedInts(1, t.dims);
  w.int(2, t.dataType);
  w.string(8, t.name);
  if (t.raw) w.bytes(9, t.raw);
  if (t.external) {
    const entries: [string, string][] = [
      ['location', t.external.location],
      ['offset', String(t.external.offset)],
      ['length', String(t.external.length)],
    ];
    for (const [k, v] of entries) w.message(13, (e) => { e.string(1, k); e.string(2, v); });
    w.int(14, 1);
  }
}

function isTensorDef(v: AttrValue): v is TensorDef {
  return typeof v === 'object' && !Array.isArray(v) && 'dataType' in v;
}

function writeAttr(w: ProtoWriter, name: string, v: AttrValue): void {
  w.string(1, name);
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new Error(`attribute ${name}: use {float: x} for non-integer ${v}`);
    w.int(3, v);
    w.int(20, 2);
  } else if (typeof v === 'string') {
    w.string(4, v);
    w.int(20, 3);
  } else if (Array.isArray(v)) {
    w.packedInts(8, v);
    w.int(20, 7);
  } else if (isTensorDef(v)) {
    w.message(5, (t) => writeTensor(t, v));
    w.int(20, 4);
  } else if ('graph' in v) {
    w.message(6, (g) => writeGraph(g, v.graph)); // a subgraph (If branches)
    w.int(20, 5);
  } else if ('floats' in v) {
    const b = new Uint8Array(v.floats.length * 4);
    const dv = new DataView(b.buffer);
    v.floats.forEach((f, i) => dv.setFloat32(i * 4, f, true));
    w.bytes(7, b);
    w.int(20, 6);
  } else {
    w.float(2, v.float);
    w.int(20, 1);
  }
}

function writeValueInfo(w: ProtoWriter, v: ValueInfoDef): void {
  w.string(1, v.name);
  w.message(2, (type) =>
    type.message(1, (tt) => {
      tt.int(1, v.elemType);
      tt.message(2, (shape) => {
        for (const d of v.dims) shape.message(1, (dim) => (typeof d === 'number' ? dim.int(1, d) : dim.string(2, d)));
      });
    }),
  );
}

function writeNode(w: ProtoWriter, n: NodeDef): void {
  for (const i of n.inputs) w.string(1, i);
  for (const o of n.outputs) w.string(2, o);
  w.string(3, n.name);
  w.string(4, n.opType);
  for (const [k, v] of Object.entries(n.attrs ?? {})) w.message(5, (a) => writeAttr(a, k, v));
  if (n.domain) w.string(7, n.domain);
}

function writeGraph(g: ProtoWriter, graph: GraphDef): void {
  for (const n of graph.nodes) g.message(1, (x) => writeNode(x, n));
  g.string(2, graph.name);
  for (const t of graph.initializers) g.message(5, (x) => writeTensor(x, t));
  for (const v of graph.inputs) g.message(11, (x) => writeValueInfo(x, v));
  for (const v of graph.outputs) g.message(12, (x) => writeValueInfo(x, v));
}

/** Serialise a model to ONNX protobuf bytes. */
export function encodeModel(m: ModelDef): Uint8Array {
  const w = new ProtoWriter();
  w.int(1, m.irVersion ?? 8);
  w.string(2, m.producer ?? 'safekeep');
  w.message(7, (g) => writeGraph(g, m.graph));
  for (const [domain, version] of Object.entries(m.opsets)) {
    w.message(8, (o) => { if (domain) o.string(1, domain); o.int(2, version); });
  }
  for (const [k, v] of Object.entries(m.metadata ?? {})) w.message(14, (e) => { e.string(1, k); e.string(2, v); });
  return w.finish();
}
