# Model workloads: transformers built from small configurations with random
# weights (nothing is downloaded), a hand-written GPT with Python-level
# dynamism, and two small CNNs (residual; depthwise separable). Inference
# only. Depends on torch and transformers.
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.workloads import Workload

BATCH, SEQUENCE, VOCABULARY = 4, 128, 8192     # a small serving batch
WIDTH, LAYERS, HEADS = 256, 4, 4


def _token_ids(device):
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, VOCABULARY, (BATCH, SEQUENCE), generator=generator).to(device)


def _transformer(model_class, config_class, **config):
    def build(device):
        import transformers
        model_config = getattr(transformers, config_class)(**config)
        model = getattr(transformers, model_class)(model_config).to(device).eval()
        return model, (_token_ids(device),)
    return build


def _vit(device):
    import transformers
    config = transformers.ViTConfig(image_size=96, patch_size=16, hidden_size=WIDTH,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    intermediate_size=4 * WIDTH)
    model = transformers.ViTModel(config, add_pooling_layer=False).to(device).eval()
    return model, (torch.randn(8, 3, 96, 96, device=device),)


class TinyGpt(nn.Module):
    """A GPT written the way research code often is: hyper-parameters in a dict
    read at run time, Python branches on them, a Python loop over blocks."""

    def __init__(self, config):
        super().__init__()
        self.config = dict(config)
        width = config["width"]
        self.token_embedding = nn.Embedding(config["vocabulary"], width)
        self.position_embedding = nn.Embedding(config["context"], width)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({
                "norm1": nn.LayerNorm(width), "qkv": nn.Linear(width, 3 * width),
                "proj": nn.Linear(width, width), "norm2": nn.LayerNorm(width),
                "up": nn.Linear(width, config["mlp_ratio"] * width),
                "down": nn.Linear(config["mlp_ratio"] * width, width),
            }) for _ in range(config["layers"]))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, config["vocabulary"], bias=False)

    def attention(self, block, x):
        batch, sequence, width = x.shape
        heads = self.config["heads"]
        q, k, v = block["qkv"](x).split(width, dim=-1)
        q, k, v = (t.view(batch, sequence, heads, width // heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (width // heads) ** -0.5
        mask = torch.ones(sequence, sequence, dtype=torch.bool, device=x.device).triu(1)
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return block["proj"]((weights @ v).transpose(1, 2).reshape(batch, sequence, width))

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        activation = F.gelu if self.config["activation"] == "gelu" else F.silu
        for index, block in enumerate(self.blocks):
            if self.config.get("skip_layers") and index in self.config["skip_layers"]:
                continue
            x = x + self.attention(block, block["norm1"](x))
            x = x + block["down"](activation(block["up"](block["norm2"](x))))
        return self.head(self.final_norm(x))


def _tiny_gpt(device):
    config = {"vocabulary": VOCABULARY, "context": 512, "width": WIDTH, "layers": LAYERS,
              "heads": HEADS, "mlp_ratio": 4, "activation": "gelu", "skip_layers": []}
    return TinyGpt(config).to(device).eval(), (_token_ids(device),)


def _conv_bn_relu(inputs, outputs, kernel=3, stride=1, groups=1):
    return [nn.Conv2d(inputs, outputs, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(outputs), nn.ReLU()]


class ResidualBlock(nn.Module):
    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn_relu(inputs, outputs, 3, stride),
                                  nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False), nn.BatchNorm2d(outputs))
        self.skip = (nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))
                     if stride != 1 or inputs != outputs else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


def _cnn(kind):
    def build(device):
        torch.manual_seed(0)
        if kind == "residual":   # a ResNet-18-like stem and four stages, narrower
            layers = [*_conv_bn_relu(3, 32, 7, 2), nn.MaxPool2d(3, 2, 1), ResidualBlock(32, 32, 1),
                      ResidualBlock(32, 64, 2), ResidualBlock(64, 128, 2), ResidualBlock(128, 256, 2)]
        else:                    # MobileNet-like: depthwise 3x3 and pointwise 1x1 layers
            layers = _conv_bn_relu(3, 32, 3, 2)
            for inputs, outputs, stride in ((32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2)):
                layers += _conv_bn_relu(inputs, inputs, 3, stride, groups=inputs) + _conv_bn_relu(inputs, outputs, 1)
        model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))
        with torch.no_grad():   # non-trivial running statistics
            for module in model.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.running_mean.uniform_(-0.5, 0.5)
                    module.running_var.uniform_(0.5, 2.0)
        image = torch.randn(8, 3, 112, 112, generator=torch.Generator().manual_seed(0))
        return model.to(device).eval(), (image.to(device),)
    return build


_DECODER = dict(vocab_size=VOCABULARY, use_cache=False, bos_token_id=0, eos_token_id=0)
MODELS = [
    Workload("GPT-2 (4 layers, 256 wide) 4x128", "model",
             _transformer("GPT2LMHeadModel", "GPT2Config", n_embd=WIDTH, n_layer=LAYERS,
                          n_head=HEADS, n_positions=512, **_DECODER)),
    Workload("BERT (4 layers, 256 wide) 4x128", "model",
             _transformer("BertModel", "BertConfig", vocab_size=VOCABULARY, hidden_size=WIDTH,
                          num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                          intermediate_size=4 * WIDTH)),
    Workload("LLaMA-style (4 layers, 256 wide, GQA) 4x128", "model",
             _transformer("LlamaForCausalLM", "LlamaConfig", hidden_size=WIDTH,
                          num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                          num_key_value_heads=2, intermediate_size=688, **_DECODER)),
    Workload("T5 encoder (4 layers, 256 wide) 4x128", "model",
             _transformer("T5EncoderModel", "T5Config", vocab_size=VOCABULARY, d_model=WIDTH,
                          d_kv=WIDTH // HEADS, d_ff=4 * WIDTH, num_layers=LAYERS,
                          num_heads=HEADS)),
    Workload("ViT (4 layers, 256 wide) 8x3x96x96", "model", _vit),
    Workload("hand-written GPT, Python dynamism, 4x128", "model", _tiny_gpt),
    Workload("ResNet-style CNN 8x3x112x112", "model", _cnn("residual")),
    Workload("MobileNet-style CNN 8x3x112x112", "model", _cnn("depthwise")),
]
