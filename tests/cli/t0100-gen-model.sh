#!/bin/sh
# t0100-gen-model.sh — scripts/gen-model: every architecture as GGUF and HF
# snapshot, deterministic output, files readable by moegen's own reader and
# with the structure llama.cpp / transformers expect, both files holding the
# same numbers; golden checks of the quantisers and dequantisers against
# values worked out by hand from the block formats.
. "$top_srcdir/tests/cli/lib.sh"

GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
CHK="$PYTHON3 $T/check.py"
export PYTHONPATH="$top_srcdir/scripts${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1   # keep the source tree clean

cat >"$T/check.py" <<'EOF'
import json, os, struct, sys
import numpy as np
from moegen import ggml
from moegen.reader import GGUFReader
from moegen import safetensors as st

def fail(msg):
	print(msg, file=sys.stderr)
	sys.exit(1)

def expect(cond, msg):
	if not cond:
		fail(msg)

# Per-layer tensor counts, from the architectures' definitions.
PER_LAYER = {'llama': 9, 'mixtral': 10, 'qwen2': 12, 'qwen2moe': 17, 'qwen3': 11,
	     'qwen3moe': 12, 'olmoe': 12}
GGUF_ARCH = {'llama': 'llama', 'mixtral': 'llama', 'qwen2': 'qwen2', 'qwen2moe': 'qwen2moe',
	     'qwen3': 'qwen3', 'qwen3moe': 'qwen3moe', 'olmoe': 'olmoe'}
HF_ARCH = {'llama': 'LlamaForCausalLM', 'mixtral': 'MixtralForCausalLM',
	   'qwen2': 'Qwen2ForCausalLM', 'qwen2moe': 'Qwen2MoeForCausalLM',
	   'qwen3': 'Qwen3ForCausalLM', 'qwen3moe': 'Qwen3MoeForCausalLM',
	   'olmoe': 'OlmoeForCausalLM'}

def gguf(arch, path):
	"""tiny defaults: vocab 512, embd 64, 2 layers, 4 heads, head_dim 16."""
	r = GGUFReader(path)
	g = GGUF_ARCH[arch]
	kv = r.kv
	expect(kv['general.architecture'] == g, 'architecture %r' % kv['general.architecture'])
	expect(kv['general.alignment'] == 32, 'alignment')
	expect(len(r.tensors) == 3 + 2 * PER_LAYER[arch],
	       '%d tensors, want %d' % (len(r.tensors), 3 + 2 * PER_LAYER[arch]))
	want = {'block_count': 2, 'embedding_length': 64, 'attention.head_count': 4,
		'attention.head_count_kv': 4 if arch == 'olmoe' else 2}
	if arch in ('mixtral', 'qwen2moe', 'qwen3moe', 'olmoe'):
		want.update({'expert_count': 4, 'expert_used_count': 2})
	if arch in ('qwen2moe', 'qwen3moe'):
		want['expert_feed_forward_length'] = 32
	if arch == 'qwen2moe':
		want['expert_shared_feed_forward_length'] = 64
	if arch in ('mixtral', 'olmoe'):
		want['feed_forward_length'] = 32       # one FFN size: the expert's
	if arch in ('qwen3', 'qwen3moe'):
		want['attention.key_length'] = 16
		want['attention.value_length'] = 16
	for k, v in want.items():
		expect(kv.get(g + '.' + k) == v, '%s.%s = %r, want %r' % (g, k, kv.get(g + '.' + k), v))
	for k in ('context_length', 'feed_forward_length', 'rope.freq_base',
		  'attention.layer_norm_rms_epsilon'):
		expect(g + '.' + k in kv, 'missing %s.%s' % (g, k))
	tok = kv['tokenizer.ggml.tokens']
	expect(len(tok) == 512, '%d tokens' % len(tok))
	expect(len(kv['tokenizer.ggml.token_type']) == 512, 'token_type length')
	expect('tokenizer.chat_template' in kv, 'no chat template')
	if arch in ('llama', 'mixtral'):
		expect(kv['tokenizer.ggml.model'] == 'llama', 'tokenizer model')
		expect(tok[:4] == ['<unk>', '<s>', '</s>', '<0x00>'], 'spm specials %r' % tok[:4])
		expect(len(kv['tokenizer.ggml.scores']) == 512, 'scores')
		expect(kv['tokenizer.ggml.bos_token_id'] == 1 and kv['tokenizer.ggml.eos_token_id'] == 2,
		       'bos/eos')
	else:
		expect(kv['tokenizer.ggml.model'] == 'gpt2', 'tokenizer model')
		expect(tok[0] == '!' and tok[255] == '\u0143', 'byte-level alphabet %r %r' % (tok[0], tok[255]))
		for m in kv['tokenizer.ggml.merges']:
			a, b = m.split(' ')
			expect(a in tok and b in tok and a + b in tok, 'merge %r' % m)
	x = r.tensor('token_embd.weight')
	expect(x.shape == (512, 64), 'token_embd shape %s' % (x.shape,))
	names = r.names()
	if arch in ('mixtral', 'qwen2moe', 'qwen3moe', 'olmoe'):
		i = r.info('blk.1.ffn_gate_exps.weight')
		expect(i.ne == [64, 32, 4], 'gate_exps ne %s' % i.ne)
		i = r.info('blk.1.ffn_down_exps.weight')
		expect(i.ne == [32, 64, 4], 'down_exps ne %s' % i.ne)
		expect(r.info('blk.0.ffn_gate_inp.weight').ne == [64, 4], 'router ne')
	if arch in ('qwen2', 'qwen2moe'):
		expect(r.info('blk.0.attn_k.bias').ne == [32], 'attn_k.bias')
	if arch == 'qwen2moe':
		expect(r.info('blk.0.ffn_gate_inp_shexp.weight').ne == [64], 'shexp gate ne')
		expect(r.info('blk.0.ffn_up_shexp.weight').ne == [64, 64], 'shexp up ne')
	if arch in ('qwen3', 'qwen3moe'):
		expect(r.info('blk.0.attn_q_norm.weight').ne == [16], 'q_norm per head')
	if arch == 'olmoe':
		expect(r.info('blk.0.attn_k_norm.weight').ne == [64], 'k_norm over the projection')
	for t in r.tensors:
		v = r.tensor(t.name)
		expect(np.isfinite(v).all(), '%s: not finite' % t.name)
		if t.name.endswith('norm.weight'):
			expect(abs(float(v.mean()) - 1) < 0.2, '%s: norm mean %g' % (t.name, v.mean()))

