/**
 * A small graph-building DSL over `proto.ts`: `g.op('Gemm', [x, w], {transB: 1})` appends a node and returns the
 * name of its output, so model code reads like the math. Names get the current scope prefix
 * (`g.scope('layers.3', ...)`) so the ONNX graph stays readable in Netron.
 */
import { DataType, encodeModel, type AttrValue, type DataTypeId, type GraphDef, type NodeDef, type TensorDef,
  type ValueInfoDef } from './proto.ts';

interface OpOptions {
  domain?: string;
  /** number of outputs (default 1) */
  outputs?: number;
  /** base name of the node/outputs (default: op type) */
  name?: string;
}

export class GraphBuilder {
  readonly nodes: NodeDef[] = [];
  readonly initializers: TensorDef[] = [];
  readonly inputs: ValueInfoDef[] = [];
  readonly outputs: ValueInfoDef[] = [];
  private readonly used = new Set<string>();
  private prefix: string[] = [];
  private readonly constCache = new Map<string, string>();
  private readonly outputSources: { name: string; value: string }[] = [];

  /** a fresh, unique value name under the current scope */
  fresh(base: string): string {
    const stem = [...this.prefix, base].join('/');
    let name = stem;
    for (let i = 1; this.used.has(name); i++) name = `${stem}_${i}`;
    this.used.add(name);
    return name;
  }

  scope<T>(name: string, body: () => T): T {
    this.prefix.push(name);
    try {
      return body();
    } finally {
      this.prefix.pop();
    }
  }

  input(name: string, elemType: DataTypeId, dims: (number | string)[]): string {
    this.used.add(name);
    this.inputs.push({ name, elemType, dims });
    return name;
  }

  /**
   * Expose `value` as graph output `name`. At `graph()` time the producing node's output is renamed (no copy); a
   * graph input, or a value exposed twice, goes through Identity.
   */
  output(name: string, value: string, elemType: DataTypeId, dims: (number | string)[]): void {
    if (this.used.has(name)) throw new Error(`graph: name ${name} already used`);
    this.used.add(name);
    this.outputSources.push({ name, value });
    this.outputs.push({ name, elemType, dims });
  }

  private finalizeOutputs(): void {
    const producer = new Map<string, NodeDef>();
    for (const n of this.nodes) for (const o of n.outputs) producer.set(o, n);
    const renamed = new Map<string, string>();
    for (const { name, value } of this.outputSources.splice(0)) {
      const p = producer.get(value);
      if (p && !renamed.has(value)) {
        p.outputs = p.outputs.map((o) => (o === value ? name : o));
        renamed.set(value, name);
      } else {
        this.nodes.push({ opType: 'Identity', inputs: [renamed.get(value) ?? value], outputs: [name], name: `out/${name}` });
      }
    }
    const rename = (nodes: NodeDef[]): void => {
      for (const n of nodes) {
        n.inputs = n.inputs.map((i) => renamed.get(i) ?? i);
        for (const a of Object.values(n.attrs ?? {})) if (typeof a === 'object' && 'graph' in a) rename(a.graph.nodes); // outer-scope references
      }
    };
    if (renamed.size) rename(this.nodes);
  }

  /**
   * A subgraph (an If branch): the nodes `body` adds go into it instead of this graph; it may read any value of the
   * enclosing graph. `body` returns its outputs (values it produced) with their types.
   */
  subgraph(name: string, body: () => ValueInfoDef[]): GraphDef {
    const start = this.nodes.length;
    const outputs = body();
    const nodes = this.nodes.splice(start);
    return { name: this.fresh(name), nodes, initializers: [], inputs: [], outputs };
  }

  opN(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, opts: OpOptions = {}): string[] {
    const base = opts.name ?? opType;
    const n = opts.outputs ?? 1;
    const outs = Array.from({ length: n }, (_, i) => this.fresh(n === 1 ? base : `${base}.${i}`));
    this.nodes.push({
      opType,
      inputs,
      outputs: outs,
      name: `node/${outs[0]}`,
      attrs,
      ...(opts.domain ? { domain: opts.domain } : {}),
    });
    return outs;
  }

  op(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, opts: OpOptions = {}): string {
    return this.opN(opType, inputs, attrs, opts)[0]!;
  }

  initializer(t: Omit<TensorDef, 'name'>, base: string): string {
    const name = this.fresh(base);
    this.initializers.push({ ...t, name });
    return name;
  }

  /** f32 constant (deduplicated by value) */
  f32(values: ArrayLike<number>, dims: number[] = [values.length]): string {
    const data = Float32Array.from(values as ArrayLike<number>);
    return this.constant(DataType.FLOAT, new Uint8Array(data.buffer), dims, 'c_f32');
  }

  /** int64 constant (deduplicated by value) */
  i64(values: readonly number[], dims: number[] = [values.length]): string {
    const data = BigInt64Array.from(values.map((v) => BigInt(v)));
    return this.constant(DataType.INT64, new Uint8Array(data.buffer), dims, 'c_i64');
  }

  private constant(dataType: DataTypeId, raw: Uint8Array, dims: number[], base: string): string {
    const key = `${dataType}|${dims.join(',')}|${Buffer.from(raw).toString('base64')}`;
    const hit = this.constCache.get(key);
    if (hit) return hit;
    const saved = this.prefix;
    this.prefix = [];
    const name = this.initializer({ dataType, dims, raw }, base);
    this.prefix = saved;
    this.constCache.set(key, name);
    return name;
  }

  graph(name: string): GraphDef {
    this.finalizeOutputs();
    return { name, nodes: this.nodes, initializers: this.initializers, inputs: this.inputs, outputs: this.outputs };
  }

  encode(name: string, opsets: Record<string, number> = { '': 17, 'com.microsoft': 1 }): Uint8Array {
    return encodeModel({ graph: this.graph(name), opsets });
  }
}
