# kiln's demo: compile a small model two ways (kiln.compile, and kiln as a
# torch.compile backend), check the results against eager PyTorch, and show
# the graph kiln captured.
import torch
import torch.nn as nn

import kiln
from kiln import _C


class Block(nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main():
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(8, 16, 64)

    with torch.no_grad():
        expected = model(x)
        compiled = kiln.compile(model)
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        print(f"kiln.compile(Block): matches eager, max abs diff "
              f"{(got - expected).abs().max().item():.2e}")

        backend = torch.compile(model, backend="kiln")
        torch.testing.assert_close(backend(x), expected)
        print("torch.compile(Block, backend='kiln'): matches eager")

    print(f"\nkiln's op registry knows {len(_C.op_names())} ATen ops.")
    info = kiln.cache_info(compiled)
    print(f"kiln's frontend captured Block.forward whole: {info['entries']} graph, "
          f"{info['hits']} cache hit(s).")
    print("The graph (KILN_LOGS=graph,guards prints it and its guards on every capture):\n")
    print(info["graphs"][-1])
    print("Its guards:")
    print(info["guards"][-1])


if __name__ == "__main__":
    main()
