# Ahead-of-time export (kiln.export): artifacts that run with no Python and no
# torch. Exported programs are run from C drivers compiled with the system C
# compiler in processes without Python, and from Python through ctypes, and
# compared with eager PyTorch; bad input through the C API and bad weights
# files must give error codes and messages.
import os
import re
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F

import kiln

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def close(got, want, rtol=1e-4, atol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def build_driver(result, tmp_path):
    """Compiles the export's main.c against its object file."""
    binary = tmp_path / f"{result.name}_main"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", os.path.join(result.directory, "main.c"),
                    os.path.join(result.directory, result.name + ".o"), "-lm", "-lpthread",
                    "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def run_driver(binary, result, inputs, tmp_path, weights=None):
    """Runs the C driver on `inputs` (saved row-major) and reads its outputs."""
    files = []
    for i, tensor in enumerate(inputs):
        path = tmp_path / f"input{i}.bin"
        tensor.contiguous().numpy().tofile(path)
        files.append(str(path))
    prefix = str(tmp_path / "out")
    run = subprocess.run([str(binary), weights or result.weights_file, *files, "-o", prefix],
                         capture_output=True, text=True)
    return run, prefix


def read_output(prefix, index, dtype, shape):
    data = open(f"{prefix}{index}.bin", "rb").read()
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def first_output_from_c(result, inputs, tmp_path, shape):
    """Builds the export's driver, runs it on `inputs` in a process without
    Python and reads its float32 output 0."""
    binary = build_driver(result, tmp_path)
    run, prefix = run_driver(binary, result, inputs, tmp_path)
    assert run.returncode == 0, run.stderr
    return read_output(prefix, 0, torch.float32, shape)


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(torch.nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.out = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Stack(torch.nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def pointwise(x, y):
    return torch.tanh(x) * 2 + y.sum(-1, keepdim=True), (x - y).exp()


def test_pointwise_runs_from_c_without_python(tmp_path):
    x, y = torch.randn(37, 65), torch.randn(37, 65)
    result = kiln.export(pointwise, (x, y), tmp_path / "out", name="pointwise")
    assert sorted(os.listdir(result.directory)) == sorted(
        ["pointwise.o", "pointwise.so", "pointwise.h", "pointwise.weights", "main.c", "README.md"])
    assert result.inputs == ["x", "y"] and len(result.outputs) == 2
    # The shared library needs the C library only (libm and libpthread are
    # part of it in recent glibc).
    libraries = subprocess.run(["ldd", result.library], capture_output=True, text=True).stdout
    for line in libraries.splitlines():
        assert re.search(r"linux-vdso|libc\.so|libm\.so|libpthread\.so|ld-linux", line), line
    binary = build_driver(result, tmp_path)
    libraries = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    assert "python" not in libraries and "torch" not in libraries and "LLVM" not in libraries
    # Fresh inputs, not the example ones.
    x, y = torch.randn(37, 65), torch.randn(37, 65)
    run, prefix = run_driver(binary, result, [x, y], tmp_path)
    assert run.returncode == 0, run.stderr
    first, second = pointwise(x, y)
    close(read_output(prefix, 0, torch.float32, (37, 65)), first)
    close(read_output(prefix, 1, torch.float32, (37, 65)), second)


def test_transformer_stack_runs_from_c_and_python(tmp_path):
    torch.manual_seed(0)
    model = Stack().eval()
    x = torch.randn(2, 16, 32)
    result = kiln.export(model, (x,), tmp_path / "out", name="stack")
    assert "blocks.0.attn.qkv.weight" in result.weights
    fresh = torch.randn(2, 16, 32)
    with torch.no_grad():
        want = model(fresh)
    close(first_output_from_c(result, [fresh], tmp_path, (2, 16, 32)), want, rtol=1e-4,
          atol=1e-4)
    program = kiln.load_exported(result.directory, "stack")
    close(program(fresh)[0], want, rtol=1e-4, atol=1e-4)
    # A second run on the same model gives the same answer.
    close(program(fresh)[0], want, rtol=1e-4, atol=1e-4)


def test_weights_of_matrix_products_are_packed_once_when_a_model_is_created(tmp_path):
    # kiln's GEMM packs B for its micro-kernel; where B is a weight, the
    # export packs it once, when a model is created, instead of on every run
    # (the packing functions are in the object), and the runs stay right.
    # A product of two inputs packs as it goes.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(),
                                torch.nn.Linear(96, 40)).eval()
    result = kiln.export(model, (torch.randn(33, 64),), tmp_path / "out", name="mlp")
    assert b"_pack_b" in open(os.path.join(result.directory, "mlp.o"), "rb").read()
    program = kiln.load_exported(result.directory, "mlp")
    for _ in range(2):
        x = torch.randn(33, 64)
        with torch.no_grad():
            want = model(x)
        close(program(x)[0], want, rtol=1e-4, atol=1e-4)
        close(first_output_from_c(result, [x], tmp_path, (33, 40)), want, rtol=1e-4, atol=1e-4)
    product = kiln.export(lambda a, b: a @ b, (torch.randn(33, 64), torch.randn(64, 96)),
                          tmp_path / "product", name="product")
    assert b"_pack_b" not in open(os.path.join(product.directory, "product.o"), "rb").read()


def test_gemm_tiles_split_in_equal_chunks_over_any_thread_count(tmp_path):
    # A GEMM's tiles go to the threads in chunks of equal counts, or one at
    # a time where no count of chunks fits: every tile is computed once (a
    # weight, packed ahead, and a plain product).
    model = torch.nn.Linear(150, 333).eval()
    x = torch.randn(130, 150)
    result = kiln.export(model, (x,), tmp_path / "linear", name="linear")
    product = kiln.export(lambda a, b: a @ b, (x, torch.randn(150, 333)), tmp_path / "mm",
                          name="mm")
    for threads in (1, 2, 3, 7):
        program = kiln.load_exported(result.directory, "linear", num_threads=threads)
        plain = kiln.load_exported(product.directory, "mm", num_threads=threads)
        for _ in range(2):
            x = torch.randn(130, 150)
            b = torch.randn(150, 333)
            with torch.no_grad():
                close(program(x)[0], model(x), rtol=1e-4, atol=1e-4)
            close(plain(x, b)[0], x @ b, rtol=1e-4, atol=1e-4)


def test_embedded_weights_and_single_thread(tmp_path):
    model = Block().eval()
    x = torch.randn(1, 8, 32)
    result = kiln.export(model, (x,), tmp_path / "out", name="embedded", embed_weights=True)
    os.remove(result.weights_file)
    program = kiln.load_exported(result.directory, "embedded", weights_path="", num_threads=1)
    with torch.no_grad():
        close(program(x)[0], model(x), rtol=1e-4, atol=1e-4)


VIEWS_AND_REDUCTIONS = [
    (lambda x: x.t().contiguous() * 3, [(5, 7)]),
    (lambda x: x.permute(2, 0, 1).sum(0), [(4, 6, 9)]),
    (lambda x: (x.amax(-1), x.argmax(-1), x.mean(0)), [(7, 13)]),
    (lambda x, y: torch.cat([x, y], 1)[:, 1::2], [(3, 4), (3, 5)]),
    (lambda x: F.softmax(x, -1) + F.log_softmax(x, 0), [(9, 33)]),
    (lambda x: x.reshape(2, -1, 3).transpose(0, 1), [(4, 9)]),  # a view as output
    (lambda x, b: torch.where(x > 0, x, b), [(6, 5), (5,)]),
    (lambda x: x[None], [(1, 4)]),
    (lambda x: x.sum(), [(0, 3)]),
]


@pytest.mark.parametrize("case", range(len(VIEWS_AND_REDUCTIONS)))
def test_exported_programs_match_eager(case, tmp_path):
    fn, shapes = VIEWS_AND_REDUCTIONS[case]
    examples = tuple(torch.randn(shape) for shape in shapes)
    result = kiln.export(fn, examples, tmp_path / "out", name=f"case{case}")
    program = kiln.load_exported(result.directory, result.name)
    fresh = tuple(torch.randn(shape) for shape in shapes)
    want = fn(*fresh)
    want = list(want) if isinstance(want, tuple) else [want]
    got = program(*fresh)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w)


def test_non_contiguous_input_layout_is_part_of_the_export(tmp_path):
    x = torch.randn(8, 6).t()  # strides (1, 6)
    result = kiln.export(lambda x: x * 2, (x,), tmp_path / "out", name="strided")
    program = kiln.load_exported(result.directory, "strided")
    fresh = torch.randn(8, 6).t()
    close(program(fresh)[0], fresh * 2)
    with pytest.raises(RuntimeError, match="stride"):
        program(fresh.contiguous())


def test_bad_tensors_through_the_c_api_are_errors(tmp_path):
    result = kiln.export(pointwise, (torch.randn(4, 8), torch.randn(4, 8)), tmp_path / "out",
                         name="checked")
    program = kiln.load_exported(result.directory, "checked")
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match=r"kiln_checked: .*rank 3; the model takes rank 2"):
        program(x[None], x)
    with pytest.raises(RuntimeError, match="is float64; the model takes float32"):
        program(x.double(), x)
    with pytest.raises(RuntimeError, match="size 9 in dimension 1; the model was exported for 8"):
        program(torch.randn(4, 9), x)
    with pytest.raises(RuntimeError, match="takes 2 inputs, got 1"):
        program(x)
    close(program(x, x)[1], torch.ones(4, 8))  # still fine afterwards