def hf(arch, d):
	with open(os.path.join(d, 'config.json')) as f:
		cfg = json.load(f)
	expect(cfg['architectures'] == [HF_ARCH[arch]], 'architectures %r' % cfg['architectures'])
	for k in ('hidden_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads',
		  'rms_norm_eps', 'rope_theta', 'vocab_size', 'tie_word_embeddings', 'torch_dtype'):
		expect(k in cfg, 'config.json lacks %s' % k)
	hdr, _ = st.read_header(os.path.join(d, 'model.safetensors'))
	shapes = {k: v['shape'] for k, v in hdr.items() if k != '__metadata__'}
	want = {'model.embed_tokens.weight': [512, 64], 'lm_head.weight': [512, 64],
		'model.norm.weight': [64],
		'model.layers.1.self_attn.q_proj.weight': [64, 64],
		'model.layers.1.self_attn.k_proj.weight': [64 if arch == 'olmoe' else 32, 64],
		'model.layers.1.self_attn.o_proj.weight': [64, 64],
		'model.layers.1.input_layernorm.weight': [64],
		'model.layers.1.post_attention_layernorm.weight': [64]}
	if arch == 'mixtral':
		want['model.layers.1.block_sparse_moe.gate.weight'] = [4, 64]
		want['model.layers.1.block_sparse_moe.experts.3.w1.weight'] = [32, 64]
		want['model.layers.1.block_sparse_moe.experts.3.w2.weight'] = [64, 32]
		want['model.layers.1.block_sparse_moe.experts.3.w3.weight'] = [32, 64]
	elif arch in ('qwen2moe', 'qwen3moe', 'olmoe'):
		want['model.layers.1.mlp.gate.weight'] = [4, 64]
		want['model.layers.1.mlp.experts.3.gate_proj.weight'] = [32, 64]
		want['model.layers.1.mlp.experts.3.down_proj.weight'] = [64, 32]
	else:
		want['model.layers.1.mlp.down_proj.weight'] = [64, 128]
	if arch == 'qwen2moe':
		want['model.layers.1.mlp.shared_expert_gate.weight'] = [1, 64]
		want['model.layers.1.mlp.shared_expert.down_proj.weight'] = [64, 64]
	if arch in ('qwen2', 'qwen2moe'):
		want['model.layers.1.self_attn.v_proj.bias'] = [32]
	if arch in ('qwen3', 'qwen3moe'):
		want['model.layers.1.self_attn.q_norm.weight'] = [16]
	for k, v in want.items():
		expect(shapes.get(k) == v, '%s: shape %r, want %r' % (k, shapes.get(k), v))
	expect(len(shapes) == {'llama': 21, 'qwen2': 27, 'qwen3': 25}.get(arch, len(shapes)),
	       '%d HF tensors' % len(shapes))
	with open(os.path.join(d, 'tokenizer.json')) as f:
		tj = json.load(f)
	expect(tj['model']['type'] == 'BPE' and len(tj['model']['vocab']) == 512, 'tokenizer.json model')
	vocab = tj['model']['vocab']
	for m in tj['model']['merges']:
		a, b = m.split(' ')
		expect(a in vocab and b in vocab, 'tokenizer.json merge %r' % m)
	if arch in ('llama', 'mixtral'):
		expect(tj['model']['byte_fallback'] is True and vocab['<0x41>'] == 3 + 0x41, 'byte fallback')
	else:
		expect(tj['pre_tokenizer'] is not None and tj['decoder']['type'] == 'ByteLevel', 'byte level')
	with open(os.path.join(d, 'tokenizer_config.json')) as f:
		tc = json.load(f)
	for k in ('bos_token', 'eos_token', 'add_bos_token', 'chat_template'):
		expect(k in tc, 'tokenizer_config.json lacks %s' % k)
	expect(os.path.exists(os.path.join(d, 'generation_config.json')), 'generation_config.json')

