"""Control-vector fixtures written by gguf-py, the writer repeng's ControlVector.export_gguf and llama.cpp's
convert scripts use, so test/directions.control-vector.test.ts reads files safekeep did not write.

  python -m venv /tmp/gguf && /tmp/gguf/bin/pip install gguf numpy
  /tmp/gguf/bin/python scripts/gguf-fixtures/control-vectors.py test/fixtures/control-vector

repeng.gguf: what export_gguf writes (model_hint, uint32 layer_count, direction.<layer> for layers 1..4 in that
order), values v[k][i] = (10k + i) / 7 · (−1)^i as float32, d = 6.
cvector-generator.gguf: what llama.cpp's cvector-generator writes (int32 layer_count), layers 3, 1, 2 out of order,
values v[k][i] = k − i / 4, d = 6.
Also checks safekeep's own export with gguf-py's reader when given --check FILE (names, shapes, values printed).
"""
import sys
import numpy as np
import gguf


def repeng_style(path):
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    layers = [1, 2, 3, 4]
    w.add_uint32("controlvector.layer_count", len(layers))
    for k in layers:
        v = np.array([(10 * k + i) / 7 * (-1) ** i for i in range(6)], dtype=np.float32)
        w.add_tensor(f"direction.{k}", v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def generator_style(path):
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "qwen3")
    layers = [3, 1, 2]
    w.add_int32("controlvector.layer_count", len(layers))
    for k in layers:
        w.add_tensor(f"direction.{k}", np.array([k - i / 4 for i in range(6)], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check(path):
    r = gguf.GGUFReader(path)
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        val = f.contents() if hasattr(f, "contents") else f.parts[-1]
        print(f.name, val)
    for t in r.tensors:
        print(t.name, t.tensor_type.name, list(t.shape), t.data_offset, t.data.tolist())


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        repeng_style(f"{sys.argv[1]}/repeng.gguf")
        generator_style(f"{sys.argv[1]}/cvector-generator.gguf")
