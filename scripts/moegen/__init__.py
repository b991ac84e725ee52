# moegen — seeded random-weight transformer models for tests and benchmarks,
# written as GGUF (gguf.py) and HF safetensors snapshots (safetensors.py);
# reader.py reads GGUF back independently of the C code.