def permute(g, h):
	"""llama q/k: GGUF row h*hd + 2*j + s holds HF row h*hd + s*hd/2 + j."""
	r = GGUFReader(g)
	f = os.path.join(h, 'model.safetensors')
	for gn, hn, nh in (('blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight', 4),
			   ('blk.1.attn_k.weight', 'model.layers.1.self_attn.k_proj.weight', 2)):
		x, y = r.tensor(gn), st.read_tensor(f, hn)
		hd = x.shape[0] // nh
		for head in range(nh):
			for j in range(hd // 2):
				for s in range(2):
					expect((x[head * hd + 2 * j + s] == y[head * hd + s * hd // 2 + j]).all(),
					       '%s head %d pair %d half %d' % (gn, head, j, s))
	x, y = r.tensor('blk.0.attn_v.weight'), st.read_tensor(f, 'model.layers.0.self_attn.v_proj.weight')
	expect((x == y).all(), 'attn_v is not permuted')

def noperm(g, h):
	r = GGUFReader(g)
	y = st.read_tensor(os.path.join(h, 'model.safetensors'), 'model.layers.0.self_attn.q_proj.weight')
	expect((r.tensor('blk.0.attn_q.weight') == y).all(), 'qwen/olmoe q must not be permuted')

def experts(g, h, w, e):
	r = GGUFReader(g)
	x = r.tensor('blk.1.ffn_%s_exps.weight' % w)[int(e)]
	f = os.path.join(h, 'model.safetensors')
	hn = 'model.layers.1.block_sparse_moe.experts.%s.%s.weight' % (e, {'gate': 'w1', 'up': 'w3', 'down': 'w2'}[w]) \
		if 'Mixtral' in open(os.path.join(h, 'config.json')).read() else \
		'model.layers.1.mlp.experts.%s.%s_proj.weight' % (e, w)
	expect((x == st.read_tensor(f, hn)).all(), '%s expert %s differs' % (w, e))

def q8_0():
	# amax 127 -> d = 1, q = roundf(x): halves round away from zero
	x = np.zeros(32, dtype=np.float32)
	x[:8] = [-127, 0.5, -0.5, 1.5, 2.5, 126.4, -2.5, 0.49]
	b = ggml.quant_q8_0(x[None, :])[0].tobytes()
	expect(b[:2] == struct.pack('<e', 1.0), 'q8_0 d %r' % b[:2])
	q = list(struct.unpack('<8b', b[2:10]))
	expect(q == [-127, 1, -1, 2, 3, 126, -3, 0], 'q8_0 q %r' % q)
	# amax 254 -> d = 2: q = roundf(x / 2)
	x = np.full(32, 3.0, dtype=np.float32); x[5] = -254
	b = ggml.quant_q8_0(x[None, :])[0].tobytes()
	expect(struct.unpack('<e', b[:2])[0] == 2.0 and b[2] == 2 and struct.unpack('<b', b[7:8])[0] == -127,
	       'q8_0 scale 2: %r' % b[:8])
	expect((ggml.deq_q8_0(b) == np.where(x == 3, 4, -254)).all(), 'q8_0 decode')

def q4_0():
	# the first element of largest magnitude sets d = max / -8
	x = np.zeros(32, dtype=np.float32)
	x[:6] = [-8, 7, 7.4, -0.5, 0.49, 0.5]
	x[20] = 8                    # same magnitude, later: ignored
	b = ggml.quant_q4_0(x[None, :])[0].tobytes()
	expect(b[:2] == struct.pack('<e', 1.0), 'q4_0 d %r' % b[:2])
	# q = min(15, trunc(x / d + 8.5)); element j low nibble, j + 16 high nibble
	lo = [c & 15 for c in b[2:18]]
	hi = [c >> 4 for c in b[2:18]]
	expect(lo[:6] == [0, 15, 15, 8, 8, 9], 'q4_0 low nibbles %r' % lo[:6])
	expect(hi[4] == 15 and hi[0] == 8, 'q4_0 high nibbles %r' % hi)
	x = np.zeros(32, dtype=np.float32); x[3] = 8; x[4] = -7; x[9] = -8
	b = ggml.quant_q4_0(x[None, :])[0].tobytes()
	expect(struct.unpack('<e', b[:2])[0] == -1.0, 'q4_0 negative d')
	expect([c & 15 for c in b[2:12]] == [8, 8, 8, 0, 15, 8, 8, 8, 8, 15], 'q4_0 d=-1 %r' % list(b[2:12]))
	expect(list(ggml.deq_q4_0(b)[:5]) == [0, 0, 0, 8, -7], 'q4_0 decode')

def kquants():
	# Q4_K: d = 1, dmin = 0.5; sub-block 0 scale 2 min 3, sub-block 5 scale 33 min 17
	s = [0] * 12
	sc, mn = [2, 1, 1, 1, 1, 33, 1, 1], [3, 0, 0, 0, 0, 17, 0, 0]
	for j in range(4):
		s[j] = sc[j] | ((sc[j + 4] >> 4) << 6)
		s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6)
		s[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4)
	blk = struct.pack('<ee', 1.0, 0.5) + bytes(s) + bytes([0x21] * 128)
	y = ggml.deq_q4_k(blk)
	# chunk k of 64: low nibbles (1) -> sub-block 2k, high nibbles (2) -> 2k + 1
	expect(y[0] == 2 * 1 - 0.5 * 3 and y[31] == 0.5, 'q4_k sub-block 0: %g' % y[0])
	expect(y[32] == 1 * 2, 'q4_k sub-block 1: %g' % y[32])
	expect(y[160] == 33 * 2 - 0.5 * 17, 'q4_k sub-block 5: %g' % y[160])
	# Q5_K: as Q4_K plus a high bit per element: qh[l] bit 2k for sub-block 2k
	qh = bytes([0b00000100] * 32)             # sub-block 2 gets +16
	blk = struct.pack('<ee', 1.0, 0.0) + bytes([1] * 4 + [0] * 4 + [1] * 4) + qh + bytes([0x00] * 128)
	y = ggml.deq_q5_k(blk)
	expect(y[0] == 0 and y[64] == 16 and y[96] == 0 and y[200] == 0, 'q5_k high bits %r' % y[[0, 64, 96, 200]])
	# Q6_K: element p uses scale p // 16; q = (4 low | 2 high bits) - 32
	ql = bytes([0x00] * 128)
	qhb = bytes([0b10] * 64)                  # element l (l < 32, first half) gets high bits 2
	scales = bytes(range(1, 17))
	blk = ql + qhb + scales + struct.pack('<e', 0.5)
	y = ggml.deq_q6_k(blk)
	expect(y[0] == 0.5 * 1 * (32 - 32), 'q6_k q=32 -> 0: %g' % y[0])
	expect(y[32] == 0.5 * 3 * (0 - 32), 'q6_k element 32: %g' % y[32])
	expect(y[130] == 0.5 * 9 * (32 - 32) and y[250] == 0.5 * 16 * -32, 'q6_k second half %g' % y[250])

def roundtrip():
	rng = np.random.default_rng(1)
	x = rng.standard_normal((8, 512)).astype(np.float32)
	# rms error relative to rms value, generous bounds per type
	for t, bound in ((ggml.Q8_0, 0.01), (ggml.Q4_0, 0.12), (ggml.Q4_K, 0.12), (ggml.Q5_K, 0.06),
			 (ggml.Q6_K, 0.03), (ggml.F16, 1e-3), (ggml.BF16, 5e-3)):
		y = ggml.decode(ggml.encode(x, t), t).reshape(x.shape)
		e = np.sqrt(((x - y) ** 2).mean() / (x ** 2).mean())
		expect(e < bound, '%s: relative rms error %g' % (ggml.type_name(t), e))
	expect((ggml.decode(ggml.encode(x, ggml.F32), ggml.F32).reshape(x.shape) == x).all(), 'f32')

def types(path, *pairs):
	r = GGUFReader(path)
	for p in pairs:
		n, t = p.split('=')
		got = ggml.type_name(r.info(n).type)
		expect(got == t, '%s: %s, want %s' % (n, got, t))

def notensor(path, name):
	expect(name not in GGUFReader(path).names(), 'has %s' % name)

def kv(path, key, want):
	v = GGUFReader(path).kv.get(key)
	expect(str(v) == want, '%s = %r, want %s' % (key, v, want))

def shards(d, n):
	with open(os.path.join(d, 'model.safetensors.index.json')) as f:
		idx = json.load(f)
	files = sorted(set(idx['weight_map'].values()))
	expect(files == ['model-%05d-of-%05d.safetensors' % (i + 1, int(n)) for i in range(int(n))],
	       'shard files %r' % files)
	total = 0
	for fn in files:
		hdr, _ = st.read_header(os.path.join(d, fn))
		for k, v in hdr.items():
			if k != '__metadata__':
				expect(idx['weight_map'][k] == fn, '%s in %s' % (k, fn))
				total += v['data_offsets'][1] - v['data_offsets'][0]
	expect(total == idx['metadata']['total_size'], 'total_size')

def vocab(g, h, src):
	r, s = GGUFReader(g), GGUFReader(src)
	for k in s.kv:
		if k.startswith('tokenizer.'):
			a, b = r.kv.get(k), s.kv[k]
			same = (np.array_equal(a, b) if isinstance(b, np.ndarray) else a == b)
			expect(same and r.kv_type[k] == s.kv_type[k], 'tokenizer KV %s not copied' % k)
	n = len(s.kv['tokenizer.ggml.tokens'])
	expect(r.info('token_embd.weight').ne[1] == n, 'embedding rows')
	with open(os.path.join(h, 'tokenizer.json')) as f:
		tj = json.load(f)
	voc = tj['model']['vocab']
	toks = s.kv['tokenizer.ggml.tokens']
	expect(len(voc) == n and all(voc[t] == i for i, t in enumerate(toks)), 'tokenizer.json vocab')
	expect(len(tj['model']['merges']) > 1000, 'merges %d' % len(tj['model']['merges']))
	with open(os.path.join(h, 'config.json')) as f:
		expect(json.load(f)['vocab_size'] == n, 'config vocab_size')

def arch2(d):
	"""The second family (moegen/moe2.py), tiny shapes: GGUF keys and tensor
	shapes as llama.cpp's converter writes them, config.json fields and HF
	tensor shapes as the published checkpoints have them, and both files
	holding the same numbers."""
	from moegen import compare
	import math
	G = {  # name -> ({GGUF key: value}, {tensor: ne}, [absent tensors])
	'deepseek2': ({'attention.kv_lora_rank': 32, 'attention.key_length': 40,
		       'attention.value_length': 32, 'attention.key_length_mla': 24,
		       'attention.value_length_mla': 16, 'attention.head_count_kv': 1,
		       'rope.dimension_count': 8, 'leading_dense_block_count': 1,
		       'expert_shared_count': 2, 'expert_feed_forward_length': 32, 'expert_count': 8,
		       'expert_gating_func': 1, 'expert_group_count': 1, 'rope.scaling.type': 'yarn',
		       'rope.scaling.original_context_length': 1024},
		      {'blk.0.ffn_gate.weight': [64, 128], 'blk.1.attn_q.weight': [64, 96],
		       'blk.1.attn_kv_a_mqa.weight': [64, 40], 'blk.1.attn_kv_a_norm.weight': [32],
		       'blk.1.attn_k_b.weight': [16, 32, 4], 'blk.1.attn_v_b.weight': [32, 16, 4],
		       'blk.1.attn_output.weight': [64, 64], 'blk.1.ffn_gate_shexp.weight': [64, 64],
		       'blk.1.ffn_down_exps.weight': [32, 64, 8], 'blk.1.ffn_gate_inp.weight': [64, 8]},
		      ['blk.1.attn_kv_b.weight', 'blk.1.attn_q_a.weight', 'blk.0.ffn_gate_inp.weight']),
	'deepseek3': ({'attention.q_lora_rank': 32, 'expert_gating_func': 2,
		       'expert_weights_norm': True, 'expert_weights_scale': 2.5,
		       'expert_group_count': 4, 'expert_group_used_count': 2, 'expert_shared_count': 1},
		      {'blk.1.attn_q_a.weight': [64, 32], 'blk.1.attn_q_a_norm.weight': [32],
		       'blk.1.attn_q_b.weight': [32, 96], 'blk.1.exp_probs_b.bias': [8]},
		      ['blk.1.attn_q.weight']),
	'gpt-oss': ({'attention.sliding_window': 4, 'expert_feed_forward_length': 32,
		     'attention.key_length': 16, 'rope.scaling.type': 'yarn', 'expert_count': 4},
		    {'blk.0.attn_sinks.weight': [4], 'blk.0.post_attention_norm.weight': [64],
		     'blk.0.ffn_gate_inp.bias': [4], 'blk.0.ffn_gate_exps.bias': [32, 4],
		     'blk.0.ffn_down_exps.bias': [64, 4], 'blk.1.attn_output.bias': [64],
		     'blk.1.attn_k.bias': [32]},
		    ['blk.0.ffn_norm.weight']),
	'phimoe': ({'rope.scaling.original_context_length': 1024, 'attention.sliding_window': 0,
		    'rope.dimension_count': 16},
		   {'rope_factors_long.weight': [8], 'rope_factors_short.weight': [8],
		    'blk.0.attn_norm.bias': [64], 'blk.1.ffn_norm.bias': [64],
		    'blk.0.attn_output.bias': [64], 'output_norm.bias': [64], 'output.bias': [512]}, []),
	'granitemoe': ({'attention.scale': 0.125, 'embedding_scale': 2.0, 'residual_scale': 0.5,
			'logit_scale': 4.0, 'expert_count': 4},
		       {'blk.0.ffn_gate_exps.weight': [64, 32, 4]}, ['blk.0.ffn_up_shexp.weight']),
	'granitemoeshared': ({'expert_shared_feed_forward_length': 64},
			     {'blk.1.ffn_up_shexp.weight': [64, 64],
			      'blk.1.ffn_down_shexp.weight': [64, 64]}, []),
	}
	H = {  # name -> ({config.json field: value}, {HF tensor: shape})
	'deepseek2': ({'architectures': ['DeepseekV2ForCausalLM'], 'model_type': 'deepseek_v2',
		       'q_lora_rank': None, 'kv_lora_rank': 32, 'qk_nope_head_dim': 16,
		       'qk_rope_head_dim': 8, 'v_head_dim': 16, 'first_k_dense_replace': 1,
		       'n_shared_experts': 2, 'n_routed_experts': 8, 'topk_method': 'greedy',
		       'scoring_func': 'softmax', 'moe_intermediate_size': 32},
		      {'model.layers.1.self_attn.kv_b_proj.weight': [128, 32],
		       'model.layers.1.self_attn.kv_a_proj_with_mqa.weight': [40, 64],
		       'model.layers.1.self_attn.kv_a_layernorm.weight': [32],
		       'model.layers.1.self_attn.q_proj.weight': [96, 64],
		       'model.layers.1.mlp.experts.7.down_proj.weight': [64, 32],
		       'model.layers.1.mlp.shared_experts.gate_proj.weight': [64, 64],
		       'model.layers.0.mlp.gate_proj.weight': [128, 64]}),
	'deepseek3': ({'architectures': ['DeepseekV3ForCausalLM'], 'model_type': 'deepseek_v3',
		       'q_lora_rank': 32, 'topk_method': 'noaux_tc', 'scoring_func': 'sigmoid',
		       'n_group': 4, 'topk_group': 2, 'norm_topk_prob': True,
		       'routed_scaling_factor': 2.5},
		      {'model.layers.1.mlp.gate.e_score_correction_bias': [8],
		       'model.layers.1.self_attn.q_a_proj.weight': [32, 64],
		       'model.layers.1.self_attn.q_a_layernorm.weight': [32],
		       'model.layers.1.self_attn.q_b_proj.weight': [96, 32]}),
	'gpt-oss': ({'architectures': ['GptOssForCausalLM'], 'model_type': 'gpt_oss',
		     'layer_types': ['sliding_attention', 'full_attention'], 'sliding_window': 4,
		     'swiglu_limit': 7.0, 'head_dim': 16, 'num_local_experts': 4},
		    {'model.layers.0.self_attn.sinks': [4], 'model.layers.0.mlp.router.bias': [4],
		     'model.layers.0.mlp.experts.gate_up_proj': [4, 64, 64],
		     'model.layers.0.mlp.experts.gate_up_proj_bias': [4, 64],
		     'model.layers.0.mlp.experts.down_proj': [4, 32, 64],
		     'model.layers.0.mlp.experts.down_proj_bias': [4, 64]}),
	'phimoe': ({'architectures': ['PhimoeForCausalLM'], 'model_type': 'phimoe',
		    'lm_head_bias': True, 'attention_bias': True, 'num_local_experts': 4},
		   {'model.layers.0.input_layernorm.bias': [64], 'lm_head.bias': [512],
		    'model.norm.bias': [64], 'model.layers.1.block_sparse_moe.experts.3.w2.weight': [64, 32],
		    'model.layers.1.self_attn.o_proj.bias': [64]}),
	'granitemoe': ({'architectures': ['GraniteMoeForCausalLM'], 'model_type': 'granitemoe',
			'embedding_multiplier': 2.0, 'attention_multiplier': 0.125,
			'residual_multiplier': 0.5, 'logits_scaling': 4.0},
		       {'model.layers.0.block_sparse_moe.input_linear.weight': [4, 64, 64],
			'model.layers.0.block_sparse_moe.output_linear.weight': [4, 64, 32],
			'model.layers.0.block_sparse_moe.router.layer.weight': [4, 64]}),
	'granitemoeshared': ({'architectures': ['GraniteMoeSharedForCausalLM'],
			      'shared_intermediate_size': 64},
			     {'model.layers.1.shared_mlp.input_linear.weight': [128, 64],
			      'model.layers.1.shared_mlp.output_linear.weight': [64, 64]}),
	}
	for name in G:
		r = GGUFReader('%s/%s.gguf' % (d, name))
		g = r.kv['general.architecture']
		expect(g == {'deepseek3': 'deepseek2', 'granitemoeshared': 'granitemoe'}.get(name, name),
		       '%s: architecture %r' % (name, g))
		kvs, tensors, absent = G[name]
		for k, v in kvs.items():
			got = r.kv.get(g + '.' + k)
			ok = abs(got - v) < 1e-6 if isinstance(v, float) and got is not None else got == v
			expect(ok, '%s: %s.%s = %r, want %r' % (name, g, k, got, v))
		for t, ne in tensors.items():
			expect(t in r.names() and r.info(t).ne == ne, '%s: %s ne %s, want %s'
			       % (name, t, r.info(t).ne if t in r.names() else None, ne))
		for t in absent:
			expect(t not in r.names(), '%s: has %s' % (name, t))
		with open('%s/%s.hf/config.json' % (d, name)) as f:
			cfg = json.load(f)
		fields, shapes = H[name]
		for k, v in fields.items():
			expect(cfg.get(k) == v, '%s: config.json %s = %r, want %r' % (name, k, cfg.get(k), v))
		hdr, _ = st.read_header('%s/%s.hf/model.safetensors' % (d, name))
		for t, s in shapes.items():
			expect(t in hdr and hdr[t]['shape'] == s, '%s: HF %s shape %s, want %s'
			       % (name, t, hdr[t]['shape'] if t in hdr else None, s))
		bad = compare.compare('%s/%s.gguf' % (d, name), '%s/%s.hf' % (d, name))
		expect(not bad, '%s: GGUF and HF differ: %s' % (name, bad[:3]))
	# phimoe: attn_factor as convert_hf_to_gguf.py derives it, = the config's mscales
	r = GGUFReader('%s/phimoe.gguf' % d)
	a = r.kv['phimoe.rope.scaling.attn_factor']
	expect(abs(a - math.sqrt(1 + math.log(4) / math.log(1024))) < 1e-6, 'attn_factor %r' % a)
	with open('%s/phimoe.hf/config.json' % d) as f:
		rs = json.load(f)['rope_scaling']
	expect(rs['type'] == 'longrope' and rs['short_mscale'] == a == rs['long_mscale'] and
	       len(rs['short_factor']) == 8, 'phimoe rope_scaling %r' % rs)
	# deepseek2: yarn_log_multiplier = 0.1 mscale_all_dim
	r = GGUFReader('%s/deepseek3.gguf' % d)
	with open('%s/deepseek3.hf/config.json' % d) as f:
		rs = json.load(f)['rope_scaling']
	expect(abs(r.kv['deepseek2.rope.scaling.yarn_log_multiplier'] - 0.1 * rs['mscale_all_dim'])
	       < 1e-7, 'yarn_log_multiplier')
	# gpt-oss with MXFP4 experts: the published checkpoints' HF form
	r = GGUFReader('%s/gpt-oss-mxfp4.gguf' % d)
	expect(r.kv['general.file_type'] == 38, 'file type %r' % r.kv['general.file_type'])
	for t in ('ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'):
		expect(ggml.type_name(r.info('blk.1.%s.weight' % t).type) == 'MXFP4', '%s type' % t)
	expect(ggml.type_name(r.info('blk.1.attn_q.weight').type) == 'F32', 'attn_q type')
	hdr, _ = st.read_header('%s/gpt-oss-mxfp4.hf/model.safetensors' % d)
	x = 'model.layers.1.mlp.experts.'
	for t, s in (('gate_up_proj_blocks', [4, 64, 2, 16]), ('gate_up_proj_scales', [4, 64, 2]),
		     ('down_proj_blocks', [4, 64, 1, 16]), ('down_proj_scales', [4, 64, 1])):
		expect(hdr[x + t]['shape'] == s and hdr[x + t]['dtype'] == 'U8', '%s %s' % (t, hdr[x + t]))
	with open('%s/gpt-oss-mxfp4.hf/config.json' % d) as f:
		expect(json.load(f)['quantization_config']['quant_method'] == 'mxfp4', 'quant_method')
	bad = compare.compare('%s/gpt-oss-mxfp4.gguf' % d, '%s/gpt-oss-mxfp4.hf' % d)
	expect(not bad, 'gpt-oss mxfp4: %s' % bad[:3])

def mxfp4():
	# one block by hand: amax 5 -> e = floor(log2 5) - 2 + 127 = 127 (scale 1):
	# 5 -> 4 or 6 (equally near: the first, 4, code 6), -0.3 -> -0.5 (code 9,
	# nearer than 0), 0.2 -> 0 (code 0), 1.25 -> 1 (1 and 1.5 equally near:
	# code 2); element j in the low nibble of byte j, j + 16 in the high one
	x = np.zeros(32, dtype=np.float32)
	x[0], x[1], x[16], x[17] = 5, -0.3, 0.2, 1.25
	b = ggml.quant_mxfp4(x[None, :])[0]
	expect(b[0] == 127 and b[1] == 0x06 and b[2] == 0x29, 'mxfp4 block %r' % list(b[:3]))
	expect(list(ggml.deq_mxfp4(b)[[0, 1, 16, 17]]) == [4, -0.5, 0, 1], 'mxfp4 decode')
	x = np.full((1, 32), 0.01, dtype=np.float32)     # amax 0.01: e = -7 - 2 + 127
	expect(ggml.quant_mxfp4(x)[0][0] == 118, 'mxfp4 small exponent')

globals()[sys.argv[1]](*sys.argv[2:])
EOF

ARCHS="llama mixtral qwen2 qwen2moe qwen3 qwen3moe olmoe"

check "quantisers: q8_0 matches ggml's reference rounding" -- $CHK q8_0
check "quantisers: q4_0 matches ggml's reference rounding" -- $CHK q4_0
check "dequantisers: q4_k/q5_k/q6_k hand-built blocks" -- $CHK kquants
check "quantisers: round-trip error bounds" -- $CHK roundtrip
check "quantisers: mxfp4 block by hand (exponent, nearest codes, nibble order)" -- $CHK mxfp4

mkdir -p "$T/a" "$T/b"
for a in $ARCHS; do
	check "$a: generate tiny (gguf + hf)" -- $GEN --arch $a --format both --seed 7 --out "$T/a/$a"
	check "$a: second run" -- $GEN --arch $a --format both --seed 7 --out "$T/b/$a"
	same=0
	cmp -s "$T/a/$a.gguf" "$T/b/$a.gguf" || same=1
	for f in "$T/a/$a.hf"/*; do
		cmp -s "$f" "$T/b/$a.hf/${f##*/}" || same=1
	done
	ok $same "$a: deterministic (same bytes twice)"
	check "$a: GGUF structure and KVs" -- $CHK gguf $a "$T/a/$a.gguf"
	check "$a: HF snapshot structure" -- $CHK hf $a "$T/a/$a.hf"
	check "$a: GGUF and HF hold the same numbers" -- \
		$PYTHON3 -m moegen.compare "$T/a/$a.gguf" "$T/a/$a.hf"
done

check "llama: q/k rows interleaved in GGUF, rotate-half in HF" -- $CHK permute "$T/a/llama.gguf" "$T/a/llama.hf"
check "mixtral: q/k rows interleaved in GGUF, rotate-half in HF" -- $CHK permute "$T/a/mixtral.gguf" "$T/a/mixtral.hf"
check "qwen3: q rows not permuted" -- $CHK noperm "$T/a/qwen3.gguf" "$T/a/qwen3.hf"
check "olmoe: q rows not permuted" -- $CHK noperm "$T/a/olmoe.gguf" "$T/a/olmoe.hf"
check "mixtral: stacked experts = w1/w3/w2" -- $CHK experts "$T/a/mixtral.gguf" "$T/a/mixtral.hf" down 3
check "qwen3moe: stacked experts = gate_proj" -- $CHK experts "$T/a/qwen3moe.gguf" "$T/a/qwen3moe.hf" gate 2

$GEN --arch olmoe --format gguf --seed 8 --out "$T/seed8.gguf" 2>/dev/null
cmp -s "$T/a/olmoe.gguf" "$T/seed8.gguf"
ok $((1 - $?)) "another seed gives another model"

check "--format gguf / hf alone write the same files as both (OUT.gguf, OUT.hf/)" -- sh -c \
	"$GEN --arch olmoe --format gguf --seed 7 --out '$T/g1' && cmp '$T/g1.gguf' '$T/a/olmoe.gguf' &&
	 $GEN --arch olmoe --format hf --seed 7 --out '$T/h1' &&
	 cmp '$T/h1.hf/model.safetensors' '$T/a/olmoe.hf/model.safetensors' &&
	 cmp '$T/h1.hf/tokenizer.json' '$T/a/olmoe.hf/tokenizer.json'"

$GEN --arch llama --format gguf --out "$T/q.gguf" --type q4_k 2>"$T/err"
is "$?" 2 "K-quant on 64-wide rows: usage error"

for ty in f16 bf16 q8_0 q4_0 q4_k q5_k q6_k; do
	check "small qwen2moe $ty: GGUF and HF agree" -- sh -c \
		"$GEN --arch qwen2moe --shape small --type $ty --format both --out '$T/s-$ty' &&
		 $PYTHON3 -m moegen.compare '$T/s-$ty.gguf' '$T/s-$ty.hf'"
done
check "small f16: HF dtype F16" -- $PYTHON3 -c "import json,sys; h=open(sys.argv[1],'rb').read(); n=int.from_bytes(h[:8],'little'); d=json.loads(h[8:8+n]); sys.exit(d['model.norm.weight']['dtype'] != 'F16')" "$T/s-f16.hf/model.safetensors"
check "small q4_k: norms and router stay F32" -- $CHK types "$T/s-q4_k.gguf" \
	blk.0.attn_norm.weight=F32 blk.1.ffn_gate_inp.weight=F32 blk.0.attn_q.bias=F32 \
	blk.0.ffn_gate_inp_shexp.weight=F32 blk.0.ffn_down_exps.weight=Q4_K output.weight=Q4_K
check "small q4_k: file type Q4_K_S" -- $CHK kv "$T/s-q4_k.gguf" general.file_type 14

# Q4_K_M: 2 layers -> layer 1 gets the extra bits (i >= 7n/8); 8 experts ->
# attn_k/attn_v Q8_0 and attn_output Q5_K (BENCHMARKS.md)
check "q4_k_m mixtral (8 experts)" -- sh -c \
	"$GEN --arch mixtral --shape small --n-expert 8 --type q4_k_m --format both --out '$T/m' &&
	 $CHK types '$T/m.gguf' token_embd.weight=Q4_K output.weight=Q6_K blk.0.attn_q.weight=Q4_K \
		blk.0.attn_k.weight=Q8_0 blk.1.attn_v.weight=Q8_0 blk.0.attn_output.weight=Q5_K \
		blk.0.ffn_down_exps.weight=Q4_K blk.1.ffn_down_exps.weight=Q6_K \
		blk.1.ffn_gate_exps.weight=Q4_K blk.1.ffn_gate_inp.weight=F32 &&
	 $PYTHON3 -m moegen.compare '$T/m.gguf' '$T/m.hf'"
check "q4_k_m olmoe (4 experts)" -- sh -c \
	"$GEN --arch olmoe --shape small --type q4_k_m --out '$T/o.gguf' &&
	 $CHK types '$T/o.gguf' blk.0.attn_k.weight=Q4_K blk.0.attn_v.weight=Q4_K \
		blk.1.attn_v.weight=Q6_K blk.0.attn_output.weight=Q4_K blk.1.ffn_down_exps.weight=Q6_K &&
	 $CHK kv '$T/o.gguf' general.file_type 15"

check "tied embeddings: no output.weight / lm_head" -- sh -c \
	"$GEN --arch qwen3 --tied --format both --out '$T/t' &&
	 $PYTHON3 -m moegen.compare '$T/t.gguf' '$T/t.hf' &&
	 $CHK notensor '$T/t.gguf' output.weight &&
	 grep -q '\"tie_word_embeddings\": true' '$T/t.hf/config.json'"
check "sharded HF snapshot (--shards 3)" -- sh -c \
	"$GEN --arch qwen2moe --format both --shards 3 --out '$T/sh' &&
	 $CHK shards '$T/sh.hf' 3 && $PYTHON3 -m moegen.compare '$T/sh.gguf' '$T/sh.hf'"

# the second family (moegen/moe2.py): deepseek2 in its V2-Lite / V2 / V3
# forms, gpt-oss (also with MXFP4 experts), phimoe, granitemoe (+shared)
mkdir -p "$T/m2"
for a in deepseek2 deepseek2-v2 deepseek3 gpt-oss phimoe granitemoe granitemoeshared; do
	check "$a: generate tiny (gguf + hf)" -- $GEN --arch $a --format both --seed 7 --out "$T/m2/$a"
done
check "gpt-oss --type mxfp4: generate" -- \
	$GEN --arch gpt-oss --type mxfp4 --format both --seed 7 --out "$T/m2/gpt-oss-mxfp4"
check "second family: GGUF keys and tensors as llama.cpp names them, config.json and HF tensors as published, same numbers" -- \
	$CHK arch2 "$T/m2"
check "granitemoe: q/k rows interleaved in GGUF, rotate-half in HF" -- \
	$CHK permute "$T/m2/granitemoe.gguf" "$T/m2/granitemoe.hf"
for a in deepseek3 gpt-oss-mxfp4; do
	x=$a; [ $a = gpt-oss-mxfp4 ] && x="gpt-oss --type mxfp4"
	$GEN --arch $x --format both --seed 7 --out "$T/b/$a" 2>/dev/null
	same=0
	cmp -s "$T/m2/$a.gguf" "$T/b/$a.gguf" || same=1
	cmp -s "$T/m2/$a.hf/model.safetensors" "$T/b/$a.hf/model.safetensors" || same=1
	ok $same "$a: deterministic (same bytes twice)"
done
check "--format gguf alone (streamed) writes the bytes --format both does (deepseek3, gpt-oss mxfp4)" -- sh -c \
	"$GEN --arch deepseek3 --seed 7 --out '$T/g3' && cmp '$T/g3.gguf' '$T/m2/deepseek3.gguf' &&
	 $GEN --arch gpt-oss --type mxfp4 --seed 7 --out '$T/g4' && cmp '$T/g4.gguf' '$T/m2/gpt-oss-mxfp4.gguf'"
$GEN --arch gpt-oss --shape gptoss-s --format both --out "$T/x" 2>"$T/err"
is "$?:$(grep -c 'GGUF only' "$T/err")" "2:1" "benchmark shape gptoss-s with --format both: usage error"
$GEN --arch phimoe --shape ds2lite-s --out "$T/x" 2>"$T/err"
is "$?:$(grep -c 'tiny and small' "$T/err")" "2:1" "phimoe --shape ds2lite-s: usage error"
$GEN --arch phimoe --type mxfp4 --out "$T/x" 2>"$T/err"
is "$?:$(grep -c 'only gpt-oss' "$T/err")" "2:1" "--type mxfp4 for phimoe: usage error"
$GEN --arch llama --expert-type mxfp4 --out "$T/x" 2>"$T/err"
is "$?" 2 "--expert-type for llama: usage error"
$GEN --arch deepseek3 --shape mixtral-s --out "$T/x" 2>"$T/err"
is "$?:$(grep -c 'tiny and small' "$T/err")" "2:1" "deepseek3 --shape mixtral-s: usage error"
check "small deepseek2-v2 q4_k: GGUF and HF agree; attn_k_b falls back to Q8_0 (rows of 64)" -- sh -c \
	"$GEN --arch deepseek2-v2 --shape small --type q4_k --format both --out '$T/m2/dsq' &&
	 $PYTHON3 -m moegen.compare '$T/m2/dsq.gguf' '$T/m2/dsq.hf' &&
	 $CHK types '$T/m2/dsq.gguf' blk.1.attn_k_b.weight=Q8_0 blk.1.attn_v_b.weight=Q4_K \
		blk.1.ffn_down_exps.weight=Q4_K blk.1.ffn_gate_inp.weight=F32"

if [ -f "$SHARED/vocab/ggml-vocab-llama-spm.gguf" ]; then
	check "--vocab llama-spm: tokenizer KVs copied, HF tokenizer derived" -- sh -c \
		"$GEN --arch mixtral --vocab '$SHARED/vocab/ggml-vocab-llama-spm.gguf' --format both --out '$T/v1' &&
		 $CHK vocab '$T/v1.gguf' '$T/v1.hf' '$SHARED/vocab/ggml-vocab-llama-spm.gguf'"
	check "--vocab gpt-2 (olmoe)" -- sh -c \
		"$GEN --arch olmoe --vocab '$SHARED/vocab/ggml-vocab-gpt-2.gguf' --format both --out '$T/v2' &&
		 $CHK vocab '$T/v2.gguf' '$T/v2.hf' '$SHARED/vocab/ggml-vocab-gpt-2.gguf'"
else
	diag "shared vocab not found at $SHARED: --vocab checks skipped"
fi

done_testing