def test_bad_weights_files_are_refused(tmp_path):
    model = Block().eval()
    result = kiln.export(model, (torch.randn(1, 4, 32),), tmp_path / "out", name="weighted")
    good = open(result.weights_file, "rb").read()
    binary = build_driver(result, tmp_path)

    def refused(path, message):
        with pytest.raises(RuntimeError, match=message):
            kiln.load_exported(result.directory, "weighted", weights_path=str(path))
        run, _ = run_driver(binary, result, [], tmp_path, weights=str(path))
        assert run.returncode == 1 and re.search(message, run.stderr), run.stderr

    refused(tmp_path / "missing.weights", "cannot open the weights file")
    truncated = tmp_path / "truncated.weights"
    truncated.write_bytes(good[: len(good) // 2])
    refused(truncated, "is truncated")
    altered = bytearray(good)
    altered[-100] ^= 0x40
    (tmp_path / "altered.weights").write_bytes(bytes(altered))
    refused(tmp_path / "altered.weights", "is corrupted")
    (tmp_path / "text.weights").write_bytes(b"hello")
    refused(tmp_path / "text.weights", "not a kiln weights file")
    other = kiln.export(Block().eval(), (torch.randn(1, 5, 32),), tmp_path / "other",
                        name="weighted")
    refused(other.weights_file, "weights of another export")


def test_what_cannot_run_without_torch_is_refused_and_nothing_is_written(tmp_path):
    def breaks(x):
        print("side effect")
        return x + 1

    def sorts(x):
        return torch.sort(x).values * 2

    out = tmp_path / "out"
    with pytest.raises(kiln.Unsupported):
        kiln.export(breaks, (torch.randn(3),), out, name="breaks")
    with pytest.raises(kiln.Unsupported, match=r"aten::sort.*test_aot_export\.py:\d+.*nothing was written"):
        kiln.export(sorts, (torch.randn(3),), out, name="sorts")
    assert not out.exists() or not [f for f in os.listdir(out) if not f.startswith(".")]


def test_bad_arguments_to_export(tmp_path):
    with pytest.raises(ValueError, match="C identifier"):
        kiln.export(pointwise, (torch.randn(2), torch.randn(2)), tmp_path, name="9lives")
    with pytest.raises(TypeError, match="example_inputs"):
        kiln.export(pointwise, 3, tmp_path)
    with pytest.raises(TypeError, match="function, a bound method or an nn.Module"):
        kiln.export(3, (torch.randn(2),), tmp_path)
    with pytest.raises(RuntimeError, match="not a CPU LLVM knows"):
        kiln.export(lambda x: x + 1, (torch.randn(2),), tmp_path, name="f", target="pentium9")


def test_other_cpu_target(tmp_path):
    x = torch.randn(16, 64)
    result = kiln.export(lambda x: torch.exp(x) * x, (x,), tmp_path / "out", name="portable",
                         target="x86-64-v2")
    program = kiln.load_exported(result.directory, "portable")
    fresh = torch.randn(16, 64)
    close(program(fresh)[0], torch.exp(fresh) * fresh)


def test_command_line_export(tmp_path):
    script = tmp_path / "factory.py"
    script.write_text("import torch\n"
                      "def make():\n"
                      "    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),\n"
                      "                                torch.nn.Linear(16, 4)).eval()\n"
                      "    return model, (torch.randn(3, 8),)\n")
    import sys
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "kiln", "export", f"{script}:make", str(out),
                          "--name", "mlp"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "exported mlp" in run.stdout and (out / "mlp.so").exists()
    run = subprocess.run([sys.executable, "-m", "kiln", "export", f"{script}:missing", str(out)],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "has no function missing" in run.stderr


class TinyGpt(torch.nn.Module):
    def __init__(self, vocabulary=97, width=32, layers=2):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocabulary, width)
        self.positions = torch.nn.Embedding(64, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(layers))
        self.head = torch.nn.Linear(width, vocabulary, bias=False)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_gpt_with_embeddings_runs_from_c(tmp_path):
    torch.manual_seed(1)
    model = TinyGpt().eval()
    ids = torch.randint(0, 97, (2, 12))
    result = kiln.export(model, (ids,), tmp_path / "out", name="tiny_gpt")
    fresh = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        want = model(fresh)
    close(first_output_from_c(result, [fresh], tmp_path, (2, 12, 97)), want, rtol=1e-4,
          atol=1e-4)


def test_index_select_and_out_of_range_indices(tmp_path):
    def pick(table, rows):
        return table.index_select(0, rows) * 2

    table, rows = torch.randn(10, 3), torch.tensor([3, 0, 9, 3])
    result = kiln.export(pick, (table, rows), tmp_path / "out", name="pick")
    program = kiln.load_exported(result.directory, "pick")
    fresh = torch.tensor([9, 9, 1, 2])
    close(program(table, fresh)[0], pick(table, fresh))
    # torch raises for an index out of range (negative ones included); so
    # does the exported run, an error code and torch's message before any
    # step runs, for ids that are an input. The model runs on afterwards.
    for bad in ([-5, 0, 0, 1], [0, 1, 10, 2]):
        with pytest.raises(RuntimeError, match="index out of range in self"):
            program(table, torch.tensor(bad))
    close(program(table, fresh)[0], pick(table, fresh))


def test_embeddings_of_input_ids_refuse_ids_out_of_range(tmp_path):
    # Ids an input holds are checked, in the view the kernel reads (a slice
    # of them, int32): an id outside the slice is not read, so no error;
    # gather's positions too. Computed ids are no input: not checked.
    table = torch.randn(7, 4)

    def lookup(table, ids):
        return F.embedding(ids[:, 1:], table), F.embedding((ids + 1).clamp(0, 6), table)

    ids = torch.randint(0, 7, (3, 5), dtype=torch.int32)
    result = kiln.export(lookup, (table, ids), tmp_path / "out", name="lookup")
    program = kiln.load_exported(result.directory, "lookup")
    fresh = torch.randint(0, 7, (3, 5), dtype=torch.int32)
    close(program(table, fresh)[0], lookup(table, fresh)[0])
    outside = fresh.clone()
    outside[1, 0] = 99   # not in the slice read
    close(program(table, outside)[0], lookup(table, outside)[0])
    inside = fresh.clone()
    inside[2, 3] = 7
    with pytest.raises(RuntimeError, match=r"input 1 \(.*\): index out of range in self \(id 7"):
        program(table, inside)

    def pick(values, positions):
        return values.gather(1, positions)

    values, positions = torch.randn(3, 6), torch.randint(0, 6, (3, 4))
    result = kiln.export(pick, (values, positions), tmp_path / "gather", name="pick")
    gathered = kiln.load_exported(result.directory, "pick")
    close(gathered(values, positions)[0], pick(values, positions))
    with pytest.raises(RuntimeError, match="index 6 is out of bounds for dimension 1 with size 6"):
        gathered(values, torch.full((3, 4), 6))


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm(self.conv1(x))), 2, ceil_mode=True)
        x = F.adaptive_avg_pool2d(F.silu(self.conv2(x)), 1).flatten(1)
        return self.head(x)


