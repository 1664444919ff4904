/**
 * JSON for people: indented like JSON.stringify(x, null, 2), except that an array of scalars (a vector, a list of
 * ids) is written on one line — wrapped at `width` columns with its continuation indented — instead of one number
 * per line. The text parses back to the same value.
 */

const isScalar = (v: unknown): boolean => v === null || ['number', 'string', 'boolean'].includes(typeof v);

function scalarArray(items: readonly unknown[], indent: string, width: number): string {
  const parts = items.map((v) => JSON.stringify(v ?? null));
  const one = `[${parts.join(', ')}]`;
  if (indent.length + one.length <= width) return one;
  const inner = `${indent}  `;
  const lines: string[] = [];
  let line = '';
  for (const p of parts) {
    if (line && inner.length + line.length + p.length + 2 > width) { lines.push(`${line},`); line = ''; }
    line = line ? `${line}, ${p}` : p;
  }
  lines.push(line);
  return `[\n${lines.map((l) => `${inner}${l}`).join('\n')}\n${indent}]`;
}

function write(v: unknown, indent: string, width: number): string {
  if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON === 'function') v = (v as { toJSON: () => unknown }).toJSON();
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    if (v.every(isScalar)) return scalarArray(v, indent, width);
    const inner = `${indent}  `;
    return `[\n${v.map((x) => `${inner}${x === undefined || typeof x === 'function' ? 'null' : write(x, inner, width)}`).join(',\n')}\n${indent}]`;
  }
  if (v !== null && typeof v === 'object') {
    const entries = Object.entries(v).filter(([, x]) => x !== undefined && typeof x !== 'function');
    if (entries.length === 0) return '{}';
    const inner = `${indent}  `;
    return `{\n${entries.map(([k, x]) => `${inner}${JSON.stringify(k)}: ${write(x, inner, width)}`).join(',\n')}\n${indent}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

export function compactJson(value: unknown, width = 110): string {
  return write(value, '', width);
}
