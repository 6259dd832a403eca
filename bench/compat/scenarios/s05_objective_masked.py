"""supervised_objective() with class targets holding -100: two microbatches, accumulate 2, SGD lr 0.1."""
import torch

from _observe import describe, idp_rows, nnx, toy_model, weights


def observe(o):
    model = toy_model()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 4, generator=g)
    y = torch.tensor([0, -100, 2, 1, -100, -100, -100, 2])
    loader = [(x[:4], y[:4]), (x[4:], y[4:])]
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0,
                              accumulate_grad_batches=2)
    params = nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader)
    run = o.call("train", lambda: model.train(params, objective=nnx.supervised_objective()), describe)
    if run is not None:
        o["idps"] = idp_rows(run.idps)
    o["weights"] = weights(model.net)