def test_small_cnn_runs_from_c(tmp_path):
    torch.manual_seed(2)
    model = SmallCnn().eval()
    with torch.no_grad():
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 15, 13)
    result = kiln.export(model, (x,), tmp_path / "out", name="cnn")
    assert "norm.running_mean" in result.weights
    fresh = torch.randn(2, 3, 15, 13)
    with torch.no_grad():
        want = model(fresh)
    close(first_output_from_c(result, [fresh], tmp_path, (2, 5)), want, rtol=1e-4,
          atol=1e-4)


CONVOLUTIONS = [  # (input, weight, bias?, stride, padding, dilation)
    ((2, 8, 15, 13), (16, 8, 3, 3), True, 1, 1, 1),
    ((1, 3, 17, 17), (5, 3, 5, 3), False, (2, 1), (2, 0), 1),
    ((3, 4, 9, 11), (6, 4, 3, 3), True, 2, 2, (2, 1)),
    ((2, 6, 400), (7, 6, 5), True, 3, 2, 2),          # 1-d
    ((1, 2, 6, 7, 5), (4, 2, 3, 2, 3), True, 1, 1, 1),  # 3-d
]


@pytest.mark.parametrize("case", range(len(CONVOLUTIONS)))
def test_exported_convolutions_are_matrix_products(case, tmp_path, capfd, monkeypatch):
    # Without torch, a convolution of one group over an NCHW input is kiln's
    # GEMM over the input's windows where they are (an implicit GEMM: no
    # columns laid out), not a loop per output element: right for strides
    # (gathers), padding, dilation, odd and 1-d/3-d shapes, with and without
    # a bias (CpuContraction.AConvolutionIsAGemmOverItsInputsWindows checks
    # the GEMM it is).
    input_shape, weight_shape, with_bias, stride, padding, dilation = CONVOLUTIONS[case]
    torch.manual_seed(case)
    convolve = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(input_shape)]
    weight = torch.randn(weight_shape)
    bias = torch.randn(weight_shape[0]) if with_bias else None

    def layer(x):
        return torch.relu(convolve(x, weight, bias, stride, padding, dilation))
    monkeypatch.setenv("KILN_LOGS", "loop_ir")
    try:
        result = kiln.export(layer, (torch.randn(input_shape),), tmp_path / "out", name="conv")
    finally:
        monkeypatch.delenv("KILN_LOGS")
    log = capfd.readouterr().err
    assert "kernel_convolution" in log and "convolution columns" not in log
    program = kiln.load_exported(result.directory, "conv")
    x = torch.randn(input_shape)
    close(program(x)[0], layer(x), rtol=1e-4, atol=1e-4)


