"""Enums: str(), values, the factories' products."""
import torch

from _observe import describe, nnx


def observe(o):
    for enum in ("Nets", "Losses", "Optims", "Devices", "Checkpoints", "Activations", "Schedulers"):
        cls = getattr(nnx, enum)
        o[f"{enum}.values"] = sorted(str(m.value) for m in cls)
        o[f"{enum}.str_first"] = str(sorted(cls, key=lambda m: str(m.value))[0])
    o["Devices.CPU()"] = repr(nnx.Devices.CPU())
    o["Losses.BINARY_CROSS_ENTROPY()"] = type(nnx.Losses.BINARY_CROSS_ENTROPY()).__name__
    o["Losses.NEGATIVE_LOG_LIKELIHOOD()"] = type(nnx.Losses.NEGATIVE_LOG_LIKELIHOOD()).__name__
    net = torch.nn.Linear(2, 2)
    o.call("Optims.ADAM(net)", lambda: type(nnx.Optims.ADAM(net=net, lr_start=0.1, momentum=(0.9, 0.99),
                                                          weight_decay=0.0)).__name__)
    o.call("Optims.SGD_NESTEROV(net).nesterov", lambda: nnx.Optims.SGD_NESTEROV(
        net=net, lr_start=0.1, momentum=0.9, weight_decay=0.0).param_groups[0]["nesterov"])
    o.call("Nets.FEED_FWD(params)", lambda: type(nnx.Nets.FEED_FWD(params=nnx.NNParams(
        input_dim=2, output_dim=2, hidden_dims=[3], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU))).__name__)
    o.call("Checkpoints('last')", lambda: str(nnx.Checkpoints("last")))
    o.call("Optims('ADAM')", lambda: str(nnx.Optims("ADAM")), describe)
