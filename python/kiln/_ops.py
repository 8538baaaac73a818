# kiln's own graph ops that are not ATen operators, as the eager runner calls
# them (an Extern or Op node named kiln::<name> runs kiln._ops.<name>).
import torch


def set_grad_enabled(enabled):
    """Switches autograd recording inside a graph (`with torch.no_grad()`)."""
    torch._C._set_grad_enabled(enabled)