# Ops that programs without torch lower natively, driven by op_db's own
# sample inputs: each sample is exported and its library checked against
# eager on the sample (kiln.export's check).
STANDALONE_OPS = ["nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.embedding",
                  "index_select", "gather", "nn.functional.max_pool2d",
                  "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "mm", "bmm",
                  "addmm"]


@pytest.mark.parametrize("name", STANDALONE_OPS)
def test_op_db_samples_export_natively(name, tmp_path):
    pytest.importorskip("expecttest")  # op_db's own dependency
    from torch.testing._internal.common_methods_invocations import op_db

    info = next(op for op in op_db if op.name == name and op.variant_test_name == "")
    exported = 0
    for number, sample in enumerate(info.sample_inputs("cpu", torch.float32)):
        if number >= 6:
            break
        tensors = [sample.input, *[a for a in sample.args if isinstance(a, torch.Tensor)]]
        if any(not isinstance(t, torch.Tensor) or t.numel() == 0 for t in tensors):
            continue
        if name in ("gather", "index_select", "nn.functional.embedding"):
            if any(not t.is_floating_point() and (t < 0).any() for t in tensors):
                continue  # torch wraps or raises; so does exported code

        slots, constants = [], list(sample.args)
        for position, argument in enumerate(sample.args):
            if isinstance(argument, torch.Tensor):
                slots.append(position)

        def call(x, *values, slots=tuple(slots), constants=constants, kwargs=sample.kwargs):
            args = list(constants)
            for slot, value in zip(slots, values):
                args[slot] = value
            return info.op(x, *args, **kwargs)

        try:
            kiln.export(call, tuple(tensors), tmp_path / f"s{number}", name=f"sample{number}")
        except kiln.Unsupported as error:
            assert "no native lowering" in str(error) or "not a tensor" in str(error), error
            continue
        exported += 1
    assert exported > 0
