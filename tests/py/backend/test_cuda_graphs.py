# mode="reduce-overhead" on the GPU: graphs recorded as CUDA graphs on their
# second call and replayed after, compared with eager on fresh inputs every
# call. Skips without a GPU.
import pytest
import torch

import kiln

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def _runner(compiled):
    return kiln.cache_info(compiled)["runners"][0]


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=3e-5, atol=3e-5)


@gpu
def test_a_graph_is_replayed_and_matches_eager_on_fresh_inputs():
    def fn(x, y):
        return torch.sin(x * y) + 1, (x - y).sum(-1)

    compiled = kiln.compile(fn, mode="reduce-overhead")
    for call in range(6):
        x = torch.randn(64, 300, device="cuda")
        y = torch.randn(64, 300, device="cuda")
        actual = compiled(x, y)
        for got, want in zip(actual, fn(x, y)):
            _close(got, want)
    assert "replayed as a CUDA graph" in _runner(compiled), _runner(compiled)
    assert kiln.cache_info(compiled)["entries"] == 1


@gpu
def test_results_kept_by_the_caller_are_not_overwritten_by_the_next_replay():
    compiled = kiln.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    inputs = [torch.randn(1000, device="cuda") for _ in range(5)]
    results = [compiled(x) for x in inputs]
    for x, result in zip(inputs, results):
        _close(result, x * 2 + 1)
    assert results[-1].data_ptr() != results[-2].data_ptr()


@gpu
def test_a_module_stack_with_matrix_products_is_one_replay():
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.LayerNorm(128), torch.nn.Linear(128, 256),
                                  torch.nn.GELU(), torch.nn.Linear(256, 128)) for _ in range(4)]
    model = torch.nn.Sequential(*blocks).cuda().eval()
    compiled = kiln.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(8, 16, 128, device="cuda")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        assert "replayed as a CUDA graph" in _runner(compiled), _runner(compiled)
        # A parameter given new storage: the recording reads the new one.
        with torch.no_grad():
            blocks[0][1].weight.data = torch.randn_like(blocks[0][1].weight)
        x = torch.randn(8, 16, 128, device="cuda")
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


@gpu
def test_graphs_that_write_their_inputs_run_plain_and_match_eager():
    def fn(x):
        x.add_(1)
        return x * 2

    compiled = kiln.compile(fn, mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(10, device="cuda")
        expected_x = x.clone()
        expected = fn(expected_x)
        actual = compiled(x)
        _close(actual, expected)
        _close(x, expected_x)
    assert "replayed" not in _runner(compiled)


@gpu
def test_a_view_of_an_input_stays_a_view():
    compiled = kiln.compile(lambda x: (x.t(), x.sum()), mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(4, 5, device="cuda")
        view, total = compiled(x)
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        _close(total, x.sum())


@gpu
def test_a_call_on_another_stream_is_ordered_with_it():
    compiled = kiln.compile(lambda x: torch.exp(x) - 1, mode="reduce-overhead")
    for _ in range(3):
        compiled(torch.randn(256, device="cuda"))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.randn(1 << 20, device="cuda")
        result = compiled(x)
        expected = torch.exp(x) - 1
    stream.synchronize()
    _close(result, expected)


def test_cpu_graphs_ignore_the_mode():
    compiled = kiln.compile(lambda x: x + 1, mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(5)
        _close(compiled(x), x + 1)
    assert "CUDA graph" not in _runner(compiled)
